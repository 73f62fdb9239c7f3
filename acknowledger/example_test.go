package acknowledger_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// A checkpointing source: the records a checkpoint covers are staged under
// it and acknowledged, in a transaction of the acknowledger's own, when it
// completes. A checkpoint that fails gives its records back to the group
// at once.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := broker.NewCluster() // one node, in this process
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	seeds := cluster.Bootstrap()
	writer, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		log.Fatal(err)
	}
	defer writer.Close()
	if _, err := kadm.NewClient(writer).CreateTopic(ctx, 1, 1, nil, "events"); err != nil {
		log.Fatal(err)
	}
	for _, v := range []string{"e1", "e2", "e3", "e4"} {
		if err := writer.ProduceSync(ctx, &kgo.Record{Topic: "events", Value: []byte(v)}).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}

	c, err := shareconsumer.New(
		shareconsumer.SeedBrokers(seeds...),
		shareconsumer.Group("sink"),
		shareconsumer.Topics("events"),
		shareconsumer.Mode(shareconsumer.Transactional), // never acknowledges by itself
		shareconsumer.SetGroupConfig(shareconsumer.GroupConfig{AutoOffsetReset: shareconsumer.ResetEarliest}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	a, err := acknowledger.New(
		acknowledger.SeedBrokers(seeds...),
		acknowledger.TransactionalID("sink-acks-1"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close(ctx) // before the consumer's Close (deferred calls run last first)
	if err := a.InitTransactions(ctx); err != nil {
		log.Fatal(err)
	}

	poll := func(n int) []*kgo.Record {
		var recs []*kgo.Record
		for len(recs) < n {
			polled, err := c.Poll(ctx)
			if err != nil {
				log.Fatal(err)
			}
			recs = append(recs, polled...)
		}
		slices.SortFunc(recs, func(a, b *kgo.Record) int { return int(a.Offset - b.Offset) })
		return recs
	}
	stage := func(id int64, recs []*kgo.Record) {
		var vs []string
		for _, r := range recs {
			n, _ := c.DeliveryCount(r)
			vs = append(vs, fmt.Sprintf("%s(delivery %d)", r.Value, n))
		}
		fmt.Println("checkpoint", id, "stages", vs)
		// The consumer checks the locks now and renews them until the
		// checkpoint commits or fails.
		if err := a.Stage(id, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()); err != nil {
			log.Fatal(err) // shareconsumer.ErrLockExpired: redo the work when they come back
		}
	}

	recs := poll(4)
	stage(1, recs[:2])
	stage(2, recs[2:])
	if err := a.CommitCheckpoint(ctx, 1); err != nil {
		log.Fatal(err) // kshare.ErrAbortable: the checkpoint is dropped, its records come back
	}
	if err := a.AbortCheckpoint(2); err != nil { // checkpoint 2 failed elsewhere
		log.Fatal(err)
	}

	again := poll(2) // released at once
	stage(3, again)
	if err := a.CommitCheckpoint(ctx, 3); err != nil {
		log.Fatal(err)
	}
	m := a.Metrics()
	fmt.Println("transactions", m.TransactionsCommitted, "acknowledgements", m.ShareAcksCommitted)
	// Output:
	// checkpoint 1 stages [e1(delivery 1) e2(delivery 1)]
	// checkpoint 2 stages [e3(delivery 1) e4(delivery 1)]
	// checkpoint 3 stages [e3(delivery 2) e4(delivery 2)]
	// transactions 2 acknowledgements 4
}
