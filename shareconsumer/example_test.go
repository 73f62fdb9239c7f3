package shareconsumer_test

import (
	"context"
	"errors"
	"log"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/txnclient"
	"github.com/kshare-go/kshare/wire"
)

// A consume-transform-produce loop whose outputs and input acknowledgements
// commit in one transaction. It needs a cluster at localhost:9092.
func Example() {
	ctx := context.Background()
	c, err := shareconsumer.New(
		shareconsumer.SeedBrokers("localhost:9092"),
		shareconsumer.Group("orders-processor"),
		shareconsumer.Topics("orders"),
		shareconsumer.Mode(shareconsumer.Transactional),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	p, err := producer.New(producer.SeedBrokers("localhost:9092"), producer.TransactionalID("orders-processor-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	if err := p.InitTransactions(ctx); err != nil {
		log.Fatal(err)
	}
	for {
		recs, err := c.Poll(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if err := p.BeginTransaction(); err != nil {
			log.Fatal(err)
		}
		for _, r := range recs {
			p.Produce(ctx, &kgo.Record{Topic: "invoices", Key: r.Key, Value: r.Value}, nil)
		}
		err = p.SendShareAcksToTransaction(ctx, c.Acks(recs, wire.AckAccept), c.GroupMetadata())
		if err == nil {
			err = p.CommitTransaction(ctx)
		}
		switch {
		case errors.Is(err, txnclient.ErrAbortable):
			// Outputs discarded; the inputs come back to the group.
			if err := p.AbortTransaction(ctx); err != nil {
				log.Fatal(err)
			}
		case err != nil:
			log.Fatal(err)
		}
	}
}

// Explicit acknowledgement: accept what was processed, release what should
// be retried, reject what can never be processed.
func ExampleConsumer_Ack() {
	ctx := context.Background()
	c, err := shareconsumer.New(
		shareconsumer.SeedBrokers("localhost:9092"),
		shareconsumer.Group("mailer"),
		shareconsumer.Topics("emails"),
		shareconsumer.Mode(shareconsumer.Explicit),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	recs, err := c.Poll(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		typ := wire.AckAccept
		if n, _ := c.DeliveryCount(r); n > 3 {
			typ = wire.AckReject
		}
		if err := c.Ack(r, typ); err != nil {
			log.Print(err) // ErrLockExpired: the record will come again
		}
	}
	if err := c.Commit(ctx); err != nil {
		log.Print(err)
	}
}
