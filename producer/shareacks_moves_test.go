package producer

// TxnShareAcknowledge versions through the producer on mixed clusters:
// leader moves between versions, two groups of different versions in one
// transaction, and an abort after the acknowledgements were handed over.

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/wire"
)

// TestShareAcksLeaderMovesAcrossVersionsAfterLostAnswer: the leader stages a
// v1 request, its answer is lost, and the input partition's leadership
// moves to a node that serves only v0 (or from a v0 node to a v1 one)
// before the SDK retries. The retry must be accepted (the staging is
// already applied), the commit must succeed and acknowledge the records,
// and AddShareAcksToTxn is sent only when a v0 leader needs it.
func TestShareAcksLeaderMovesAcrossVersionsAfterLostAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to int32
		adds     int
	}{
		{name: "v1-to-v0", from: 1, to: 2, adds: 1},
		{name: "v0-to-v1", from: 2, to: 1, adds: 1},
		{name: "v1-to-v1", from: 1, to: 0, adds: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, broker.Nodes(3), broker.APIVersionCap(wire.TxnShareAcknowledgeKey, 0, 2))
			const in, out, group, n = "m-in", "m-out", "m-group", 4
			createTopic(t, c, in, 1)
			createTopic(t, c, out, 1)
			require.NoError(t, c.MoveLeader(in, 0, tc.from))
			produceInput(t, c, in, 1, n)
			member := joinShareGroup(t, c, group, in)
			ctx := testCtx(t)
			acks := acktrack.New(nil)
			acksFor(acks, in, member.topicID, 0, member.acquire(ctx, 0, n), kshare.AckAccept)
			p := newProducer(t, c, "m-worker", Linger(0))
			log := bundled.ObserveRequests(t, c)

			var dropped atomic.Bool
			stop := c.InjectFaults(func(node int32, _ string, req kmsg.Request) broker.FaultAction {
				if req.Key() != wire.TxnShareAcknowledgeKey || node != tc.from || !dropped.CompareAndSwap(false, true) {
					return broker.FaultAction{}
				}
				return broker.FaultAction{Fault: broker.DropAnswer, AfterHandling: func(kmsg.Response) {
					require.NoError(t, c.MoveLeader(in, 0, tc.to))
				}}
			})
			t.Cleanup(stop)

			require.NoError(t, p.BeginTransaction())
			p.Produce(ctx, &kgo.Record{Topic: out, Value: []byte("out")}, nil)
			require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
			require.NoError(t, p.CommitTransaction(ctx))
			require.True(t, dropped.Load())

			require.Len(t, log.Of(wire.AddShareAcksToTxnKey), tc.adds)
			var versions []int16
			for _, o := range log.Of(wire.TxnShareAcknowledgeKey) {
				versions = append(versions, o.Req.GetVersion())
			}
			want := map[string][]int16{"v1-to-v0": {1, 0}, "v0-to-v1": {0, 1}, "v1-to-v1": {1, 1}}[tc.name]
			require.Equal(t, want, versions)
			require.EqualValues(t, n, startOffsets(t, member.cl, group, in)[0])
			require.Len(t, readCommitted(t, c, out, 1), 1)
		})
	}
}

// TestShareAcksTwoGroupsMixedVersions: one transaction acknowledges for two
// groups, one whose leader serves only v0 and one whose leader serves v1:
// one AddShareAcksToTxn, for the v0 group only, and both commit.
func TestShareAcksTwoGroupsMixedVersions(t *testing.T) {
	c := newCluster(t, broker.Nodes(3), broker.APIVersionCap(wire.TxnShareAcknowledgeKey, 0, 2))
	const out, n = "g-out", 3
	createTopic(t, c, out, 1)
	type grp struct {
		in, group string
		leader    int32
		member    *shareMember
	}
	groups := []*grp{{in: "g-in-a", group: "g-a", leader: 2}, {in: "g-in-b", group: "g-b", leader: 1}}
	ctx := testCtx(t)
	p := newProducer(t, c, "g-worker", Linger(0))
	for _, g := range groups {
		createTopic(t, c, g.in, 1)
		require.NoError(t, c.MoveLeader(g.in, 0, g.leader))
		produceInput(t, c, g.in, 1, n)
		g.member = joinShareGroup(t, c, g.group, g.in)
	}
	log := bundled.ObserveRequests(t, c)
	require.NoError(t, p.BeginTransaction())
	p.Produce(ctx, &kgo.Record{Topic: out, Value: []byte("out")}, nil)
	for _, g := range groups {
		acks := acktrack.New(nil)
		acksFor(acks, g.in, g.member.topicID, 0, g.member.acquire(ctx, 0, n), kshare.AckAccept)
		require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), g.member.metadata()))
	}
	require.NoError(t, p.CommitTransaction(ctx))
	adds := log.Of(wire.AddShareAcksToTxnKey)
	require.Len(t, adds, 1)
	require.Equal(t, "g-a", adds[0].Req.(*wire.AddShareAcksToTxnRequest).GroupID)
	for _, g := range groups {
		require.EqualValues(t, n, startOffsets(t, g.member.cl, g.group, g.in)[0], "group %s acknowledged", g.group)
	}
}

// TestShareAcksAbortBeforeCommitStagesNothing: acknowledgements handed to
// a transaction that aborts before its commit were never sent (the
// producer stages them at commit), so the records stay acquired, never
// TX_PENDING, and the next transaction acknowledges them.
func TestShareAcksAbortBeforeCommitStagesNothing(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const in, out, group, n = "a-in", "a-out", "a-group", 4
	member, acks, _ := heldInputs(t, c, in, out, group, n)
	ctx := testCtx(t)
	p := newProducer(t, c, "a-worker", Linger(0))

	require.NoError(t, p.BeginTransaction())
	p.Produce(ctx, &kgo.Record{Topic: out, Value: []byte("aborted")}, nil)
	require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
	require.NoError(t, p.AbortTransaction(ctx))
	require.Zero(t, startOffsets(t, member.cl, group, in)[0])

	again := acktrack.New(nil)
	acksFor(again, in, member.topicID, 0, map[int64]int16{0: 1, 1: 1, 2: 1, 3: 1}, kshare.AckAccept)
	require.NoError(t, p.BeginTransaction())
	p.Produce(ctx, &kgo.Record{Topic: out, Value: []byte("committed")}, nil)
	require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(again), member.metadata()))
	require.NoError(t, p.CommitTransaction(ctx))
	require.EqualValues(t, n, startOffsets(t, member.cl, group, in)[0])
	got := readCommitted(t, c, out, 1)
	require.Len(t, got, 1)
}
