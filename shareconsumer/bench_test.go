package shareconsumer_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/shareconsumer"
)

// BenchmarkImplicitVsKgo reads the same records, with the same fetch sizes,
// from the bundled broker with this consumer in Implicit mode and with
// kgo's share consumer (which also accepts a poll's records on the next
// poll), alternating which goes first, and reports both throughputs and
// their ratio. Each iteration reads the whole topic once with each, in a
// fresh share group. With -short it reads fewer records.
func BenchmarkImplicitVsKgo(b *testing.B) {
	const (
		partitions = 3
		recordSize = 100
		maxRecords = 500
	)
	records := 200_000
	if testing.Short() {
		records = 20_000
	}
	e := newEnv(b)
	e.ctx = context.Background() // iterations may outlast the test timeout
	e.createTopic("bench", partitions)
	value := bytes.Repeat([]byte("x"), recordSize)
	batch := make([]*kgo.Record, 0, 1000)
	for i := range records {
		batch = append(batch, &kgo.Record{Topic: "bench", Partition: int32(i % partitions), Value: value})
		if len(batch) == cap(batch) || i == records-1 {
			require.NoError(b, e.admin.ProduceSync(e.ctx, batch...).FirstErr())
			batch = batch[:0]
		}
	}

	var kshareTime, kgoTime time.Duration
	b.ResetTimer()
	for i := range b.N {
		runs := []func(){
			func() { kshareTime += readWithKshare(b, e, fmt.Sprintf("ks-%d", i), records, maxRecords) },
			func() { kgoTime += readWithKgo(b, e, fmt.Sprintf("kgo-%d", i), records, maxRecords) },
		}
		if i%2 == 1 {
			runs[0], runs[1] = runs[1], runs[0]
		}
		for _, run := range runs {
			run()
		}
	}
	b.StopTimer()
	total := float64(records * b.N)
	ks, kg := total/kshareTime.Seconds(), total/kgoTime.Seconds()
	b.ReportMetric(ks, "kshare-rec/s")
	b.ReportMetric(kg, "kgo-rec/s")
	b.ReportMetric(ks/kg, "ratio")
	b.Logf("%d records of %d bytes, %d partitions, %d iterations\n"+
		"consumer          records/s\n"+
		"kshare implicit   %10.0f\n"+
		"kgo share         %10.0f\n"+
		"ratio             %10.2f", records, recordSize, partitions, b.N, ks, kg, ks/kg)
}

func readWithKshare(b *testing.B, e *env, group string, records int, maxRecords int32) time.Duration {
	e.groupConfig(group)
	start := time.Now()
	cons, err := shareconsumer.New(
		shareconsumer.SeedBrokers(e.c.Bootstrap()...),
		shareconsumer.Group(group),
		shareconsumer.Topics("bench"),
		shareconsumer.MaxPollRecords(maxRecords),
	)
	require.NoError(b, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := 0
	for n < records {
		recs, err := cons.Poll(ctx)
		require.NoError(b, err)
		n += len(recs)
	}
	elapsed := time.Since(start)
	require.NoError(b, cons.Close(ctx))
	return elapsed
}

func readWithKgo(b *testing.B, e *env, group string, records int, maxRecords int32) time.Duration {
	e.groupConfig(group)
	start := time.Now()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.c.Bootstrap()...),
		kgo.ShareGroup(group),
		kgo.ConsumeTopics("bench"),
		kgo.ShareMaxRecords(maxRecords),
	)
	require.NoError(b, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := 0
	for n < records {
		fs := cl.PollFetches(ctx)
		require.NoError(b, ctx.Err())
		n += fs.NumRecords()
	}
	return time.Since(start)
}
