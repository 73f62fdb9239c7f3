package benthos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/internal/testkit"
)

// writeTransactions writes to topic, in this order, a committed
// transaction of the values c-0..c-(n-1), an aborted one of a-0..a-(n-1),
// and a committed one of c-n..c-(2n-1), keyed so that they spread over
// the partitions, and one record outside any transaction, plain.
func writeTransactions(t *testing.T, c *cluster, topic string, n int) {
	t.Helper()
	ctx := testkit.Context(t)
	cl := testkit.Client(t, c.seeds, kgo.TransactionalID(topic+"-writer"), kgo.DefaultProduceTopic(topic))
	txn := func(prefix string, from int, commit bool) {
		require.NoError(t, cl.BeginTransaction())
		for i := from; i < from+n; i++ {
			v := fmt.Sprintf("%s-%d", prefix, i)
			cl.Produce(ctx, &kgo.Record{Key: []byte(v), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}, func(_ *kgo.Record, err error) {
				require.NoError(t, err)
			})
		}
		require.NoError(t, cl.Flush(ctx))
		require.NoError(t, cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	txn("c", 0, true)
	txn("a", 0, false)
	txn("c", n, true)
	plain := testkit.Client(t, c.seeds, kgo.DefaultProduceTopic(topic))
	require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Value: []byte("plain")}).FirstErr())
}

// readAll runs kshare_read over topic with extra fields and returns the
// values it read, sorted, once its stream has ended by itself, and the
// metadata of the record "c-0".
func readAll(t *testing.T, c *cluster, topic, extra string) ([]string, map[string]any) {
	t.Helper()
	b := service.NewEnvironment().NewStreamBuilder()
	b.SetLogger(testLogger())
	require.NoError(t, b.AddInputYAML(fmt.Sprintf(`
kshare_read:
  seed_brokers: [ %s ]
  topics: [ %s ]
  max_wait: 100ms
%s`, c.seeds[0], topic, extra)))
	var mu sync.Mutex
	var got []string
	meta := map[string]any{}
	require.NoError(t, b.AddConsumerFunc(func(_ context.Context, m *service.Message) error {
		v, err := m.AsBytes()
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(v))
		if string(v) == "c-0" {
			_ = m.MetaWalkMut(func(k string, v any) error {
				meta[k] = v
				return nil
			})
		}
		return nil
	}))
	s, err := b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		_ = s.StopWithin(10 * time.Second)
		<-done
		t.Fatal("the stream did not end by itself within a minute")
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(got)
	return got, meta
}

func values(prefix string, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// TestReadCommittedReader writes two committed transactions around an
// aborted one, and a plain record, and reads them with kshare_read and
// stop_at_end: read_committed reads each committed record once and the
// plain one, nothing of the aborted transaction, and ends by itself at
// the end, although the last offset of each partition is a transaction
// marker; read_uncommitted reads the aborted records too; start_from
// latest ends at once with nothing.
func TestReadCommittedReader(t *testing.T) {
	const n = 50
	c := newCluster(t)
	ctx := testkit.Context(t)
	testkit.CreateTopic(ctx, t, c.admin, "read-out", 3)
	writeTransactions(t, c, "read-out", n)

	want := append(values("c", 2*n), "plain")
	sort.Strings(want)
	got, meta := readAll(t, c, "read-out", "  stop_at_end: true\n")
	require.Equal(t, want, got, "read_committed: the committed records, once each")
	require.Equal(t, "c-0", meta[metaKey])
	require.Equal(t, "read-out", meta[metaTopic])
	require.Contains(t, meta, metaPartition)
	require.Contains(t, meta, metaOffset)
	require.Contains(t, meta, metaTimestampMs)
	require.Equal(t, false, meta[metaTombstone])
	require.Equal(t, "x", meta["h"], "record headers are metadata")

	want = append(append(values("c", 2*n), values("a", n)...), "plain")
	sort.Strings(want)
	got, _ = readAll(t, c, "read-out", "  stop_at_end: true\n  isolation_level: read_uncommitted\n")
	require.Equal(t, want, got, "read_uncommitted: the aborted records too")

	got, _ = readAll(t, c, "read-out", "  stop_at_end: true\n  start_from: latest\n")
	require.Empty(t, got, "from the end, up to the end: nothing")
}

// TestReadWaitsForMore reads a topic without stop_at_end: the input reads
// what is there and then what is written later, and the stream does not
// end by itself.
func TestReadWaitsForMore(t *testing.T) {
	c := newCluster(t)
	ctx := testkit.Context(t)
	testkit.CreateTopic(ctx, t, c.admin, "read-more", 1)
	plain := testkit.Client(t, c.seeds, kgo.DefaultProduceTopic("read-more"))
	require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Value: []byte("first")}).FirstErr())

	b := service.NewEnvironment().NewStreamBuilder()
	b.SetLogger(testLogger())
	require.NoError(t, b.AddInputYAML(fmt.Sprintf("kshare_read:\n  seed_brokers: [ %s ]\n  topics: [ read-more ]\n  max_wait: 100ms\n", c.seeds[0])))
	got := make(chan string, 10)
	require.NoError(t, b.AddConsumerFunc(func(_ context.Context, m *service.Message) error {
		v, _ := m.AsBytes()
		got <- string(v)
		return nil
	}))
	s, err := b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	next := func() string {
		select {
		case v := <-got:
			return v
		case err := <-done:
			t.Fatalf("the stream ended: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("no record within 30s")
		}
		return ""
	}
	require.Equal(t, "first", next())
	require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Value: []byte("second")}).FirstErr())
	require.Equal(t, "second", next())
	require.NoError(t, s.StopWithin(10*time.Second))
	<-done
}

// TestReadMisusedConfigs gives kshare_read configs a user could write by
// mistake: each is refused with an error naming the field; and a cluster
// that does not answer fails Connect with an error naming seed_brokers.
func TestReadMisusedConfigs(t *testing.T) {
	const base = "seed_brokers: [ 127.0.0.1:9092 ]\ntopics: [ out ]\n"
	for _, tc := range []struct{ yaml, want string }{
		{"seed_brokers: [ 127.0.0.1:9092 ]\ntopics: [ ' , ' ]\n", "topics: at least one topic is required"},
		{base + "start_from: middle\n", "value middle is not a valid option"},
		{base + "isolation_level: serializable\n", "value serializable is not a valid option"},
		{base + "max_wait: 0s\n", "max_wait: must be positive"},
		{"seed_brokers: [ localhost ]\ntopics: [ out ]\n", `seed_brokers: "localhost" is not host:port`},
	} {
		err := func() error {
			env := service.NewEnvironment()
			indented := "    " + strings.ReplaceAll(strings.TrimSpace(tc.yaml), "\n", "\n    ")
			if err := env.NewStreamBuilder().SetYAML("input:\n  kshare_read:\n" + indented + "\noutput:\n  drop: {}\n"); err != nil {
				return err
			}
			conf, err := readSpec().ParseYAML(tc.yaml, env)
			if err != nil {
				return err
			}
			_, err = newReadInput(conf, service.MockResources())
			return err
		}()
		require.ErrorContains(t, err, tc.want, tc.yaml)
	}

	conf, err := readSpec().ParseYAML("seed_brokers: [ "+testkit.RefusedAddr(t)+" ]\ntopics: [ out ]\nstop_at_end: true\n", service.NewEnvironment())
	require.NoError(t, err)
	in, err := newReadInput(conf, service.MockResources())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = in.Connect(ctx)
	require.ErrorContains(t, err, "kshare_read: listing where the partitions of [out] end (seed_brokers: [127.0.0.1:")
	require.ErrorContains(t, err, "connection refused")
	require.NoError(t, in.Close(context.Background()))
}
