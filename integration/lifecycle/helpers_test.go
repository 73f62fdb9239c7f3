// Package lifecycle_test holds the regression tests of an adversarial
// review of kshare's lifecycle paths: consumer-side faults and lost
// answers, Close racing commits and Polls, contexts ending while a call
// waits, lock renewal across leader moves. Public APIs and the bundled
// cluster only, as an application would use them.
package lifecycle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hangGuard bounds every test: a hang fails instead of stalling the run.
const hangGuard = 90 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

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

func (e *env) input(ctx context.Context, t *testing.T, topic string, values ...string) {
	t.Helper()
	// One batch per record: a share fetch acquires whole batches.
	for _, v := range values {
		require.NoError(t, e.admin.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr())
	}
}

func (e *env) consumer(t *testing.T, group, topic string, opts ...shareconsumer.Opt) *shareconsumer.Consumer {
	t.Helper()
	opts = append([]shareconsumer.Opt{
		shareconsumer.SeedBrokers(e.seeds...), shareconsumer.Group(group), shareconsumer.Topics(topic),
		shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxWait(100 * time.Millisecond),
		shareconsumer.KgoOpts(kgo.ClientID("lc-consumer")),
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
	opts = append([]producer.Opt{producer.SeedBrokers(e.seeds...), producer.TransactionalID(id),
		producer.KgoOpts(kgo.ClientID("lc-producer"))}, opts...)
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

// committedValues reads every committed record of topic (read_committed)
// until a second passes without one.
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

// pollN polls c until it returned at least n records.
func pollN(ctx context.Context, t *testing.T, c *shareconsumer.Consumer, n int) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	for len(recs) < n {
		rs, err := c.Poll(ctx)
		require.NoError(t, err, "poll (have %d of %d)", len(recs), n)
		recs = append(recs, rs...)
	}
	return recs
}
