package shareconsumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/txnclient"
)

// testTimeout bounds each test, so that a broken one fails instead of
// hanging.
const testTimeout = 90 * time.Second

// env is a bundled cluster with an admin client.
type env struct {
	t     testing.TB
	c     *broker.Cluster
	admin *kgo.Client
	ctx   context.Context
}

func newEnv(t testing.TB, opts ...broker.Opt) *env {
	t.Helper()
	c, err := broker.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	e := &env{t: t, c: c, ctx: ctx}
	// The admin client also sends the KIP-1289 requests, which kgo's
	// default version pin leaves out.
	e.admin = e.client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxVersions(txnclient.KgoMaxVersions()))
	return e
}

// client returns a kgo client on the cluster that the test closes.
func (e *env) client(opts ...kgo.Opt) *kgo.Client {
	e.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.c.Bootstrap()...)}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(cl.Close)
	return cl
}

func (e *env) createTopic(name string, partitions int32) {
	e.t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(e.ctx, e.admin)
	require.NoError(e.t, err)
	require.NoError(e.t, kerr.ErrorForCode(resp.Topics[0].ErrorCode), "create topic %s", name)
}

// groupConfig sets share group configs; every group of these tests reads
// from the earliest offset.
func (e *env) groupConfig(group string, kvs ...string) {
	e.t.Helper()
	kvs = append([]string{"share.auto.offset.reset", "earliest"}, kvs...)
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i+1 < len(kvs); i += 2 {
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Value = kvs[i], kmsg.StringPtr(kvs[i+1])
		res.Configs = append(res.Configs, cfg)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(e.ctx, e.admin)
	require.NoError(e.t, err)
	require.NoError(e.t, kerr.ErrorForCode(resp.Resources[0].ErrorCode), "group configs %v", kvs)
}

// produce writes values round-robin over the topic's partitions.
func (e *env) produce(topic string, partitions int32, values ...string) {
	e.t.Helper()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(v)}
	}
	require.NoError(e.t, e.admin.ProduceSync(e.ctx, recs...).FirstErr())
}

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// testLogger logs at debug level to stderr when KSHARE_TEST_DEBUG is set,
// and discards otherwise.
func testLogger() *slog.Logger {
	if os.Getenv("KSHARE_TEST_DEBUG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// consumer returns a share consumer of topic in group that the test
// closes.
func (e *env) consumer(group, topic string, opts ...shareconsumer.Opt) *shareconsumer.Consumer {
	e.t.Helper()
	c, err := shareconsumer.New(append([]shareconsumer.Opt{
		shareconsumer.SeedBrokers(e.c.Bootstrap()...),
		shareconsumer.Group(group),
		shareconsumer.Topics(topic),
		shareconsumer.MaxWait(200 * time.Millisecond),
		shareconsumer.Logger(testLogger()),
	}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// startOffsets returns the group's share-partition start offsets of topic:
// every offset below is ACKNOWLEDGED or ARCHIVED.
func (e *env) startOffsets(group, topic string) map[int32]int64 {
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
			if t.Topic != topic {
				continue
			}
			for _, p := range t.Partitions {
				out[p.Partition] = p.StartOffset
			}
		}
	}
	return out
}

// eventually polls cond until it holds or the test's context ends.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	for !cond() {
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// allAcknowledged waits until the group's start offset of every partition
// reached ends (the next offset after the records produced).
func (e *env) allAcknowledged(group, topic string, ends map[int32]int64) {
	e.t.Helper()
	e.eventually("every record acknowledged", func() bool {
		got := e.startOffsets(group, topic)
		for p, end := range ends {
			if got[p] != end {
				return false
			}
		}
		return true
	})
}

// poll polls c until want distinct values arrived, calling each for every
// record, and returns how often each value came.
func poll(ctx context.Context, t *testing.T, c *shareconsumer.Consumer, want int, each func(*kgo.Record)) map[string]int {
	t.Helper()
	seen := make(map[string]int)
	for len(seen) < want {
		recs, err := c.Poll(ctx)
		if ctx.Err() != nil {
			t.Fatalf("got %d of %d values before the deadline", len(seen), want)
		}
		require.NoError(t, err)
		for _, r := range recs {
			seen[string(r.Value)]++
			if each != nil {
				each(r)
			}
		}
	}
	return seen
}

// pollRecords polls until want distinct values arrived and returns their
// records.
func pollRecords(ctx context.Context, t *testing.T, c *shareconsumer.Consumer, want int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	poll(ctx, t, c, want, func(r *kgo.Record) { out = append(out, r) })
	return out
}

// expectNothing polls for d and fails if a record arrives.
func expectNothing(ctx context.Context, t *testing.T, c *shareconsumer.Consumer, d time.Duration) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		recs, err := c.Poll(pctx)
		if len(recs) > 0 {
			t.Fatalf("%d records delivered, first %s/%d@%d %q", len(recs), recs[0].Topic, recs[0].Partition, recs[0].Offset, recs[0].Value)
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return
		}
		require.NoError(t, err)
	}
}

// ackRequests records the acknowledgements a member sent, as the broker
// received them: ShareAcknowledge requests and ShareFetch requests that
// carry acknowledgement batches.
type ackRequests struct {
	mu   sync.Mutex
	seen []string
}

func (a *ackRequests) observe(member string) func(node int32, req kmsg.Request) {
	return func(node int32, req kmsg.Request) {
		var desc []string
		switch r := req.(type) {
		case *kmsg.ShareAcknowledgeRequest:
			if r.MemberID == nil || *r.MemberID != member {
				return
			}
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					for _, b := range p.AcknowledgementBatches {
						desc = append(desc, fmt.Sprintf("ShareAcknowledge p%d %d-%d %v", p.Partition, b.FirstOffset, b.LastOffset, b.AcknowledgeTypes))
					}
				}
			}
			if len(desc) == 0 && r.ShareSessionEpoch != -1 {
				desc = append(desc, "empty ShareAcknowledge")
			}
		case *kmsg.ShareFetchRequest:
			if r.MemberID == nil || *r.MemberID != member {
				return
			}
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					for _, b := range p.AcknowledgementBatches {
						desc = append(desc, fmt.Sprintf("ShareFetch p%d %d-%d %v", p.Partition, b.FirstOffset, b.LastOffset, b.AcknowledgeTypes))
					}
				}
			}
		}
		a.mu.Lock()
		a.seen = append(a.seen, desc...)
		a.mu.Unlock()
	}
}

func (a *ackRequests) snapshot() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}
