package producer

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
)

// testCtx bounds a test so that a broken one fails instead of hanging.
func testCtx(t testing.TB) context.Context { return testkit.Context(t) }

// newCluster starts a bundled cluster that the test closes.
func newCluster(t testing.TB, opts ...broker.Opt) *broker.Cluster { return bundled.Cluster(t, opts...) }

// newClient returns a plain kgo client on the cluster that the test closes.
func newClient(t testing.TB, c *broker.Cluster, opts ...kgo.Opt) *kgo.Client {
	return testkit.Client(t, c.Bootstrap(), opts...)
}

// newProducer returns an initialized producer that the test closes.
func newProducer(t testing.TB, c *broker.Cluster, txnID string, opts ...Opt) *Producer {
	t.Helper()
	p, err := New(append([]Opt{SeedBrokers(c.Bootstrap()...), TransactionalID(txnID)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	require.NoError(t, p.InitTransactions(testCtx(t)))
	return p
}

// createTopic creates a topic through the wire.
func createTopic(t testing.TB, c *broker.Cluster, name string, partitions int32) {
	t.Helper()
	testkit.CreateTopic(testCtx(t), t, newClient(t, c), name, partitions)
}

// committedRecord is a record a read_committed reader saw.
type committedRecord struct {
	value     string
	partition int32
	offset    int64
}

const sentinel = "\x00end"

// readCommitted returns every record of topic that a read_committed reader
// sees. It first writes a plain (non-transactional) sentinel to each
// partition and reads until it has seen all of them, so the answer is
// complete once every transaction before it has ended.
func readCommitted(t testing.TB, c *broker.Cluster, topic string, partitions int32) []committedRecord {
	t.Helper()
	ctx := testCtx(t)
	w := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := range partitions {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(sentinel)})
	}
	require.NoError(t, w.ProduceSync(ctx, recs...).FirstErr())
	r := newClient(t, c, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	var out []committedRecord
	ended := make(map[int32]bool)
	for len(ended) < int(partitions) {
		fs := r.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read_committed reader saw %d of %d sentinels", len(ended), partitions)
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch partition %d: %v", p, err) })
		fs.EachRecord(func(rec *kgo.Record) {
			if string(rec.Value) == sentinel {
				ended[rec.Partition] = true
				return
			}
			out = append(out, committedRecord{string(rec.Value), rec.Partition, rec.Offset})
		})
	}
	return out
}

// logCapture is a slog handler that keeps every message, for asserting
// that something was logged.
type logCapture struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	l.mu.Lock()
	l.msgs = append(l.msgs, b.String())
	l.mu.Unlock()
	return nil
}
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }

// matching returns the captured messages containing every part.
func (l *logCapture) matching(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, m := range l.msgs {
		for _, p := range parts {
			if !strings.Contains(m, p) {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}
