// Package misuse_test holds kshare's public-API misuse tests: the
// regression tests of an adversarial review of the public API against
// what docs/api.md, the package documentation and docs/design.md
// ("Lifecycle") promise. Each test is named after the behaviour it pins,
// and its comment says which finding (F1 to F16, listed in CHANGELOG.md
// under the release that fixed them) it guards and what used to happen.
// It uses only the public packages (kshare, producer, shareconsumer,
// acknowledger) and the bundled cluster, as an application would.
package misuse_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every test: a hang fails the test instead of the run.
const testTimeout = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// classes lists the kshare classes err matches.
func classes(err error) []error {
	var out []error
	for _, c := range []error{kshare.ErrAbortable, kshare.ErrInDoubt, kshare.ErrCommitted, kshare.ErrFatal,
		kshare.ErrUnsupported, kshare.ErrUsage, kshare.ErrClosed} {
		if errors.Is(err, c) {
			out = append(out, c)
		}
	}
	return out
}

// requireClass requires err to match exactly class among the kshare
// classes.
func requireClass(t *testing.T, class, err error, what string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(what, args...)
	require.Error(t, err, msg)
	require.Equal(t, []error{class}, classes(err), "%s: %v", msg, err)
}

// checkClass is requireClass that lets the test go on.
func checkClass(t *testing.T, class, err error, what string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(what, args...)
	if assert.Error(t, err, msg) {
		assert.Equal(t, []error{class}, classes(err), "%s: %v", msg, err)
	}
}

// env is a bundled cluster with an admin client.
type env struct {
	c     *broker.Cluster
	seeds []string
	admin *kgo.Client
}

func newEnv(t *testing.T, opts ...broker.Opt) *env {
	t.Helper()
	opts = append([]broker.Opt{broker.GroupConfigDefault("share.auto.offset.reset", "earliest")}, opts...)
	c, err := broker.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	return &env{c: c, seeds: c.Bootstrap(), admin: admin}
}

func (e *env) topic(ctx context.Context, t *testing.T, name string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, e.admin)
	require.NoError(t, err)
	for _, rt := range resp.Topics {
		require.NoError(t, kerr.ErrorForCode(rt.ErrorCode), "create topic %s", rt.Topic)
	}
}

// input writes values to partition 0 of topic, non-transactionally.
func (e *env) input(ctx context.Context, t *testing.T, topic string, values ...string) {
	t.Helper()
	for _, v := range values {
		require.NoError(t, e.admin.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr())
	}
}

func (e *env) consumer(t *testing.T, group, topic string, mode shareconsumer.AckMode, opts ...shareconsumer.Opt) *shareconsumer.Consumer {
	t.Helper()
	opts = append([]shareconsumer.Opt{
		shareconsumer.SeedBrokers(e.seeds...), shareconsumer.Group(group), shareconsumer.Topics(topic),
		shareconsumer.Mode(mode), shareconsumer.MaxWait(100 * time.Millisecond),
	}, opts...)
	c, err := shareconsumer.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func (e *env) producer(ctx context.Context, t *testing.T, id string, opts ...producer.Opt) *producer.Producer {
	t.Helper()
	opts = append([]producer.Opt{producer.SeedBrokers(e.seeds...), producer.TransactionalID(id)}, opts...)
	p, err := producer.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	require.NoError(t, p.InitTransactions(ctx))
	return p
}

func (e *env) acknowledger(ctx context.Context, t *testing.T, id string, opts ...acknowledger.Opt) *acknowledger.Acknowledger {
	t.Helper()
	opts = append([]acknowledger.Opt{acknowledger.SeedBrokers(e.seeds...), acknowledger.TransactionalID(id)}, opts...)
	a, err := acknowledger.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	require.NoError(t, a.InitTransactions(ctx))
	return a
}

// poll polls c until it returned n records.
func poll(ctx context.Context, t *testing.T, c *shareconsumer.Consumer, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for len(out) < n {
		recs, err := c.Poll(ctx)
		require.NoError(t, err, "poll (have %d of %d)", len(out), n)
		out = append(out, recs...)
	}
	return out
}

// committedValues reads every committed record of topic
// (read_committed): it polls until a second passes without a record. Call
// it once no transaction is open on topic.
func (e *env) committedValues(ctx context.Context, t *testing.T, topic string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	defer cl.Close()
	var out []string
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		require.NoError(t, ctx.Err())
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, string(r.Value))
			n++
		})
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				require.NoError(t, err)
			}
		})
		if n == 0 {
			return out
		}
	}
}

// startOffset returns the share group's start offset of partition 0 of
// topic (DescribeShareGroupOffsets): every offset below it is ACKNOWLEDGED
// or ARCHIVED.
func (e *env) startOffset(ctx context.Context, t *testing.T, group, topic string) int64 {
	t.Helper()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(ctx, e.admin)
	require.NoError(t, err)
	require.Len(t, resp.Groups, 1)
	require.NoError(t, kerr.ErrorForCode(resp.Groups[0].ErrorCode))
	for _, rt := range resp.Groups[0].Topics {
		if rt.Topic != topic {
			continue
		}
		for _, rp := range rt.Partitions {
			if rp.Partition == 0 {
				return rp.StartOffset
			}
		}
	}
	return -1
}

// checkpointFixture is a transactional consumer whose two polled records
// (of "in", group "g") are staged in checkpoint 1 of an acknowledger.
type checkpointFixture struct {
	e    *env
	c    *shareconsumer.Consumer
	a    *acknowledger.Acknowledger
	acks *kshare.ShareAcks
}

func newCheckpointFixture(ctx context.Context, t *testing.T) *checkpointFixture {
	t.Helper()
	e := newEnv(t)
	e.topic(ctx, t, "in", 1)
	e.input(ctx, t, "in", "a", "b")
	c := e.consumer(t, "g", "in", shareconsumer.Transactional)
	recs := poll(ctx, t, c, 2)
	a := e.acknowledger(ctx, t, "ack")
	acks := c.Acks(recs, kshare.AckAccept)
	require.NoError(t, a.Stage(1, acks, c.GroupMetadata()))
	return &checkpointFixture{e: e, c: c, a: a, acks: acks}
}

// holdCommits makes the cluster hold every EndTxn(COMMIT) before handling
// it: held is closed when the first arrives, and closing release lets them
// all through. The hook is removed when the test ends.
func (e *env) holdCommits(t *testing.T) (held <-chan struct{}, release chan<- struct{}) {
	h, r := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if et, ok := req.(*kmsg.EndTxnRequest); ok && et.Commit {
			once.Do(func() { close(h) })
			<-r
		}
		return broker.FaultAction{}
	})
	t.Cleanup(stop)
	return h, r
}
