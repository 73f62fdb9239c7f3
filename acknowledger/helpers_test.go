package acknowledger_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/shareconsumer"
)

const (
	topic = "in"
	group = "g"
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
	c := bundled.Cluster(t, opts...)
	e := &env{t: t, c: c, ctx: testkit.Context(t)}
	e.admin = testkit.Client(t, c.Bootstrap(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	testkit.CreateTopic(e.ctx, t, e.admin, topic, partitions)
	testkit.SetGroupConfigs(e.ctx, t, e.admin, group, "share.auto.offset.reset", "earliest")
	values := make([]string, inputs)
	for i := range values {
		values[i] = strconv.Itoa(i)
	}
	testkit.ProduceRoundRobin(e.ctx, t, e.admin, topic, partitions, values...)
	return e
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
		shareconsumer.Logger(testkit.Logger()),
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
		acknowledger.Logger(testkit.Logger()),
	}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { a.Close(context.Background()) })
	require.NoError(e.t, a.InitTransactions(e.ctx))
	return a
}

// poll polls c until want distinct values arrived and returns the first
// record of each.
func (e *env) poll(c *shareconsumer.Consumer, want int) []*kgo.Record {
	e.t.Helper()
	seen := make(map[string]bool)
	var out []*kgo.Record
	testkit.PollValues(e.ctx, e.t, c, want, func(r *kgo.Record) {
		if !seen[string(r.Value)] {
			seen[string(r.Value)] = true
			out = append(out, r)
		}
	})
	return out
}

// expectNothing polls for d and fails if a record arrives.
func (e *env) expectNothing(c *shareconsumer.Consumer, d time.Duration) {
	e.t.Helper()
	testkit.ExpectNothing(e.ctx, e.t, c, d)
}

func deliveries(c *shareconsumer.Consumer, recs []*kgo.Record) []int16 {
	out := make([]int16, len(recs))
	for i, r := range recs {
		out[i], _ = c.DeliveryCount(r)
	}
	return out
}

// allDone waits until every partition's start offset reached end: every
// record below is ACKNOWLEDGED or ARCHIVED.
func (e *env) allDone(partitions int32, end int64) {
	e.t.Helper()
	testkit.Eventually(e.ctx, e.t, fmt.Sprintf("every partition's start offset at %d", end), func() bool {
		got := testkit.StartOffsets(e.ctx, e.t, e.admin, group, topic)
		for p := range partitions {
			if got[p] != end {
				return false
			}
		}
		return true
	})
}
