package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/producer"
)

// Records produced in a transaction become visible to read_committed
// readers when it commits, and never when it aborts.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := broker.NewCluster() // one node, in this process
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
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		log.Fatal(err)
	}

	p, err := producer.New(
		producer.SeedBrokers(seeds...),
		producer.TransactionalID("orders-writer"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	if err := p.InitTransactions(ctx); err != nil {
		log.Fatal(err) // kshare.ErrFatal: a configuration the cluster refuses
	}

	// transaction runs one transaction of values and commits it, or aborts
	// it when abort is set.
	transaction := func(abort bool, values ...string) {
		if err := p.BeginTransaction(); err != nil {
			log.Fatal(err)
		}
		for _, v := range values {
			p.Produce(ctx, &kgo.Record{Topic: "orders", Value: []byte(v)}, nil)
		}
		if abort {
			if err := p.AbortTransaction(ctx); err != nil {
				log.Fatal(err)
			}
			return
		}
		switch err := p.CommitTransaction(ctx); {
		case err == nil:
		case errors.Is(err, kshare.ErrAbortable):
			if err := p.AbortTransaction(ctx); err != nil { // and redo the work
				log.Fatal(err)
			}
		case errors.Is(err, kshare.ErrInDoubt):
			if err := p.AbortTransaction(ctx); err != nil && !errors.Is(err, kshare.ErrCommitted) {
				log.Fatal(err)
			}
		default:
			log.Fatal(err) // kshare.ErrFatal: fenced by a newer producer, for one
		}
	}
	transaction(false, "a", "b")
	transaction(true, "c")
	transaction(false, "d")

	reader, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		log.Fatal(err)
	}
	defer reader.Close()
	var seen []string
	for len(seen) < 3 {
		fetches := reader.PollFetches(ctx)
		if err := fetches.Err0(); err != nil {
			log.Fatal(err)
		}
		fetches.EachRecord(func(r *kgo.Record) { seen = append(seen, string(r.Value)) })
	}
	m := p.Metrics()
	fmt.Println(seen)
	fmt.Println("committed", m.TransactionsCommitted, "aborted", m.TransactionsAborted)
	// Output:
	// [a b d]
	// committed 2 aborted 1
}
