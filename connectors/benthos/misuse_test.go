package benthos

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/internal/testkit"
)

// TestCheckerCatchesDuplicates misuses the output on purpose: a fan_out
// to two kshare_txn outputs writes every message twice, and only the
// first transaction carries the record's acknowledgement. The verdict
// must be FAILED with every input duplicated, and the second output must
// have counted the messages it wrote without their acknowledgement.
func TestCheckerCatchesDuplicates(t *testing.T) {
	const n = 500
	c := newCluster(t)
	r := c.newRun(t, "dup", 3, n, 0)
	is := trackInstances(t)
	yaml := r.yaml(`
input:
  kshare_share:
    seed_brokers: [ $SEEDS ]
    group: $GROUP
    topics: [ $IN ]
    transactional_id: $INTXN
    auto_offset_reset: earliest
pipeline:
  threads: 1
output:
  broker:
    pattern: fan_out_sequential
    outputs:
      - kshare_txn:
          seed_brokers: [ $SEEDS ]
          transactional_id: $OUTTXN-a
          topic: $OUT
          key: ${! @kafka_key }
      - kshare_txn:
          seed_brokers: [ $SEEDS ]
          transactional_id: $OUTTXN-b
          topic: $OUT
          key: ${! @kafka_key }
`)
	began := time.Now()
	p := start(t, testEnv(t, &observed{}, nil), yaml)
	r.waitAcknowledged(t, 2*time.Minute)
	p.stop(t, 30*time.Second)
	res := r.verify(t, nil, time.Since(began))
	require.False(t, res.OK, res.Line())
	require.Contains(t, res.Line(), "FAILED")
	require.Equal(t, n, res.Duplicates)
	require.EqualValues(t, n, is.out(func(m *outputMetrics) *counter { return m.uncovered }))
}

// TestOtherOutputIsAtLeastOnce runs the input with an output that is not
// kshare_txn (drop): every record is acknowledged by the input's own
// transactions once the output has taken it, which is at-least-once. The
// checker must fail the run: no input has an output.
func TestOtherOutputIsAtLeastOnce(t *testing.T) {
	const n = 500
	c := newCluster(t)
	r := c.newRun(t, "other", 3, n, 0)
	is := trackInstances(t)
	yaml := r.yaml(`
input:
  kshare_share:
    seed_brokers: [ $SEEDS ]
    group: $GROUP
    topics: [ $IN ]
    transactional_id: $INTXN
    auto_offset_reset: earliest
output:
  drop: {}
`)
	began := time.Now()
	p := start(t, testEnv(t, &observed{}, nil), yaml)
	r.waitAcknowledged(t, 2*time.Minute)
	p.stop(t, 30*time.Second)
	require.EqualValues(t, n, is.in(func(m *inputMetrics) *counter { return m.accepted }), "every record accepted by the input's own transactions")
	res := r.verify(t, nil, time.Since(began))
	require.False(t, res.OK, res.Line())
	require.Equal(t, n, res.Missing)
}

// TestOutputWithoutInput writes from another input (generate): each batch
// is still one transaction, nothing is acknowledged, and the output says
// so once and counts the messages.
func TestOutputWithoutInput(t *testing.T) {
	const n = 300
	c := newCluster(t)
	ctx := testkit.Context(t)
	testkit.CreateTopic(ctx, t, c.admin, "gen-out", 3)
	is := trackInstances(t)
	logs := &syncBuffer{}
	yaml := strings.ReplaceAll(`
input:
  generate:
    count: 300
    interval: ""
    batch_size: 50
    mapping: root = "gen-" + counter().string()
output:
  kshare_txn:
    seed_brokers: [ $SEEDS ]
    transactional_id: gen-out-txn
    topic: gen-out
`, "$SEEDS", strings.Join(c.seeds, ","))
	p := startLogged(t, service.NewEnvironment(), yaml, logs)
	select {
	case err := <-p.done:
		require.NoError(t, err, "the stream ends when generate has made its messages")
		p.stream = nil
	case <-time.After(time.Minute):
		t.Fatal("the stream did not end")
	}
	require.Equal(t, n, countCommitted(t, c, "gen-out", n))
	require.EqualValues(t, n, is.out(func(m *outputMetrics) *counter { return m.orphans }))
	require.EqualValues(t, n/50, is.out(func(m *outputMetrics) *counter { return m.committed }))
	require.Equal(t, 1, strings.Count(logs.String(), "carries no kshare_share acknowledgement"), logs.String())
}

// countCommitted reads topic with a read_committed consumer until want
// records arrived (then a little longer, to see more) and returns the
// count.
func countCommitted(t *testing.T, c *cluster, topic string, want int) int {
	cl := testkit.Client(t, c.seeds, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	got := 0
	deadline := time.Now().Add(30 * time.Second)
	extra := time.Time{}
	for time.Now().Before(deadline) && (extra.IsZero() || time.Now().Before(extra)) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		got += cl.PollFetches(ctx).NumRecords()
		cancel()
		if got >= want && extra.IsZero() {
			extra = time.Now().Add(500 * time.Millisecond)
		}
	}
	return got
}

// syncBuffer is a buffer the stream's goroutines log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startLogged starts a pipeline whose logs go to w.
func startLogged(t *testing.T, env *service.Environment, yaml string, w *syncBuffer) *pipeline {
	t.Helper()
	b := env.NewStreamBuilder()
	b.SetLogger(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})))
	require.NoError(t, b.SetYAML(yaml))
	s, err := b.Build()
	require.NoError(t, err)
	p := &pipeline{stream: s, done: make(chan error, 1)}
	go func() { p.done <- s.Run(context.Background()) }()
	t.Cleanup(func() { p.stop(t, 30*time.Second) })
	return p
}

// TestMisusedConfigs gives the plugins configs a user could write by
// mistake: each is refused, by Benthos' linter or by the plugin's
// constructor, with an error that names the field and what is wrong.
func TestMisusedConfigs(t *testing.T) {
	const input = `
seed_brokers: [ 127.0.0.1:9092 ]
group: g
topics: [ in ]
transactional_id: acks
`
	const output = `
seed_brokers: [ 127.0.0.1:9092 ]
transactional_id: out
topic: out
`
	edit := func(base, extra string, replace ...string) string {
		s := base + extra
		for i := 0; i+1 < len(replace); i += 2 {
			s = strings.Replace(s, replace[i], replace[i+1], 1)
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		output bool
		yaml   string
		want   string
	}{
		{"no brokers", false, edit(input, "", "seed_brokers: [ 127.0.0.1:9092 ]", "seed_brokers: []"), "seed_brokers: at least one broker address is required"},
		{"broker without port", false, edit(input, "", "127.0.0.1:9092", "localhost"), `seed_brokers: "localhost" is not host:port`},
		{"empty group", false, edit(input, "", "group: g", `group: ""`), "group: the share group is required"},
		{"group missing", false, edit(input, "", "group: g\n", ""), "field group is required"},
		{"no topics", false, edit(input, "", "topics: [ in ]", "topics: [ ' , ' ]"), "topics: at least one topic is required"},
		{"no acknowledger id", false, edit(input, "", "transactional_id: acks", `transactional_id: ""`), "transactional_id: required"},
		{"zero poll size", false, edit(input, "max_poll_records: 0"), "max_poll_records: must be between 1"},
		{"zero max wait", false, edit(input, "max_wait: 0s"), "max_wait: must be positive"},
		{"negative reject", false, edit(input, "reject_after_deliveries: -1"), "reject_after_deliveries: must not be negative"},
		{"negative delivery limit", false, edit(input, "delivery_count_limit: -2"), "delivery_count_limit: must not be negative"},
		{"zero lock", false, edit(input, "record_lock_duration: 0s"), "record_lock_duration: must be positive"},
		{"negative batch count", false, edit(input, "batching:\n  count: -1"), "batching: count and byte_size must not be negative"},
		{"bad isolation", false, edit(input, "isolation_level: serializable"), "value serializable is not a valid option"},
		{"unknown sasl", false, edit(input, "sasl:\n  - mechanism: GSSAPI\n    username: u\n    password: p"), "value GSSAPI is not a valid option"},
		{"sasl without user", false, edit(input, "sasl:\n  - mechanism: PLAIN\n    username: \"\"\n    password: p"), "sasl[0]: username is empty"},
		{"no output id", true, edit(output, "", "transactional_id: out", `transactional_id: ""`), "transactional_id: required"},
		{"no topic", true, edit(output, "", "topic: out\n", ""), "field topic is required"},
		{"zero in flight", true, edit(output, "max_in_flight: 0"), "max_in_flight: must be at least 1"},
		{"manual without partition", true, edit(output, "partitioner: manual"), "partitioner: manual needs partition"},
		{"partition without manual", true, edit(output, "partition: '1'"), "partition: set only with partitioner: manual"},
		{"zero commit timeout", true, edit(output, "commit_timeout: 0s"), "commit_timeout: must be positive"},
		{"bad partitioner", true, edit(output, "partitioner: random"), "value random is not a valid option"},
		{"bad interpolation", true, edit(output, "key: ${! nope( }"), "expected function argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := construct(tc.output, tc.yaml)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// construct lints yaml as the config of the input (or output) in a
// stream, as Benthos does when it loads a config, and then parses it and
// runs the plugin's constructor. It returns the first error.
func construct(output bool, yaml string) error {
	env := service.NewEnvironment()
	indented := "    " + strings.ReplaceAll(strings.TrimSpace(yaml), "\n", "\n    ")
	stream := "input:\n  kshare_share:\n" + indented + "\noutput:\n  drop: {}\n"
	spec := inputSpec()
	if output {
		stream = "input:\n  generate:\n    mapping: root = \"\"\noutput:\n  kshare_txn:\n" + indented + "\n"
		spec = outputSpec()
	}
	if err := env.NewStreamBuilder().SetYAML(stream); err != nil {
		return err
	}
	conf, err := spec.ParseYAML(yaml, env)
	if err != nil {
		return err
	}
	if output {
		_, err = newTxnOutput(conf, service.MockResources())
		return err
	}
	in, err := newShareInput(conf, service.MockResources())
	if err == nil {
		_ = in.Close(context.Background())
	}
	return err
}

// TestUnreachableCluster starts a pipeline whose brokers do not answer:
// the input and the output say so (naming seed_brokers) instead of
// hanging, and the stream stops when asked.
func TestUnreachableCluster(t *testing.T) {
	logs := &syncBuffer{}
	p := startLogged(t, service.NewEnvironment(), `
input:
  kshare_share:
    seed_brokers: [ 127.0.0.1:1 ]
    group: g
    topics: [ in ]
    transactional_id: acks
    transaction_timeout: 1s
output:
  kshare_txn:
    seed_brokers: [ 127.0.0.1:1 ]
    transactional_id: out
    topic: out
    commit_timeout: 1s
`, logs)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s := logs.String()
		if strings.Contains(s, "kshare_share: acknowledger acks: init transactions: no answer from the cluster (seed_brokers: [127.0.0.1:1])") &&
			strings.Contains(s, "kshare_txn: producer out: init transactions: no answer from the cluster (seed_brokers: [127.0.0.1:1])") {
			t.Logf("both errors logged after %v", time.Since(deadline.Add(-30*time.Second)).Round(time.Millisecond))
			stopped := time.Now()
			p.stop(t, 30*time.Second)
			t.Logf("stopped after %v", time.Since(stopped).Round(time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no clear connection error logged:\n%s", logs.String())
}
