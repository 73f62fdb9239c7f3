package producer_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/txnclient"
	"github.com/kshare-go/kshare/wire"
)

// Output records and the acknowledgements of the input records commit
// together.
func Example() {
	ctx := context.Background()
	p, err := producer.New(
		producer.SeedBrokers("127.0.0.1:9092"),
		producer.TransactionalID("ctp-worker-1"),
		producer.TransactionTimeout(30*time.Second),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	if err := p.InitTransactions(ctx); err != nil {
		log.Fatal(err)
	}

	if err := p.BeginTransaction(); err != nil {
		log.Fatal(err)
	}
	p.Produce(ctx, &kgo.Record{Topic: "output", Value: []byte("transformed")}, nil)

	var acks wire.ShareAcks // normally built by the share consumer
	acks.Add("input", [16]byte{}, 0, wire.AckedRecord{Offset: 42, Type: wire.AckAccept})
	meta := wire.ShareGroupMetadata{GroupID: "workers", MemberID: "member-id", MemberEpoch: 1}
	if err := p.SendShareAcksToTransaction(ctx, &acks, meta); err != nil {
		log.Fatal(err) // ErrShareAcksUnsupported on clusters without KIP-1289
	}

	switch err := p.CommitTransaction(ctx); {
	case err == nil:
	case errors.Is(err, txnclient.ErrAbortable):
		if err := p.AbortTransaction(ctx); err != nil {
			log.Fatal(err)
		}
	default:
		log.Fatal(err) // ErrFatal: fenced by a newer producer, for example
	}
	log.Printf("%+v", p.Metrics())
}
