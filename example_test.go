package kshare_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// One exactly-once consume-transform-produce transaction, end to end: a
// bundled cluster in this process, input records, a share consumer that
// never acknowledges by itself, and a transactional producer whose
// transaction carries both the output records and the acknowledgements of
// the inputs. Both commit, or neither does.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A one-node cluster with KIP-1289, and the input.
	cluster, err := broker.NewCluster()
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	seeds := cluster.Bootstrap()
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).CreateTopics(ctx, 1, 1, nil, "orders", "invoices"); err != nil {
		log.Fatal(err)
	}
	for _, v := range []string{"apple", "pear", "plum"} {
		if err := admin.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte(v)}).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}

	cons, err := shareconsumer.New(
		shareconsumer.SeedBrokers(seeds...),
		shareconsumer.Group("billing"),
		shareconsumer.Topics("orders"),
		shareconsumer.Mode(shareconsumer.Transactional),
		// The input was written before the group existed.
		shareconsumer.SetGroupConfig(shareconsumer.GroupConfig{AutoOffsetReset: shareconsumer.ResetEarliest}),
	)
	if err != nil {
		log.Fatal(err)
	}
	prod, err := producer.New(
		producer.SeedBrokers(seeds...),
		producer.TransactionalID("billing-1"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		// The producer first: it ends a transaction left open; the
		// consumer then releases what it still holds.
		prod.Close(ctx)
		cons.Close(ctx)
	}()
	if err := prod.InitTransactions(ctx); err != nil {
		log.Fatal(err)
	}

	var records []*kgo.Record
	for len(records) < 3 {
		polled, err := cons.Poll(ctx)
		if err != nil {
			log.Fatal(err)
		}
		records = append(records, polled...)
	}

	// The transaction: outputs, the inputs' acknowledgements, commit.
	if err := prod.BeginTransaction(); err != nil {
		log.Fatal(err)
	}
	for _, r := range records {
		prod.Produce(ctx, &kgo.Record{Topic: "invoices", Value: []byte("invoice for " + string(r.Value))}, nil)
	}
	err = prod.SendShareAcksToTransaction(ctx, cons.Acks(records, kshare.AckAccept), cons.GroupMetadata())
	if err == nil {
		err = prod.CommitTransaction(ctx)
	}
	switch {
	case err == nil:
	case errors.Is(err, kshare.ErrAbortable):
		// Nothing committed: abort; the inputs come back at once.
		if err := prod.AbortTransaction(ctx); err != nil {
			log.Fatal(err)
		}
	case errors.Is(err, kshare.ErrInDoubt):
		// The commit's answer was lost: the abort learns the outcome.
		if err := prod.AbortTransaction(ctx); err != nil && !errors.Is(err, kshare.ErrCommitted) {
			log.Fatal(err)
		}
	default:
		log.Fatal(err) // kshare.ErrFatal, ErrUnsupported, ErrUsage, ErrClosed
	}

	// What a read_committed reader sees, and what the group acknowledged.
	reader, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("invoices"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		log.Fatal(err)
	}
	defer reader.Close()
	var invoices []string
	for len(invoices) < 3 {
		fetches := reader.PollFetches(ctx)
		if err := fetches.Err0(); err != nil {
			log.Fatal(err)
		}
		fetches.EachRecord(func(r *kgo.Record) { invoices = append(invoices, string(r.Value)) })
	}
	slices.Sort(invoices)
	fmt.Println(strings.Join(invoices, "\n"))
	fmt.Println("acknowledged:", prod.Metrics().ShareAcksCommitted)
	// Output:
	// invoice for apple
	// invoice for pear
	// invoice for plum
	// acknowledged: 3
}
