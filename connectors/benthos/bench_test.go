package benthos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// benchRecords is how many records each benchmark iteration copies.
const benchRecords = 20000

// BenchmarkPipeline copies benchRecords records exactly once on one bundled
// broker, with the Benthos pipeline (kshare_share -> mapping ->
// kshare_txn) and with the SDK's own consume-transform-produce loop (the
// loop of examples/ctp/worker.go, one worker), each with polls of up to
// 500 records and one transaction per poll. It reports records/s from the
// first poll to the last acknowledgement; writing the input is not timed.
//
//	go test -run '^$' -bench Pipeline -benchtime 3x .
func BenchmarkPipeline(b *testing.B) {
	b.Run("benthos", func(b *testing.B) {
		benchCopy(b, func(t testing.TB, r *run) func() {
			yaml := strings.Replace(basicPipeline, "max_poll_records: 100", "max_poll_records: 500", 1)
			p := start(t, testEnv(t, &observed{}, nil), r.yaml(yaml))
			return func() { p.stop(t, 30*time.Second) }
		})
	})
	b.Run("sdk-loop", func(b *testing.B) {
		benchCopy(b, func(t testing.TB, r *run) func() {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- sdkLoop(ctx, r) }()
			return func() {
				cancel()
				require.NoError(t, <-done)
			}
		})
	})
}

// benchCopy runs b.N copies, each on fresh topics of one cluster: start
// starts the pipeline under test and returns what stops it.
func benchCopy(b *testing.B, start func(t testing.TB, r *run) (stop func())) {
	c := newCluster(b)
	var total time.Duration
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		r := c.newRun(b, fmt.Sprintf("bench-%d", i), 3, benchRecords, 0)
		began := time.Now()
		b.StartTimer()
		stop := start(b, r)
		r.waitAcknowledged(b, 5*time.Minute)
		b.StopTimer()
		total += time.Since(began)
		stop()
	}
	b.ReportMetric(float64(benchRecords*b.N)/total.Seconds(), "records/s")
}

// sdkLoop is the consume-transform-produce loop of examples/ctp/worker.go
// without its fault hooks: poll, one transaction per poll carrying the
// copies and the acknowledgements, abort and redo on ErrAbortable.
func sdkLoop(ctx context.Context, r *run) error {
	cons, err := shareconsumer.New(
		shareconsumer.SeedBrokers(r.c.seeds...),
		shareconsumer.Group(r.group),
		shareconsumer.Topics(r.in),
		shareconsumer.Mode(shareconsumer.Transactional),
		shareconsumer.MaxPollRecords(500),
		shareconsumer.MaxWait(100*time.Millisecond),
		shareconsumer.SetGroupConfig(shareconsumer.GroupConfig{AutoOffsetReset: shareconsumer.ResetEarliest}),
	)
	if err != nil {
		return err
	}
	prod, err := producer.New(producer.SeedBrokers(r.c.seeds...), producer.TransactionalID(r.outTxn))
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = prod.Close(closeCtx)
		_ = cons.Close(closeCtx)
	}()
	if err := prod.InitTransactions(ctx); err != nil {
		return err
	}
	for {
		records, err := cons.Poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if err := prod.BeginTransaction(); err != nil {
			return err
		}
		for _, rec := range records {
			prod.Produce(ctx, &kgo.Record{Topic: r.out, Key: rec.Key, Value: rec.Value}, nil)
		}
		err = prod.SendShareAcksToTransaction(ctx, cons.Acks(records, kshare.AckAccept), cons.GroupMetadata())
		if err == nil {
			err = prod.CommitTransaction(ctx)
		}
		if errors.Is(err, kshare.ErrAbortable) || errors.Is(err, kshare.ErrInDoubt) {
			if aerr := prod.AbortTransaction(ctx); aerr != nil && !errors.Is(aerr, kshare.ErrCommitted) {
				return aerr
			}
		} else if err != nil {
			return err
		}
	}
}
