package acknowledger_test

import (
	"context"
	"log"

	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/wire"
)

// A checkpointing source: records are staged under the checkpoint that
// covers them and acknowledged when it completes. It needs a cluster at
// localhost:9092.
func Example() {
	ctx := context.Background()
	c, err := shareconsumer.New(
		shareconsumer.SeedBrokers("localhost:9092"),
		shareconsumer.Group("sink"),
		shareconsumer.Topics("events"),
		shareconsumer.Mode(shareconsumer.Transactional),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	a, err := acknowledger.New(
		acknowledger.SeedBrokers("localhost:9092"),
		acknowledger.TransactionalID("sink-acks-1"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close(ctx)
	if err := a.InitTransactions(ctx); err != nil {
		log.Fatal(err)
	}
	for checkpoint := int64(1); ; checkpoint++ {
		recs, err := c.Poll(ctx)
		if err != nil {
			log.Fatal(err)
		}
		// ... write recs to the sink as part of the checkpoint ...
		if err := a.Stage(checkpoint, c.Acks(recs, wire.AckAccept), c.GroupMetadata()); err != nil {
			log.Print(err) // a lock ran out: those records come again
			continue
		}
		// ... once the sink has made the checkpoint durable:
		if err := a.CommitCheckpoint(ctx, checkpoint); err != nil {
			log.Print(err) // dropped; its records come again
		}
	}
}
