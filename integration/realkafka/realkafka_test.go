package realkafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare/integration/kafkatest"
	"github.com/kshare-go/kshare/internal/testkit"
)

// testTimeout bounds every test of this package against the real broker.
const testTimeout = 2 * time.Minute

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// uniqueName returns prefix plus a random suffix, so reruns against the same
// long-lived broker never collide.
func uniqueName(t testing.TB, prefix string) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

// readUntilSentinels consumes every partition of topic from the start until
// each has delivered a record whose value is sentinel, and returns the values
// before it, per partition.
func readUntilSentinels(ctx context.Context, t testing.TB, cl *kgo.Client, partitions int32, sentinel string) map[int32][]string {
	t.Helper()
	got := make(map[int32][]string)
	done := make(map[int32]bool)
	for int32(len(done)) < partitions {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d partitions to their sentinel before the deadline; read %v", len(done), partitions, got)
		}
		fetches.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s[%d]: %v", topic, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			switch {
			case done[r.Partition]:
				t.Errorf("partition %d: record %q after the sentinel", r.Partition, r.Value)
			case string(r.Value) == sentinel:
				done[r.Partition] = true
			default:
				got[r.Partition] = append(got[r.Partition], string(r.Value))
			}
		})
	}
	return got
}

func consumeFromStart(topic string, partitions int32) kgo.Opt {
	offsets := make(map[int32]kgo.Offset)
	for p := range partitions {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	return kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
}

func TestKgoProduceConsume(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	const partitions = 2
	topic := uniqueName(t, "kshare-realkafka-smoke")
	admin := testkit.Client(t, seeds)
	testkit.CreateTopic(ctx, t, admin, topic, partitions)

	producer := testkit.Client(t, seeds, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := make(map[int32][]string)
	var records []*kgo.Record
	for i := range 20 {
		p := int32(i % partitions)
		v := fmt.Sprintf("r%d", i)
		want[p] = append(want[p], v)
		records = append(records, &kgo.Record{Partition: p, Value: []byte(v)})
	}
	for p := range int32(partitions) {
		records = append(records, &kgo.Record{Partition: p, Value: []byte("end")})
	}
	if err := producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	consumer := testkit.Client(t, seeds, consumeFromStart(topic, partitions))
	got := readUntilSentinels(ctx, t, consumer, partitions, "end")
	for p := range int32(partitions) {
		if !slices.Equal(got[p], want[p]) {
			t.Errorf("partition %d: got %q, want %q", p, got[p], want[p])
		}
	}
}

func TestKgoTransactionsCommitAndAbort(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	const partitions = 2
	topic := uniqueName(t, "kshare-realkafka-txn")
	admin := testkit.Client(t, seeds)
	testkit.CreateTopic(ctx, t, admin, topic, partitions)

	txn := testkit.Client(t, seeds,
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(topic),
		kgo.TransactionTimeout(time.Minute),
	)
	want := make(map[int32][]string)
	for i, end := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort, kgo.TryCommit, kgo.TryAbort} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatalf("transaction %d: begin: %v", i, err)
		}
		var records []*kgo.Record
		for j := range 6 {
			p := int32(j % partitions)
			v := fmt.Sprintf("t%d-r%d", i, j)
			if end == kgo.TryCommit {
				want[p] = append(want[p], v)
			}
			records = append(records, &kgo.Record{Partition: p, Value: []byte(v)})
		}
		// Synchronous so that aborted records are in the log before the
		// abort marker hides them.
		if err := txn.ProduceSync(ctx, records...).FirstErr(); err != nil {
			t.Fatalf("transaction %d: produce: %v", i, err)
		}
		if err := txn.EndTransaction(ctx, end); err != nil {
			t.Fatalf("transaction %d: end (commit=%v): %v", i, end, err)
		}
	}

	// A non-transactional sentinel after the last marker tells the reader
	// that everything before it has been decided.
	plain := testkit.Client(t, seeds, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var sentinels []*kgo.Record
	for p := range int32(partitions) {
		sentinels = append(sentinels, &kgo.Record{Partition: p, Value: []byte("end")})
	}
	if err := plain.ProduceSync(ctx, sentinels...).FirstErr(); err != nil {
		t.Fatalf("produce sentinels: %v", err)
	}

	committed := testkit.Client(t, seeds, consumeFromStart(topic, partitions), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := readUntilSentinels(ctx, t, committed, partitions, "end")
	for p := range int32(partitions) {
		if !slices.Equal(got[p], want[p]) {
			t.Errorf("read_committed partition %d: got %q, want %q", p, got[p], want[p])
		}
	}

	uncommitted := testkit.Client(t, seeds, consumeFromStart(topic, partitions))
	all := readUntilSentinels(ctx, t, uncommitted, partitions, "end")
	for p := range int32(partitions) {
		if n := len(all[p]); n != 12 {
			t.Errorf("read_uncommitted partition %d: got %d records %q, want all 12 written, aborted ones included", p, n, all[p])
		}
	}
}

func TestJavaClientsAgainstRealKafka(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	runner := kafkatest.JavaClients(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	out := kafkatest.RunJavaClients(ctx, t, runner, strings.Join(seeds, ","))
	for _, scenario := range []string{"features", "txn", "share", "ctp"} {
		if !strings.Contains(out, "PASS "+scenario+":") {
			t.Errorf("scenario %s did not report PASS:\n%s", scenario, out)
		}
	}
	t.Log(out)
}
