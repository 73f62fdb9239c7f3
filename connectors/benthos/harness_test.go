package benthos

import (
	"context"
	"errors"
	"fmt"

	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/eos"
	"github.com/kshare-go/kshare/internal/testkit"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger is where the pipelines and clients of a test log: nowhere,
// unless KSHARE_TEST_LOG names a level (debug, info, warn, error).
func testLogger() *slog.Logger {
	level := os.Getenv("KSHARE_TEST_LOG")
	if level == "" {
		return slog.New(slog.DiscardHandler)
	}
	l, err := eos.NewLogger(level, os.Stderr)
	if err != nil {
		panic(err)
	}
	return l
}

// cluster is a bundled cluster for one test, with an admin client.
type cluster struct {
	*broker.Cluster
	seeds []string
	admin *kgo.Client
}

func newCluster(t testing.TB, opts ...broker.Opt) *cluster {
	t.Helper()
	c, err := broker.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	seeds := c.Bootstrap()
	return &cluster{Cluster: c, seeds: seeds, admin: testkit.Client(t, seeds)}
}

// run is one test pipeline: its topics, group and ids, and the input it
// was given.
type run struct {
	c                *cluster
	name             string
	in, out, group   string
	inputTxn, outTxn string
	input            *eos.Input
}

// newRun creates the input and output topics (partitions each) and writes
// n input records, every rejectEvery-th poison.
func (c *cluster) newRun(t testing.TB, name string, partitions int32, n, rejectEvery int) *run {
	t.Helper()
	ctx := testkit.Context(t)
	r := &run{
		c: c, name: name,
		in: name + "-in", out: name + "-out", group: name + "-group",
		inputTxn: name + "-acks", outTxn: name + "-out-txn",
	}
	testkit.CreateTopic(ctx, t, c.admin, r.in, partitions)
	testkit.CreateTopic(ctx, t, c.admin, r.out, partitions)
	in, err := eos.WriteInput(ctx, c.seeds, r.in, n, rejectEvery, testLogger())
	require.NoError(t, err)
	r.input = in
	return r
}

// yaml fills a pipeline template: $SEEDS, $IN, $OUT, $GROUP, $INTXN and
// $OUTTXN. A Replacer tries its old strings in argument order, so $INTXN
// and $OUTTXN come before $IN and $OUT (which would take their heads).
func (r *run) yaml(tmpl string) string {
	// The longer names first: the replacer tries them in this order.
	return strings.NewReplacer(
		"$SEEDS", strings.Join(r.c.seeds, ","),
		"$INTXN", r.inputTxn, "$OUTTXN", r.outTxn,
		"$IN", r.in, "$OUT", r.out, "$GROUP", r.group,
	).Replace(tmpl)
}

// basicPipeline copies every input record to the output, keyed alike.
const basicPipeline = `
input:
  kshare_share:
    seed_brokers: [ $SEEDS ]
    group: $GROUP
    topics: [ $IN ]
    transactional_id: $INTXN
    auto_offset_reset: earliest
    max_poll_records: 100
    max_wait: 100ms
pipeline:
  threads: 1
  processors:
    - mapping: root = content()
output:
  kshare_txn:
    seed_brokers: [ $SEEDS ]
    transactional_id: $OUTTXN
    topic: $OUT
    key: ${! @kafka_key }
`

// pipeline is a running stream.
type pipeline struct {
	stream *service.Stream
	done   chan error
}

// observed records what the test processors saw: every delivery of every
// input value.
type observed struct {
	mu         sync.Mutex
	deliveries map[string][]int64 // value -> delivery counts seen
}

func (o *observed) saw(value string, delivery int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.deliveries == nil {
		o.deliveries = make(map[string][]int64)
	}
	o.deliveries[value] = append(o.deliveries[value], delivery)
}

func (o *observed) of(value string) []int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int64(nil), o.deliveries[value]...)
}

// testEnv is the environment of a test's pipelines: Benthos' pure
// components, the kshare plugins, and test processors:
//   - test_observe records each message's value and delivery count in obs;
//   - test_fail fails the messages for which fail returns true;
//   - test_slow holds each message for what slow returns.
func testEnv(t testing.TB, obs *observed, fail func(value string, delivery int64) bool) *service.Environment {
	return testEnvSlow(t, obs, fail, nil)
}

func testEnvSlow(t testing.TB, obs *observed, fail func(value string, delivery int64) bool, slow func(value string, delivery int64) time.Duration) *service.Environment {
	env := service.NewEnvironment()
	register := func(name string, f func(value string, delivery int64) error) {
		require.NoError(t, env.RegisterProcessor(name, service.NewConfigSpec(),
			func(*service.ParsedConfig, *service.Resources) (service.Processor, error) {
				return procFunc(func(m *service.Message) error {
					v, _ := m.AsBytes()
					d, _ := m.MetaGetMut(metaDeliveryCount)
					return f(string(v), d.(int64))
				}), nil
			}))
	}
	register("test_observe", func(v string, d int64) error {
		obs.saw(v, d)
		return nil
	})
	register("test_fail", func(v string, d int64) error {
		if fail != nil && fail(v, d) {
			return fmt.Errorf("test_fail: %s at delivery %d", v, d)
		}
		return nil
	})
	register("test_slow", func(v string, d int64) error {
		if slow != nil {
			time.Sleep(slow(v, d))
		}
		return nil
	})
	return env
}

// procFunc is a processor made of a function; an error flags the message.
type procFunc func(*service.Message) error

func (f procFunc) Process(_ context.Context, m *service.Message) (service.MessageBatch, error) {
	if err := f(m); err != nil {
		return nil, err
	}
	return service.MessageBatch{m}, nil
}

func (procFunc) Close(context.Context) error { return nil }

// start builds and runs a pipeline from yaml in env.
func start(t testing.TB, env *service.Environment, yaml string) *pipeline {
	t.Helper()
	b := env.NewStreamBuilder()
	b.SetLogger(testLogger())
	require.NoError(t, b.SetYAML(yaml))
	s, err := b.Build()
	require.NoError(t, err)
	p := &pipeline{stream: s, done: make(chan error, 1)}
	go func() { p.done <- s.Run(context.Background()) }()
	t.Cleanup(func() { p.stop(t, 30*time.Second) })
	return p
}

// stop stops the pipeline within timeout, waiting for what is in flight.
func (p *pipeline) stop(t testing.TB, timeout time.Duration) {
	if p.stream == nil {
		return
	}
	s := p.stream
	p.stream = nil
	err := s.StopWithin(timeout)
	if err != nil {
		t.Logf("stop: %v", err)
	}
	select {
	case err := <-p.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("stream ended: %v", err)
		}
	case <-time.After(timeout + 10*time.Second):
		t.Errorf("stream did not end within %v of being stopped", timeout)
	}
}

// stopDead stops a pipeline whose connections were cut, in the
// background: its components give up on the brokers one after another
// (each within its own timeout), which a dead process would not wait for.
// The returned channel closes once the stream has ended; the test waits
// for it before it returns, so that no goroutine outlives it.
func (p *pipeline) stopDead(t testing.TB) <-chan struct{} {
	done := make(chan struct{})
	s := p.stream
	p.stream = nil
	began := time.Now()
	go func() {
		defer close(done)
		_ = s.StopWithin(time.Minute)
		<-p.done
	}()
	t.Cleanup(func() {
		select {
		case <-done:
			t.Logf("the dead pipeline's remains stopped after %v", time.Since(began).Round(time.Millisecond))
		case <-time.After(2 * time.Minute):
			t.Errorf("the dead pipeline's remains did not stop within 2 minutes")
		}
	})
	return done
}

// startOffsets returns the group's share-partition start offsets of the
// input topic; none before the group exists.
func (r *run) startOffsets(t testing.TB) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// eos.StartOffsets reads a partition with no lag as done up to its
	// last stable offset: Kafka 4.4 describes the start offset one state
	// write behind (docs/differences.md).
	out, err := eos.StartOffsets(ctx, kadm.NewClient(r.c.admin), r.group, r.in)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}
	}
	require.NoError(t, err)
	return out
}

// waitAcknowledged waits until the group has acknowledged every input
// record, or fails the test after timeout.
func (r *run) waitAcknowledged(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		start := r.startOffsets(t)
		n := r.input.CountAcknowledged(start)
		if n == r.input.N {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the group has acknowledged %d of %d inputs (start offsets %v)", timeout, n, r.input.N, start)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// verify checks the committed output against the input with the
// project's read_committed checker and returns its verdict.
func (r *run) verify(t testing.TB, archived map[string]eos.Archive, elapsed time.Duration) eos.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := r.startOffsets(t)
	check, err := eos.ReadCommitted(ctx, r.c.seeds, r.out, r.input, start, eos.Endings{Archived: archived}, 30*time.Second)
	require.NoError(t, err)
	res := eos.NewResult(check, "", elapsed)
	t.Logf("%s: %s (inputs %d, outputs %d, acknowledged %d, rejected %d, duplicates %d, missing %d)",
		r.name, res.Line(), check.Inputs, check.Outputs, check.Acknowledged, check.Rejected, check.Duplicates, check.Missing)
	return res
}

// requireExactlyOnce fails the test unless res is OK with no duplicate, no
// missing and no unacknowledged input.
func requireExactlyOnce(t testing.TB, res eos.Result) {
	t.Helper()
	require.True(t, res.OK, res.Line())
	require.Zero(t, res.Duplicates, "duplicates")
	require.Zero(t, res.Missing, "missing")
	require.Zero(t, res.Unacknowledged, "unacknowledged")
	require.Zero(t, res.Unknown, "unknown outputs")
}
