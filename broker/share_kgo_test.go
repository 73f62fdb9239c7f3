package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// These tests run kgo's own share consumer (kgo.ShareGroup) against the
// bundled cluster.

// shareWaitMembers waits until the group has n members.
func shareWaitMembers(t testing.TB, ctx context.Context, admin *kgo.Client, group string, n int) {
	t.Helper()
	shareEventually(t, ctx, "share group members", func() bool {
		described, err := kadm.NewClient(admin).DescribeShareGroups(ctx, group)
		if err != nil {
			return false
		}
		d, ok := described[group]
		return ok && d.Err == nil && len(d.Members) == n
	})
}

// TestShareKgoTwoConsumersEachRecordOnce runs two kgo share consumers in
// one group over a 3-partition topic while records arrive: both get
// records, and every record is delivered once, to exactly one of them.
func TestShareKgoTwoConsumersEachRecordOnce(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "orders", 3)
	admin := newTestClient(t, c)
	ctx := testCtx(t)

	var got shareCollector
	consumers := []*kgo.Client{
		shareConsumer(t, c, "g1", "orders", kgo.ShareMaxRecords(10)),
		shareConsumer(t, c, "g1", "orders", kgo.ShareMaxRecords(10)),
	}
	var stops []func()
	for i, cl := range consumers {
		stops = append(stops, got.collect(t, ctx, cl, i))
	}
	shareWaitMembers(t, ctx, admin, "g1", 2)

	prod := shareProducer(t, c)
	var values []string
	ends := map[int32]int64{}
	// Records arrive in rounds: at least 30, and until both members have
	// got some. Which member a record goes to is a race between their
	// fetches (a member that joined first may fetch every partition until
	// its heartbeat tells it of the other), so a fixed number of rounds
	// would leave "both consume" to how fast each member runs.
	consumed := func(i int) bool {
		for _, d := range got.snapshot() {
			if d.consumer == i {
				return true
			}
		}
		return false
	}
	for round := 0; round < 30 || !consumed(0) || !consumed(1); round++ {
		require.NoError(t, ctx.Err(), "after %d rounds: member 0 consumed %v, member 1 %v", round, consumed(0), consumed(1))
		batch := shareValues(fmt.Sprintf("r%d", round), 20)
		for _, r := range shareProduce(t, prod, "orders", 3, batch...) {
			ends[r.Partition] = max(ends[r.Partition], r.Offset+1)
		}
		values = append(values, batch...)
		if round >= 30 {
			// One more round only once this one was delivered.
			shareEventually(t, ctx, "round delivered", func() bool { return len(got.snapshot()) >= len(values) })
		}
	}
	shareEventually(t, ctx, "every record delivered", func() bool { return len(got.snapshot()) >= len(values) })
	shareEventually(t, ctx, "every record acknowledged", func() bool {
		offs := shareOffsets(t, admin, "g1", "orders")
		for p, end := range ends {
			if offs[p].StartOffset != end {
				return false
			}
		}
		return true
	})
	for _, stop := range stops {
		stop()
	}

	perConsumer := map[int]int{}
	seen := map[string]int{}
	for _, d := range got.snapshot() {
		seen[d.value]++
		perConsumer[d.consumer]++
		require.Equal(t, int32(1), d.count, "record %s was redelivered", d.value)
	}
	require.Len(t, seen, len(values))
	for v, n := range seen {
		require.Equal(t, 1, n, "record %s delivered %d times", v, n)
	}
	require.Positive(t, perConsumer[0], "both members of the group consume")
	require.Positive(t, perConsumer[1], "both members of the group consume")
}

// TestShareKgoReleasedRecordsComeBack releases every record on its first
// delivery: each comes back once more, with delivery count 2, and is then
// accepted.
func TestShareKgoReleasedRecordsComeBack(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "jobs", 3)
	admin := newTestClient(t, c)
	shareSetGroupConfigs(t, admin, "g", "share.auto.offset.reset", "earliest")
	values := shareValues("job", 30)
	shareProduce(t, shareProducer(t, c), "jobs", 3, values...)
	ctx := testCtx(t)
	cl := shareConsumer(t, c, "g", "jobs")

	counts := map[string][]int32{}
	for done := 0; done < len(values); {
		for _, r := range sharePoll(t, ctx, cl) {
			v := string(r.Value)
			counts[v] = append(counts[v], r.DeliveryCount())
			if r.DeliveryCount() == 1 {
				r.Ack(kgo.AckRelease)
			} else {
				r.Ack(kgo.AckAccept)
				done++
			}
		}
		require.NoError(t, ctx.Err())
	}
	require.NoError(t, cl.FlushAcks(ctx))
	for _, v := range values {
		require.Equal(t, []int32{1, 2}, counts[v], "record %s", v)
	}
	offs := shareOffsets(t, admin, "g", "jobs")
	for p := int32(0); p < 3; p++ {
		require.Equal(t, int64(10), offs[p].StartOffset, "partition %d is done", p)
	}
}

// TestShareKgoRejectedRecordsNeverComeBack rejects half of the records;
// once a later sentinel record arrives, no rejected record has come back.
func TestShareKgoRejectedRecordsNeverComeBack(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "mail", 1)
	admin := newTestClient(t, c)
	shareSetGroupConfigs(t, admin, "g", "share.auto.offset.reset", "earliest")
	prod := shareProducer(t, c)
	values := shareValues("m", 20)
	shareProduce(t, prod, "mail", 1, values...)
	ctx := testCtx(t)
	cl := shareConsumer(t, c, "g", "mail")

	seen := map[string]int{}
	rejected := map[string]bool{}
	for len(seen) < len(values) {
		for _, r := range sharePoll(t, ctx, cl) {
			seen[string(r.Value)]++
			if r.Offset%2 == 0 {
				r.Ack(kgo.AckReject)
				rejected[string(r.Value)] = true
			}
		}
		require.NoError(t, ctx.Err())
	}
	require.NoError(t, cl.FlushAcks(ctx))
	shareProduce(t, prod, "mail", 1, "sentinel")
	for seen["sentinel"] == 0 {
		for _, r := range sharePoll(t, ctx, cl) {
			seen[string(r.Value)]++
		}
		require.NoError(t, ctx.Err())
	}
	require.Len(t, rejected, 10)
	for v := range rejected {
		require.Equal(t, 1, seen[v], "rejected record %s came back", v)
	}
}

// TestShareKgoUnacknowledgedRecordsMoveAfterLock lets one consumer take
// every record and then stop (it neither acknowledges nor fetches): after
// the acquisition lock expires the other consumer gets them all, as second
// deliveries.
func TestShareKgoUnacknowledgedRecordsMoveAfterLock(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "work", 3)
	admin := newTestClient(t, c)
	shareSetGroupConfigs(t, admin, "g", "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "1000")
	values := shareValues("w", 30)
	shareProduce(t, shareProducer(t, c), "work", 3, values...)
	ctx := testCtx(t)

	stalled := shareConsumer(t, c, "g", "work", kgo.FetchMaxWait(100*time.Millisecond))
	held := map[string]bool{}
	for len(held) < len(values) {
		for _, r := range sharePoll(t, ctx, stalled) {
			held[string(r.Value)] = true
		}
		require.NoError(t, ctx.Err())
	}
	stalled.PauseFetchTopics("work") // stops fetching; never polls again, so never acknowledges

	other := shareConsumer(t, c, "g", "work")
	got := map[string]int32{}
	for len(got) < len(values) {
		for _, r := range sharePoll(t, ctx, other) {
			got[string(r.Value)] = r.DeliveryCount()
		}
		require.NoError(t, ctx.Err())
	}
	for _, v := range values {
		require.Equal(t, int32(2), got[v], "record %s went to the other consumer as its second delivery", v)
	}
}

// TestShareKgoDeliveryLimitArchives releases one record every time it is
// delivered: with share.delivery.count.limit=2 it is archived after its
// second delivery and the group moves past it.
func TestShareKgoDeliveryLimitArchives(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "q", 1)
	admin := newTestClient(t, c)
	shareSetGroupConfigs(t, admin, "g", "share.auto.offset.reset", "earliest", "share.delivery.count.limit", "2")
	prod := shareProducer(t, c)
	shareProduce(t, prod, "q", 1, "poison", "fine")
	ctx := testCtx(t)
	cl := shareConsumer(t, c, "g", "q")

	var poison []int32
	seen := map[string]bool{}
	for len(poison) < 2 || !seen["fine"] {
		for _, r := range sharePoll(t, ctx, cl) {
			seen[string(r.Value)] = true
			if string(r.Value) == "poison" {
				poison = append(poison, r.DeliveryCount())
				r.Ack(kgo.AckRelease)
			}
		}
		require.NoError(t, ctx.Err())
	}
	require.NoError(t, cl.FlushAcks(ctx))
	shareProduce(t, prod, "q", 1, "sentinel")
	for !seen["sentinel"] {
		for _, r := range sharePoll(t, ctx, cl) {
			seen[string(r.Value)] = true
			if string(r.Value) == "poison" {
				poison = append(poison, r.DeliveryCount())
			}
		}
		require.NoError(t, ctx.Err())
	}
	require.Equal(t, []int32{1, 2}, poison, "released past the delivery limit: archived")
	cl.MarkAcks(kgo.AckAccept)
	require.NoError(t, cl.FlushAcks(ctx))
	shareEventually(t, ctx, "the group moves past the archived record", func() bool {
		return shareOffsets(t, admin, "g", "q")[0].StartOffset == 3
	})
}

// TestShareKgoFollowsLeaderMove moves every partition's leadership while a
// kgo share consumer reads: it follows the new leaders (which rebuild the
// share-partitions from the share coordinator), every record is delivered
// and the group finishes every partition. Records held at the old leader
// when it lost the partition may be delivered again; none is lost.
func TestShareKgoFollowsLeaderMove(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "moving", 3)
	admin := newTestClient(t, c)
	shareSetGroupConfigs(t, admin, "g", "share.auto.offset.reset", "earliest")
	ctx := testCtx(t)
	cl := shareConsumer(t, c, "g", "moving", kgo.ShareMaxRecords(20))
	var got shareCollector
	stop := got.collect(t, ctx, cl, 0)
	defer stop()

	prod := shareProducer(t, c)
	ends := map[int32]int64{}
	produce := func(prefix string) {
		for _, r := range shareProduce(t, prod, "moving", 3, shareValues(prefix, 150)...) {
			ends[r.Partition] = max(ends[r.Partition], r.Offset+1)
		}
	}
	produce("before")
	shareEventually(t, ctx, "some records delivered", func() bool { return len(got.snapshot()) >= 30 })
	for p := int32(0); p < 3; p++ {
		leader, err := c.Leader("moving", p)
		require.NoError(t, err)
		require.NoError(t, c.MoveLeader("moving", p, (leader+1)%3))
	}
	produce("after")
	shareEventually(t, ctx, "every record delivered and acknowledged", func() bool {
		distinct := map[string]bool{}
		for _, d := range got.snapshot() {
			distinct[d.value] = true
		}
		if len(distinct) < 300 {
			return false
		}
		offs := shareOffsets(t, admin, "g", "moving")
		for p, end := range ends {
			if offs[p].StartOffset != end {
				return false
			}
		}
		return true
	})
}
