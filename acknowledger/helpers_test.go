package acknowledger_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

const (
	testTimeout = 90 * time.Second
	topic       = "in"
	group       = "g"
)

// env is a bundled cluster with a topic of inputs and a share group that
// reads them from the start.
type env struct {
	t     *testing.T
	c     *broker.Cluster
	admin *kgo.Client
	ctx   context.Context
}

func newEnv(t *testing.T, partitions int32, inputs int, opts ...broker.Opt) *env {
	t.Helper()
	c, err := broker.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	e := &env{t: t, c: c, admin: admin, ctx: ctx}

	ct := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	ct.Topics = append(ct.Topics, rt)
	ctr, err := ct.RequestWith(ctx, admin)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(ctr.Topics[0].ErrorCode))

	ac := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	res.Configs = append(res.Configs, cfg)
	ac.Resources = append(ac.Resources, res)
	acr, err := ac.RequestWith(ctx, admin)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(acr.Resources[0].ErrorCode))

	recs := make([]*kgo.Record, inputs)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(strconv.Itoa(i))}
	}
	require.NoError(t, admin.ProduceSync(ctx, recs...).FirstErr())
	return e
}

func testLogger() *slog.Logger {
	if os.Getenv("KSHARE_TEST_DEBUG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// consumer returns a share consumer of the inputs, in Transactional mode
// unless opts say otherwise, that the test closes.
func (e *env) consumer(opts ...shareconsumer.Opt) *shareconsumer.Consumer {
	e.t.Helper()
	c, err := shareconsumer.New(append([]shareconsumer.Opt{
		shareconsumer.SeedBrokers(e.c.Bootstrap()...),
		shareconsumer.Group(group),
		shareconsumer.Topics(topic),
		shareconsumer.Mode(shareconsumer.Transactional),
		shareconsumer.MaxWait(200 * time.Millisecond),
		shareconsumer.Logger(testLogger()),
	}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// acknowledger returns an initialized acknowledger that the test closes.
func (e *env) acknowledger(txnID string, opts ...acknowledger.Opt) *acknowledger.Acknowledger {
	e.t.Helper()
	a, err := acknowledger.New(append([]acknowledger.Opt{
		acknowledger.SeedBrokers(e.c.Bootstrap()...),
		acknowledger.TransactionalID(txnID),
		acknowledger.Logger(testLogger()),
	}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { a.Close(context.Background()) })
	require.NoError(e.t, a.InitTransactions(e.ctx))
	return a
}

// poll polls c until want distinct values arrived and returns the records.
func (e *env) poll(c *shareconsumer.Consumer, want int) []*kgo.Record {
	e.t.Helper()
	seen := make(map[string]bool)
	var out []*kgo.Record
	for len(seen) < want {
		recs, err := c.Poll(e.ctx)
		if e.ctx.Err() != nil {
			e.t.Fatalf("got %d of %d records before the deadline", len(seen), want)
		}
		require.NoError(e.t, err)
		for _, r := range recs {
			if !seen[string(r.Value)] {
				seen[string(r.Value)] = true
				out = append(out, r)
			}
		}
	}
	return out
}

// expectNothing polls for d and fails if a record arrives.
func (e *env) expectNothing(c *shareconsumer.Consumer, d time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	for {
		recs, err := c.Poll(ctx)
		if len(recs) > 0 {
			e.t.Fatalf("%d records delivered, first %q (delivery %v)", len(recs), recs[0].Value, deliveries(c, recs[:1]))
		}
		if errors.Is(err, context.DeadlineExceeded) && e.ctx.Err() == nil {
			return
		}
		require.NoError(e.t, err)
	}
}

func deliveries(c *shareconsumer.Consumer, recs []*kgo.Record) []int16 {
	out := make([]int16, len(recs))
	for i, r := range recs {
		out[i], _ = c.DeliveryCount(r)
	}
	return out
}

// startOffsets returns the group's start offsets: every offset below is
// ACKNOWLEDGED or ARCHIVED.
func (e *env) startOffsets() map[int32]int64 {
	e.t.Helper()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(e.ctx, e.admin)
	require.NoError(e.t, err)
	out := make(map[int32]int64)
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				out[p.Partition] = p.StartOffset
			}
		}
	}
	return out
}

// allDone waits until every partition's start offset reached end.
func (e *env) allDone(partitions int32, end int64) {
	e.t.Helper()
	for {
		got := e.startOffsets()
		done := true
		for p := range partitions {
			if got[p] != end {
				done = false
			}
		}
		if done {
			return
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("start offsets %v never all reached %d", got, end)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
