package producer

// TxnShareAcknowledge versions through the producer: which version each
// leader gets and when AddShareAcksToTxn goes first, on v1, v0 and mixed
// clusters, after a downgrade, across leader moves between versions, with
// two groups of different versions in one transaction, and an abort after
// the acknowledgements were handed over.

import (
	"fmt"
	"slices"
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

// A commit sends AddShareAcksToTxn only where a leader cannot add the
// share state partition itself: with TxnShareAcknowledge v1 on every
// leader of a transaction version 2 transaction it sends none; with a
// leader that serves only v0, a client pinned to v0, or a transaction
// version 1 client it sends one, before the v0 requests. Every variant
// commits the outputs and the acknowledgements.
func TestShareAcksVersionPerLeader(t *testing.T) {
	tv1 := wire.KgoMaxVersions()
	tv1.SetMaxKeyVersion(kmsg.EndTxn.Int16(), 4)
	tv1.SetMaxKeyVersion(kmsg.Produce.Int16(), 11)
	pinnedV0 := wire.KgoMaxVersions()
	pinnedV0.SetMaxKeyVersion(wire.TxnShareAcknowledgeKey, 0)
	for _, tc := range []struct {
		name      string
		brokerOpt []broker.Opt
		clientOpt []Opt
		adds      int
		v0Nodes   []int32 // the nodes that get v0
		allV0     bool    // every node gets v0
	}{
		{name: "v1", adds: 0},
		{name: "v0-brokers", brokerOpt: []broker.Opt{broker.APIVersionCap(wire.TxnShareAcknowledgeKey, 0)}, adds: 1, allV0: true},
		{name: "mixed", brokerOpt: []broker.Opt{broker.APIVersionCap(wire.TxnShareAcknowledgeKey, 0, 1)}, adds: 1, v0Nodes: []int32{1}},
		{name: "client-pinned-v0", clientOpt: []Opt{KgoOpts(kgo.MaxVersions(pinnedV0))}, adds: 1, allV0: true},
		{name: "tv1", clientOpt: []Opt{KgoOpts(kgo.MaxVersions(tv1))}, adds: 1, allV0: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, append([]broker.Opt{broker.Nodes(3)}, tc.brokerOpt...)...)
			const in, out, group, partitions, perPartition = "v-in", "v-out", "v-group", 3, 4
			createTopic(t, c, in, partitions)
			createTopic(t, c, out, 1)
			produceInput(t, c, in, partitions, perPartition)
			member := joinShareGroup(t, c, group, in)
			p := newProducer(t, c, "v-worker", append([]Opt{Linger(0)}, tc.clientOpt...)...)
			ctx := testCtx(t)
			log := bundled.ObserveRequests(t, c)

			acks := acktrack.New(nil)
			require.NoError(t, p.BeginTransaction())
			leaders := map[int32]bool{}
			for part := int32(0); part < partitions; part++ {
				leader, err := c.Leader(in, part)
				require.NoError(t, err)
				leaders[leader] = true
				got := member.acquire(ctx, part, perPartition)
				acksFor(acks, in, member.topicID, part, got, kshare.AckAccept)
				p.Produce(ctx, &kgo.Record{Topic: out, Value: []byte(fmt.Sprintf("out-%d", part))}, nil)
			}
			require.Len(t, leaders, 3, "the partitions have a leader each, so every node gets a request")
			require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
			require.NoError(t, p.CommitTransaction(ctx))

			require.Len(t, log.Of(wire.AddShareAcksToTxnKey), tc.adds, "AddShareAcksToTxn requests")
			sent := log.Of(wire.TxnShareAcknowledgeKey)
			require.Len(t, sent, 3, "one TxnShareAcknowledge per leader")
			for _, o := range sent {
				want := int16(1)
				if tc.allV0 || slices.Contains(tc.v0Nodes, o.Node) {
					want = 0
				}
				require.Equal(t, want, o.Req.GetVersion(), "TxnShareAcknowledge version at node %d", o.Node)
			}
			starts := startOffsets(t, member.cl, group, in)
			for part := int32(0); part < partitions; part++ {
				require.EqualValues(t, perPartition, starts[part], "partition %d acknowledged", part)
			}
			require.Len(t, readCommitted(t, c, out, 1), partitions)
		})
	}
}

// If kgo sends a leader an older TxnShareAcknowledge than the producer's
// ApiVersions answer promised (a broker downgraded since it was asked),
// the v0 request found the state partition outside the transaction and
// staged nothing: the commit sends AddShareAcksToTxn and v0, and commits.
func TestShareAcksDowngradedLeader(t *testing.T) {
	c := newCluster(t, broker.Nodes(3), broker.APIVersionCap(wire.TxnShareAcknowledgeKey, 0))
	// The producer's own ApiVersions (client software "kshare") hears v1;
	// kgo's, on every new connection, hears the truth.
	stop := c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		av, ok := req.(*kmsg.ApiVersionsRequest)
		if !ok || av.ClientSoftwareName != "kshare" {
			return broker.FaultAction{}
		}
		return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
			r := resp.(*kmsg.ApiVersionsResponse)
			for i := range r.ApiKeys {
				if r.ApiKeys[i].ApiKey == wire.TxnShareAcknowledgeKey {
					r.ApiKeys[i].MaxVersion = 1
				}
			}
		}}
	})
	t.Cleanup(stop)
	const in, out, group, perPartition = "d-in", "d-out", "d-group", 4
	createTopic(t, c, in, 1)
	createTopic(t, c, out, 1)
	produceInput(t, c, in, 1, perPartition)
	member := joinShareGroup(t, c, group, in)
	p := newProducer(t, c, "d-worker", Linger(0))
	ctx := testCtx(t)
	log := bundled.ObserveRequests(t, c)

	acks := acktrack.New(nil)
	require.NoError(t, p.BeginTransaction())
	acksFor(acks, in, member.topicID, 0, member.acquire(ctx, 0, perPartition), kshare.AckAccept)
	p.Produce(ctx, &kgo.Record{Topic: out, Value: []byte("out")}, nil)
	require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
	require.NoError(t, p.CommitTransaction(ctx))

	require.Len(t, log.Of(wire.AddShareAcksToTxnKey), 1)
	sent := log.Of(wire.TxnShareAcknowledgeKey)
	require.Len(t, sent, 2, "the downgraded attempt, then v0 after AddShareAcksToTxn")
	for _, o := range sent {
		require.Zero(t, o.Req.GetVersion())
	}
	require.EqualValues(t, perPartition, startOffsets(t, member.cl, group, in)[0])
	require.Len(t, readCommitted(t, c, out, 1), 1)
}

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
