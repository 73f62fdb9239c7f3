// Package appenv is a bundled cluster and the kshare clients an
// application would create against it, for the tests that use kshare only
// through its public API (integration/misuse, integration/lifecycle).
// Every client it creates is closed when the test ends.
package appenv

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// closeTimeout bounds each client's Close at the end of a test.
const closeTimeout = 10 * time.Second

// Env is a bundled cluster whose share groups start at the earliest
// offset, with an admin client.
type Env struct {
	C     *broker.Cluster
	Seeds []string
	Admin *kgo.Client
}

// New starts the cluster (opts after the earliest-offset default) and
// closes it when the test ends, requiring the close to succeed.
func New(t *testing.T, opts ...broker.Opt) *Env {
	t.Helper()
	opts = append([]broker.Opt{broker.GroupConfigDefault("share.auto.offset.reset", "earliest")}, opts...)
	c, err := broker.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	return &Env{C: c, Seeds: c.Bootstrap(), Admin: admin}
}

// Topic creates a topic with one replica per partition.
func (e *Env) Topic(ctx context.Context, t *testing.T, name string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, e.Admin)
	require.NoError(t, err)
	for _, rt := range resp.Topics {
		require.NoError(t, kerr.ErrorForCode(rt.ErrorCode), "create topic %s", rt.Topic)
	}
}

// Input writes values to topic, non-transactionally, one batch per record
// (a share fetch acquires whole batches).
func (e *Env) Input(ctx context.Context, t *testing.T, topic string, values ...string) {
	t.Helper()
	for _, v := range values {
		require.NoError(t, e.Admin.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr())
	}
}

// Consumer creates a share consumer of group reading topic, with a short
// MaxWait; opts come after those defaults (the acknowledgement mode among
// them).
func (e *Env) Consumer(t *testing.T, group, topic string, opts ...shareconsumer.Opt) *shareconsumer.Consumer {
	t.Helper()
	opts = append([]shareconsumer.Opt{
		shareconsumer.SeedBrokers(e.Seeds...), shareconsumer.Group(group), shareconsumer.Topics(topic),
		shareconsumer.MaxWait(100 * time.Millisecond),
	}, opts...)
	c, err := shareconsumer.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// Producer creates a transactional producer with transactional id id and
// initializes it.
func (e *Env) Producer(ctx context.Context, t *testing.T, id string, opts ...producer.Opt) *producer.Producer {
	t.Helper()
	opts = append([]producer.Opt{producer.SeedBrokers(e.Seeds...), producer.TransactionalID(id)}, opts...)
	p, err := producer.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = p.Close(ctx)
	})
	require.NoError(t, p.InitTransactions(ctx))
	return p
}

// Acknowledger creates an acknowledger with transactional id id and
// initializes it.
func (e *Env) Acknowledger(ctx context.Context, t *testing.T, id string, opts ...acknowledger.Opt) *acknowledger.Acknowledger {
	t.Helper()
	opts = append([]acknowledger.Opt{acknowledger.SeedBrokers(e.Seeds...), acknowledger.TransactionalID(id)}, opts...)
	a, err := acknowledger.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = a.Close(ctx)
	})
	require.NoError(t, a.InitTransactions(ctx))
	return a
}

// CommittedValues reads every committed record of topic (read_committed):
// it polls until a second passes without a record. Call it once no
// transaction is open on topic.
func (e *Env) CommittedValues(ctx context.Context, t *testing.T, topic string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Seeds...), kgo.ConsumeTopics(topic),
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

// PollN polls c until it returned at least n records.
func PollN(ctx context.Context, t *testing.T, c *shareconsumer.Consumer, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for len(out) < n {
		recs, err := c.Poll(ctx)
		require.NoError(t, err, "poll (have %d of %d)", len(out), n)
		out = append(out, recs...)
	}
	return out
}

// HoldCommits makes the cluster hold every EndTxn(COMMIT) before handling
// it: held is closed when the first arrives, and release (which the test's
// end calls too, so that no handler stays blocked) lets them all through.
func (e *Env) HoldCommits(t *testing.T) (held <-chan struct{}, release func()) {
	h, r := make(chan struct{}), make(chan struct{})
	var arrived, released sync.Once
	release = func() { released.Do(func() { close(r) }) }
	stop := e.C.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if et, ok := req.(*kmsg.EndTxnRequest); ok && et.Commit {
			arrived.Do(func() { close(h) })
			<-r
		}
		return broker.FaultAction{}
	})
	t.Cleanup(func() {
		release()
		stop()
	})
	return h, release
}

// PollSome polls c until it returns records or within passes, and returns
// how many it got (0 when none came).
func PollSome(ctx context.Context, c *shareconsumer.Consumer, within time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		recs, err := c.Poll(ctx)
		if err != nil {
			return 0
		}
		if len(recs) > 0 {
			return len(recs)
		}
	}
}
