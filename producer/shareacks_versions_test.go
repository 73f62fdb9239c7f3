package producer

// TxnShareAcknowledge through the producer, as KIP-1289's draft has it:
// v0 only, one request per leader and no AddShareAcksToTxn, the draft's
// batch shapes, RELEASE left out of the transaction, a retry after a lost
// answer and a leader move, two groups in one transaction, a broker
// without key 95, and an abort after the acknowledgements were handed
// over.

import (
	"fmt"
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

// A commit sends TxnShareAcknowledge v0 once per leader and nothing to the
// transaction coordinator but EndTxn: the leaders add the share state
// partitions themselves. Each request carries the member's epoch and the
// partition's acknowledgements as the draft's batches; RELEASE is not in
// them.
func TestShareAcksDraftRequests(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const in, out, group, partitions, perPartition = "v-in", "v-out", "v-group", 3, 4
	createTopic(t, c, in, partitions)
	createTopic(t, c, out, 1)
	produceInput(t, c, in, partitions, perPartition)
	member := joinShareGroup(t, c, group, in)
	p := newProducer(t, c, "v-worker", Linger(0))
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
		require.Len(t, got, perPartition)
		for o := range got {
			typ := kshare.AckAccept
			switch {
			case part == 1 && o%2 == 1:
				typ = kshare.AckReject // mixed: one type per offset
			case part == 2 && o == 3:
				typ = kshare.AckRelease // not in the transaction
			}
			acks.Add(in, member.topicID, part, acktrack.Record{Offset: o, Type: int8(typ)})
		}
		p.Produce(ctx, &kgo.Record{Topic: out, Value: []byte(fmt.Sprintf("out-%d", part))}, nil)
	}
	require.Len(t, leaders, 3, "the partitions have a leader each, so every node gets a request")
	require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
	require.NoError(t, p.CommitTransaction(ctx))

	require.Empty(t, log.Of(96), "no key 96")
	sent := log.Of(wire.TxnShareAcknowledgeKey)
	require.Len(t, sent, 3, "one TxnShareAcknowledge per leader")
	batches := map[int32][]wire.TxnShareAcknowledgeBatch{}
	for _, o := range sent {
		require.Zero(t, o.Req.GetVersion())
		req := o.Req.(*wire.TxnShareAcknowledgeRequest)
		require.Equal(t, member.epoch, req.MemberEpoch)
		require.Equal(t, "v-worker", req.TransactionalID)
		for _, tp := range req.Topics {
			for _, pp := range tp.Partitions {
				batches[pp.Partition] = pp.AcknowledgementBatches
			}
		}
	}
	A, R := wire.AckAccept, wire.AckReject
	require.Equal(t, map[int32][]wire.TxnShareAcknowledgeBatch{
		0: {{FirstOffset: 0, LastOffset: 3, AcknowledgeTypes: []wire.AckType{A}}},
		1: {{FirstOffset: 0, LastOffset: 3, AcknowledgeTypes: []wire.AckType{A, R, A, R}}},
		2: {{FirstOffset: 0, LastOffset: 2, AcknowledgeTypes: []wire.AckType{A}}},
	}, batches)
	starts := startOffsets(t, member.cl, group, in)
	require.EqualValues(t, perPartition, starts[0])
	require.EqualValues(t, perPartition, starts[1])
	require.EqualValues(t, 3, starts[2], "offset 3 was not acknowledged in the transaction")
	require.Len(t, readCommitted(t, c, out, 1), partitions)
}

// A broker that does not serve key 95 fails SendShareAcksToTransaction
// with ErrUnsupported naming it, and nothing is sent.
func TestShareAcksBrokerWithoutKey95(t *testing.T) {
	c := newCluster(t, broker.Nodes(3), broker.APIVersionCap(wire.TxnShareAcknowledgeKey, -1, 2))
	const in, group = "u-in", "u-group"
	createTopic(t, c, in, 1)
	require.NoError(t, c.MoveLeader(in, 0, 2))
	produceInput(t, c, in, 1, 2)
	member := joinShareGroup(t, c, group, in)
	ctx := testCtx(t)
	acks := acktrack.New(nil)
	acksFor(acks, in, member.topicID, 0, member.acquire(ctx, 0, 2), kshare.AckAccept)
	p := newProducer(t, c, "u-worker", Linger(0))
	log := bundled.ObserveRequests(t, c)
	require.NoError(t, p.BeginTransaction())
	err := p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata())
	require.ErrorIs(t, err, kshare.ErrUnsupported)
	require.ErrorContains(t, err, "broker 2")
	require.ErrorContains(t, err, "API key 95 (TxnShareAcknowledge) not advertised")
	require.NoError(t, p.AbortTransaction(ctx))
	require.Empty(t, log.Of(wire.TxnShareAcknowledgeKey))
}

// TestShareAcksLeaderMovesAfterLostAnswer: the leader stages a request,
// its answer is lost, and the input partition's leadership moves before
// the SDK retries. The retry must be accepted (the staging is already
// applied), and the commit must succeed and acknowledge the records.
func TestShareAcksLeaderMovesAfterLostAnswer(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const in, out, group, n = "m-in", "m-out", "m-group", 4
	const from, to = 1, 2
	createTopic(t, c, in, 1)
	createTopic(t, c, out, 1)
	require.NoError(t, c.MoveLeader(in, 0, from))
	produceInput(t, c, in, 1, n)
	member := joinShareGroup(t, c, group, in)
	ctx := testCtx(t)
	acks := acktrack.New(nil)
	acksFor(acks, in, member.topicID, 0, member.acquire(ctx, 0, n), kshare.AckAccept)
	p := newProducer(t, c, "m-worker", Linger(0))
	log := bundled.ObserveRequests(t, c)

	var dropped atomic.Bool
	stop := c.InjectFaults(func(node int32, _ string, req kmsg.Request) broker.FaultAction {
		if req.Key() != wire.TxnShareAcknowledgeKey || node != from || !dropped.CompareAndSwap(false, true) {
			return broker.FaultAction{}
		}
		return broker.FaultAction{Fault: broker.DropAnswer, AfterHandling: func(kmsg.Response) {
			require.NoError(t, c.MoveLeader(in, 0, to))
		}}
	})
	t.Cleanup(stop)

	require.NoError(t, p.BeginTransaction())
	p.Produce(ctx, &kgo.Record{Topic: out, Value: []byte("out")}, nil)
	require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
	require.NoError(t, p.CommitTransaction(ctx))
	require.True(t, dropped.Load())

	var nodes []int32
	for _, o := range log.Of(wire.TxnShareAcknowledgeKey) {
		nodes = append(nodes, o.Node)
	}
	require.Equal(t, []int32{from, to}, nodes, "the lost attempt, then the retry at the new leader")
	require.EqualValues(t, n, startOffsets(t, member.cl, group, in)[0])
	require.Len(t, readCommitted(t, c, out, 1), 1)
}

// TestShareAcksTwoGroups: one transaction acknowledges for two groups
// whose partitions have different leaders; both commit.
func TestShareAcksTwoGroups(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
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
	require.Len(t, log.Of(wire.TxnShareAcknowledgeKey), 2)
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

// A transaction version 1 producer cannot carry share acknowledgements:
// KIP-1289's leader adds the share state partition to the transaction as a
// version 2 leader does. SendShareAcksToTransaction returns ErrUnsupported,
// sends nothing, and the transaction still commits.
func TestShareAcksNeedTransactionVersion2(t *testing.T) {
	c := newCluster(t, broker.Nodes(1))
	const in, out, group = "t-in", "t-out", "t-group"
	member, acks, _ := heldInputs(t, c, in, out, group, 2)
	tv1 := wire.KgoMaxVersions()
	tv1.SetMaxKeyVersion(kmsg.EndTxn.Int16(), 4)
	tv1.SetMaxKeyVersion(kmsg.Produce.Int16(), 11)
	p := newProducer(t, c, "t-worker", Linger(0), KgoOpts(kgo.MaxVersions(tv1)))
	ctx := testCtx(t)
	log := bundled.ObserveRequests(t, c)
	require.NoError(t, p.BeginTransaction())
	p.Produce(ctx, &kgo.Record{Topic: out, Value: []byte("out")}, nil)
	err := p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata())
	require.ErrorIs(t, err, kshare.ErrUnsupported)
	require.NotErrorIs(t, err, kshare.ErrFatal)
	require.ErrorContains(t, err, "transaction version 2")
	require.NoError(t, p.CommitTransaction(ctx))
	require.Empty(t, log.Of(wire.TxnShareAcknowledgeKey))
	require.Len(t, readCommitted(t, c, out, 1), 1)
}
