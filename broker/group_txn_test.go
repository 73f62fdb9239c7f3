package broker

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// groupTxnProducer is a raw transactional producer for the tests: its
// transactional id, producer id and epoch.
type groupTxnProducer struct {
	txnID string
	pid   int64
	epoch int16
}

func groupTxnInit(t testing.TB, c *Cluster, txnID string) *groupTxnProducer {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version = 5
	req.TransactionalID = &txnID
	req.TransactionTimeoutMillis = 60000
	req.ProducerID, req.ProducerEpoch = -1, -1
	leader, err := c.Leader(wire.TransactionStateTopic, c.CoordinatorPartition(coordinatorTxn, txnID))
	require.NoError(t, err)
	resp := groupAwait(t, groupSend(t, c, leader, req)).(*kmsg.InitProducerIDResponse)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	return &groupTxnProducer{txnID: txnID, pid: resp.ProducerID, epoch: resp.ProducerEpoch}
}

// commitOffsets sends TxnOffsetCommit at version to the group's
// coordinator and returns partition 0's error.
func (p *groupTxnProducer) commitOffsets(t testing.TB, c *Cluster, version int16, group, memberID string, generation int32, topic string, offset int64) error {
	t.Helper()
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.Version = version
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = p.txnID, p.pid, p.epoch
	req.Group, req.MemberID, req.Generation = group, memberID, generation
	req.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: offset, LeaderEpoch: -1}}}}
	resp := groupAwait(t, groupSend(t, c, groupCoordinatorNode(t, c, group), req)).(*kmsg.TxnOffsetCommitResponse)
	require.Len(t, resp.Topics, 1)
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// end sends EndTxn v5 and continues with the epoch it returns.
func (p *groupTxnProducer) end(t testing.TB, c *Cluster, commit bool) {
	t.Helper()
	req := kmsg.NewPtrEndTxnRequest()
	req.Version = 5
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = p.txnID, p.pid, p.epoch, commit
	leader, err := c.Leader(wire.TransactionStateTopic, c.CoordinatorPartition(coordinatorTxn, p.txnID))
	require.NoError(t, err)
	resp := groupAwait(t, groupSend(t, c, leader, req)).(*kmsg.EndTxnResponse)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	p.pid, p.epoch = resp.ProducerID, resp.ProducerEpoch
}

// groupFetchOne fetches partition 0 of topic at the group's coordinator.
func groupFetchOne(t testing.TB, c *Cluster, group, topic string, requireStable bool) groupFetched {
	t.Helper()
	fetched, err := groupFetch(t, c, groupCoordinatorNode(t, c, group), group, topic, requireStable, 0)
	require.NoError(t, err)
	return fetched[topic][0]
}

func TestGroupTxnOffsetsVisibleOnlyOnCommit(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	groupTopic(t, c, "in", 1)
	const group = "g-txn"
	p := groupTxnInit(t, c, "txn-offsets")

	require.NoError(t, p.commitOffsets(t, c, 5, group, "", -1, "in", 10))
	require.Equal(t, groupFetched{offset: -1}, groupFetchOne(t, c, group, "in", false), "pending offsets are invisible")
	require.ErrorIs(t, groupFetchOne(t, c, group, "in", true).err, kerr.UnstableOffsetCommit)
	p.end(t, c, true)
	require.Equal(t, groupFetched{offset: 10}, groupFetchOne(t, c, group, "in", true))

	require.NoError(t, p.commitOffsets(t, c, 5, group, "", -1, "in", 20))
	require.ErrorIs(t, groupFetchOne(t, c, group, "in", true).err, kerr.UnstableOffsetCommit)
	p.end(t, c, false)
	require.Equal(t, groupFetched{offset: 10}, groupFetchOne(t, c, group, "in", true), "an aborted commit is discarded")

	// Replay on a new coordinator reproduces both outcomes.
	groupMoveCoordinator(t, c, group)
	require.Equal(t, groupFetched{offset: 10}, groupFetchOne(t, c, group, "in", true))
}

func TestGroupTxnOffsetsPendingAcrossCoordinatorMove(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	groupTopic(t, c, "in", 1)
	const group = "g-txn-move"
	p := groupTxnInit(t, c, "txn-move")

	require.NoError(t, p.commitOffsets(t, c, 5, group, "", -1, "in", 7))
	groupMoveCoordinator(t, c, group)
	require.ErrorIs(t, groupFetchOne(t, c, group, "in", true).err, kerr.UnstableOffsetCommit, "the new coordinator replays the pending commit")
	p.end(t, c, true)
	require.Equal(t, groupFetched{offset: 7}, groupFetchOne(t, c, group, "in", true))

	// A later plain commit beats an older transactional one that commits
	// after it.
	require.NoError(t, p.commitOffsets(t, c, 5, group, "", -1, "in", 8))
	require.NoError(t, groupCommit(t, c, groupCoordinatorNode(t, c, group), 9, group, "", -1, "in", map[int32]int64{0: 9})[0])
	p.end(t, c, true)
	require.Equal(t, groupFetched{offset: 9}, groupFetchOne(t, c, group, "in", false))
	groupMoveCoordinator(t, c, group)
	require.Equal(t, groupFetched{offset: 9}, groupFetchOne(t, c, group, "in", false))
}

func TestGroupTxnOffsetCommitValidation(t *testing.T) {
	c := newTestCluster(t)
	groupTopic(t, c, "in", 1)
	const group = "g-txn-validate"
	p := groupTxnInit(t, c, "txn-validate")
	member, gen := groupStableOne(t, c, 0, group)

	require.ErrorIs(t, p.commitOffsets(t, c, 5, group, member, gen+1, "in", 1), kerr.IllegalGeneration)
	require.ErrorIs(t, p.commitOffsets(t, c, 5, group, "ghost", gen, "in", 1), kerr.UnknownMemberID)
	require.ErrorIs(t, p.commitOffsets(t, c, 6, "g-txn-missing", "m", 1, "in", 1), kerr.GroupIDNotFound)
	require.ErrorIs(t, p.commitOffsets(t, c, 5, "g-txn-missing", "m", 1, "in", 1), kerr.IllegalGeneration)

	stale := *p
	stale.epoch--
	// The coordinator's PRODUCER_FENCED reaches every version as
	// INVALID_PRODUCER_EPOCH, as Kafka's partition verification maps it.
	require.ErrorIs(t, stale.commitOffsets(t, c, 5, group, member, gen, "in", 1), kerr.InvalidProducerEpoch)
	require.ErrorIs(t, stale.commitOffsets(t, c, 4, group, member, gen, "in", 1), kerr.InvalidProducerEpoch)

	// v0-4 (TV1) only verify that AddOffsetsToTxn added the partition; v4
	// knows TRANSACTION_ABORTABLE (KIP-1050), v3 gets INVALID_TXN_STATE.
	require.ErrorIs(t, p.commitOffsets(t, c, 4, group, member, gen, "in", 1), kerr.TransactionAbortable)
	require.ErrorIs(t, p.commitOffsets(t, c, 3, group, member, gen, "in", 1), kerr.InvalidTxnState)

	// v0-2 carry no member: accepted while the group has members.
	require.NoError(t, p.commitOffsets(t, c, 5, group, member, gen, "in", 3))
	require.NoError(t, p.commitOffsets(t, c, 2, group, "", -1, "in", 4))
	p.end(t, c, true)
	require.Equal(t, groupFetched{offset: 4}, groupFetchOne(t, c, group, "in", true))
}
