package shareconsumer_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/wire"
)

// env is a bundled cluster with an admin client.
type env struct {
	t     testing.TB
	c     *broker.Cluster
	admin *kgo.Client
	ctx   context.Context
}

func newEnv(t testing.TB, opts ...broker.Opt) *env {
	t.Helper()
	e := &env{t: t, c: bundled.Cluster(t, opts...), ctx: testkit.Context(t)}
	// The admin client also sends the KIP-1289 requests, which kgo's
	// default version pin leaves out.
	e.admin = e.client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxVersions(wire.KgoMaxVersions()))
	return e
}

// client returns a kgo client on the cluster that the test closes.
func (e *env) client(opts ...kgo.Opt) *kgo.Client {
	e.t.Helper()
	return testkit.Client(e.t, e.c.Bootstrap(), opts...)
}

func (e *env) createTopic(name string, partitions int32) {
	e.t.Helper()
	testkit.CreateTopic(e.ctx, e.t, e.admin, name, partitions)
}

// groupConfig sets share group configs; every group of these tests reads
// from the earliest offset.
func (e *env) groupConfig(group string, kvs ...string) {
	e.t.Helper()
	testkit.SetGroupConfigs(e.ctx, e.t, e.admin, group, append([]string{"share.auto.offset.reset", "earliest"}, kvs...)...)
}

// produce writes values round-robin over the topic's partitions.
func (e *env) produce(topic string, partitions int32, values ...string) {
	e.t.Helper()
	testkit.ProduceRoundRobin(e.ctx, e.t, e.admin, topic, partitions, values...)
}

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
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
		shareconsumer.Logger(testkit.Logger()),
	}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// startOffsets returns the group's share-partition start offsets of topic:
// every offset below is ACKNOWLEDGED or ARCHIVED.
func (e *env) startOffsets(group, topic string) map[int32]int64 {
	e.t.Helper()
	return testkit.StartOffsets(e.ctx, e.t, e.admin, group, topic)
}

// eventually polls cond until it holds or the test's context ends.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	testkit.Eventually(e.ctx, e.t, what, cond)
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
	return testkit.PollValues(ctx, t, c, want, each)
}

// pollRecords polls until want distinct values arrived and returns their
// records.
func pollRecords(ctx context.Context, t *testing.T, c *shareconsumer.Consumer, want int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	testkit.PollValues(ctx, t, c, want, func(r *kgo.Record) { out = append(out, r) })
	return out
}

// expectNothing polls for d and fails if a record arrives.
func expectNothing(ctx context.Context, t *testing.T, c *shareconsumer.Consumer, d time.Duration) {
	t.Helper()
	testkit.ExpectNothing(ctx, t, c, d)
}

// ownAcks describes the acknowledgements that member sent on its own, as
// the broker received them: the batches of its ShareAcknowledge requests,
// then those of its ShareFetch requests. An empty ShareAcknowledge that
// does not close the session counts too.
func ownAcks(log *bundled.RequestLog, member string) []string {
	var desc []string
	for _, o := range log.Of(kmsg.ShareAcknowledge.Int16()) {
		r := o.Req.(*kmsg.ShareAcknowledgeRequest)
		if r.MemberID == nil || *r.MemberID != member {
			continue
		}
		n := len(desc)
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				for _, b := range p.AcknowledgementBatches {
					desc = append(desc, fmt.Sprintf("ShareAcknowledge p%d %d-%d %v", p.Partition, b.FirstOffset, b.LastOffset, b.AcknowledgeTypes))
				}
			}
		}
		if len(desc) == n && r.ShareSessionEpoch != -1 {
			desc = append(desc, "empty ShareAcknowledge")
		}
	}
	for _, o := range log.Of(kmsg.ShareFetch.Int16()) {
		r := o.Req.(*kmsg.ShareFetchRequest)
		if r.MemberID == nil || *r.MemberID != member {
			continue
		}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				for _, b := range p.AcknowledgementBatches {
					desc = append(desc, fmt.Sprintf("ShareFetch p%d %d-%d %v", p.Partition, b.FirstOffset, b.LastOffset, b.AcknowledgeTypes))
				}
			}
		}
	}
	return desc
}
