package producer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/wire"
)

// BenchmarkStaleCoordinatorChurn measures the stale-answer defense under
// KAFKA-21181 (LegacyStaleCoordinator 500ms on 3 nodes) while the
// producer's __transaction_state partition moves to the next node every
// period: a producer commits one-record transactions for the run's
// duration (20s, 3s with -short), aborting the ones that fail abortable or
// in doubt and replacing itself after a fatal error. Moves faster than the
// stale window let leadership go A to B to A inside it. It reports the
// fatal errors (the defense must keep them at 0), the moves, and the
// commits and aborts per run.
//
//	go test -run '^$' -bench StaleCoordinatorChurn -benchtime 1x ./producer/
func BenchmarkStaleCoordinatorChurn(b *testing.B) {
	run := 20 * time.Second
	if testing.Short() {
		run = 3 * time.Second
	}
	for _, period := range []time.Duration{150 * time.Millisecond, time.Second} {
		b.Run(fmt.Sprintf("moves every %v", period), func(b *testing.B) {
			var fatal, moved, commits, aborts int64
			for range b.N {
				f, m, c, a := churn(b, period, run)
				fatal, moved, commits, aborts = fatal+f, moved+m, commits+c, aborts+a
			}
			n := float64(b.N)
			b.ReportMetric(float64(fatal)/n, "fatal/run")
			b.ReportMetric(float64(moved)/n, "moves/run")
			b.ReportMetric(float64(commits)/n, "commits/run")
			b.ReportMetric(float64(aborts)/n, "aborts/run")
		})
	}
}

// churn runs one measurement and returns its counts.
func churn(b *testing.B, period, run time.Duration) (fatal, moves, commits, aborts int64) {
	c := newCluster(b, broker.Nodes(3), broker.LegacyStaleCoordinator(500*time.Millisecond))
	const topic, txnID = "churn", "churning-producer"
	createTopic(b, c, topic, 1)
	ctx := testCtx(b)
	part := c.CoordinatorPartition(1, txnID)
	newP := func() *Producer {
		p, err := New(SeedBrokers(c.Bootstrap()...), TransactionalID(txnID), Linger(0), TransactionTimeout(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for {
			err := p.InitTransactions(ctx)
			if err == nil {
				return p
			}
			if ctx.Err() != nil {
				b.Fatal(err)
			}
		}
	}
	p := newP()
	defer func() { _ = p.Close(ctx) }()
	// Each move goes to a node picked at random among the others, so that
	// leadership often comes back to a node it just left (A to B to A).
	// Moves start every period (back to back when one takes longer).
	moved, stop := moveLeaders(b, c, func(prev time.Time) time.Time { return prev.Add(period) },
		func(int) (string, int32) { return wire.TransactionStateTopic, part },
		func(leader, nodes int32) int32 { return (leader + 1 + rand.Int32N(nodes-1)) % nodes })
	defer stop()
	b.ResetTimer()
	end := time.Now().Add(run)
	for i := 0; time.Now().Before(end); i++ {
		err := p.BeginTransaction()
		if err == nil {
			p.Produce(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", i)}, nil)
			err = p.CommitTransaction(ctx)
		}
		switch {
		case err == nil:
			commits++
		case errors.Is(err, kshare.ErrFatal):
			fatal++
			b.Logf("fatal: %v", err)
			_ = p.Close(ctx)
			p = newP()
		default:
			aborts++
			if aerr := p.AbortTransaction(ctx); aerr != nil && !errors.Is(aerr, kshare.ErrCommitted) {
				if errors.Is(aerr, kshare.ErrFatal) {
					fatal++
					b.Logf("fatal abort: %v", aerr)
					_ = p.Close(context.Background())
					p = newP()
				}
			}
		}
	}
	b.StopTimer()
	return fatal, moved.Load(), commits, aborts
}
