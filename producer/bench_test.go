package producer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/broker"
)

// benchWorkload is what both producers do in one transaction.
type benchWorkload struct {
	topic      string
	records    int // per transaction
	valueBytes int
}

func (w benchWorkload) batch(prefix string, txn int) []*kgo.Record {
	out := make([]*kgo.Record, w.records)
	value := make([]byte, w.valueBytes)
	for i := range out {
		out[i] = &kgo.Record{
			Topic: w.topic,
			Key:   fmt.Appendf(nil, "%s-%08d-%06d", prefix, txn, i),
			Value: value,
		}
	}
	return out
}

// BenchmarkProducerVsKgo compares this producer with kgo's own transactional
// producer on the bundled broker: each iteration runs one transaction of
// the same records (same count, key and value sizes, topic, linger and
// compression) with each producer, alternately, and the time of each is
// summed separately. It reports both throughputs (records/s) and their
// ratio (kshare/kgo, target >= 0.9). With -short the transactions are
// smaller, for CI: go test -run XXX -bench ProducerVsKgo -benchtime 200x -short.
func BenchmarkProducerVsKgo(b *testing.B) {
	w := benchWorkload{topic: "bench", records: 2000, valueBytes: 200}
	if testing.Short() {
		w.records = 200
	}
	const partitions = 6
	c := newCluster(b, broker.Nodes(1), broker.DefaultPartitions(partitions))
	createTopic(b, c, w.topic, partitions)
	ctx := context.Background()
	linger := 10 * time.Millisecond
	codec := kgo.SnappyCompression()

	ours := newProducer(b, c, "bench-kshare", Linger(linger), Compression(codec))
	theirs, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.TransactionalID("bench-kgo"),
		kgo.ProducerLinger(linger), kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic(w.topic))
	if err != nil {
		b.Fatal(err)
	}
	defer theirs.Close()

	var failures atomic.Int64
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failures.Add(1)
		}
	}
	runOurs := func(txn int) time.Duration {
		recs := w.batch("kshare", txn)
		start := time.Now()
		if err := ours.BeginTransaction(); err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			ours.Produce(ctx, r, promise)
		}
		if err := ours.CommitTransaction(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	runTheirs := func(txn int) time.Duration {
		recs := w.batch("kgo", txn)
		start := time.Now()
		if err := theirs.BeginTransaction(); err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			theirs.Produce(ctx, r, promise)
		}
		if err := theirs.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if err := theirs.EndTransaction(ctx, kgo.TryCommit); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	// Warm both up: metadata, connections, producer ids.
	runOurs(-1)
	runTheirs(-1)

	var oursTime, theirsTime time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			oursTime += runOurs(i)
			theirsTime += runTheirs(i)
		} else {
			theirsTime += runTheirs(i)
			oursTime += runOurs(i)
		}
	}
	b.StopTimer()
	if n := failures.Load(); n > 0 {
		b.Fatalf("%d records failed", n)
	}
	total := float64(b.N * w.records)
	oursRate := total / oursTime.Seconds()
	theirsRate := total / theirsTime.Seconds()
	b.ReportMetric(oursRate, "kshare-records/s")
	b.ReportMetric(theirsRate, "kgo-records/s")
	b.ReportMetric(oursRate/theirsRate, "ratio")
	b.Logf("\n%-8s %12s %14s %12s\n%-8s %12.0f %14.1f %12s\n%-8s %12.0f %14.1f %12s\n%-8s %12.3f\n"+
		"(%d transactions of %d records, %d-byte values, %d partitions, linger %v, snappy)",
		"producer", "records/s", "MB/s (values)", "txn/s",
		"kshare", oursRate, oursRate*float64(w.valueBytes)/1e6, fmt.Sprintf("%.1f", float64(b.N)/oursTime.Seconds()),
		"kgo", theirsRate, theirsRate*float64(w.valueBytes)/1e6, fmt.Sprintf("%.1f", float64(b.N)/theirsTime.Seconds()),
		"ratio", oursRate/theirsRate,
		b.N, w.records, w.valueBytes, partitions, linger)
}
