package broker

// Coordinator logs follow live state: compaction keeps each log within
// about twice its live records, and replaying a compacted log gives the
// state the whole history gave, open transactions included.

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/wire"
)

// forceCompaction compacts an internal partition now, whatever its size,
// keeping none of its recent history as it was appended.
func forceCompaction(t testing.TB, c *Cluster, topic string, index int32) {
	t.Helper()
	compactNow(t, c, topic, index, 0)
}

// compactNow compacts an internal partition now, whatever its size,
// keeping the records appended within keep as they are.
func compactNow(t testing.TB, c *Cluster, topic string, index int32, keep time.Duration) {
	t.Helper()
	var before, after int
	require.NoError(t, c.do(func() {
		p := c.partitionOf(topic, index)
		before = c.stats.compactions
		margin, was := c.cfg.compactMinBytes, c.cfg.compactKeep
		p.compactedBytes, c.cfg.compactMinBytes, c.cfg.compactKeep = 0, 0, keep
		c.compactors[topic](p, time.Now())
		c.cfg.compactMinBytes, c.cfg.compactKeep = margin, was
		after = c.stats.compactions
	}))
	require.Equal(t, before+1, after, "%s-%d was not compacted", topic, index)
}

// waitCompacted waits until no compaction of an internal partition is
// due or under way: the writes of a test arm the compaction they make due
// on a timer that runs after the request at hand, so a test that reads
// the log's size right after its last write could read it before that
// compaction ran (and under a stream of requests, a few thresholds on).
func waitCompacted(t testing.TB, c *Cluster, topic string, index int32) {
	t.Helper()
	testkit.Eventually(testkit.Context(t), t, fmt.Sprintf("the due compaction of %s-%d", topic, index), func() bool {
		var settled bool
		require.NoError(t, c.do(func() {
			p := c.partitionOf(topic, index)
			settled = !c.compactionDue(p) && !p.compacting
		}))
		return settled
	})
}

// reloadShard replays an internal partition at its leader, as a new
// leader would.
func reloadShard(t testing.TB, c *Cluster, topic string, index int32) {
	t.Helper()
	require.NoError(t, c.do(func() {
		p := c.partitionOf(topic, index)
		for _, fn := range c.leaderListeners {
			fn(p, p.leader)
		}
	}))
}

func TestTransactionStateLogFollowsLiveState(t *testing.T) {
	c := newTestCluster(t)
	require.NoError(t, c.do(func() { c.cfg.compactMinBytes, c.cfg.compactKeep = 4<<10, 0 }))
	createTopic(t, c, "out", 1)
	const txnID = "busy-producer"
	node := txnCoordinatorNode(t, c, txnID)
	pid, epoch := txnInitOK(t, c, txnID)
	const commits = 150
	for i := 0; i < commits; i++ {
		require.NoError(t, txnProduce(t, c, 12, txnID, "out", 0, pid, epoch, 0, "v"))
		end := txnEnd(t, c, node, 5, txnID, pid, epoch, true)
		require.NoError(t, txnErr(end.ErrorCode))
		pid, epoch = end.ProducerID, end.ProducerEpoch
	}
	index := c.CoordinatorPartition(coordinatorTxn, txnID)
	waitCompacted(t, c, wire.TransactionStateTopic, index)
	var bytes, compactions int64
	require.NoError(t, c.do(func() {
		bytes = c.partitionOf(wire.TransactionStateTopic, index).bytes
		compactions = int64(c.stats.compactions)
	}))
	require.Positive(t, compactions)
	// Three records a commit (Ongoing, PrepareCommit, CompleteCommit) of
	// about 250 bytes: without compaction this log would be ~100 KiB.
	require.Less(t, bytes, int64(3*(4<<10)), "the log holds about twice its one live record plus the margin")

	before := txnDescribe(t, c, txnID)
	reloadShard(t, c, wire.TransactionStateTopic, index)
	after := txnDescribe(t, c, txnID)
	require.Equal(t, before, after, "the compacted log replays to the same state")
	require.Equal(t, "CompleteCommit", after.State)
	end := txnEnd(t, c, node, 5, txnID, pid, epoch, false)
	require.NoError(t, txnErr(end.ErrorCode), "the producer goes on after a reload")
}

func TestConsumerOffsetsCompactionKeepsOrderAndPendingCommits(t *testing.T) {
	c := newTestCluster(t)
	groupTopic(t, c, "in", 1)
	groupTopic(t, c, "other", 1)
	const group = "g-compact"
	node := groupCoordinatorNode(t, c, group)
	index := c.CoordinatorPartition(coordinatorGroup, group)
	for i := int64(0); i < 50; i++ {
		require.NoError(t, groupCommit(t, c, node, 9, group, "", -1, "other", map[int32]int64{0: i})[0])
	}
	// A transactional commit written before a plain one loses to it when
	// its transaction commits, compaction or not.
	p := groupTxnInit(t, c, "txn-compact")
	require.NoError(t, p.commitOffsets(t, c, 5, group, "", -1, "in", 8))
	require.NoError(t, groupCommit(t, c, node, 9, group, "", -1, "in", map[int32]int64{0: 9})[0])
	forceCompaction(t, c, wire.ConsumerOffsetsTopic, index)
	_, _, batches, _ := logShape(t, c, wire.ConsumerOffsetsTopic, index)
	require.LessOrEqual(t, batches, 3, "the live records fit in a few batches")
	reloadShard(t, c, wire.ConsumerOffsetsTopic, index)
	require.ErrorIs(t, groupFetchOne(t, c, group, "in", true).err, kerr.UnstableOffsetCommit, "the pending commit survives")
	p.end(t, c, true)
	require.Equal(t, groupFetched{offset: 9}, groupFetchOne(t, c, group, "in", false))
	require.Equal(t, groupFetched{offset: 49}, groupFetchOne(t, c, group, "other", false))
	reloadShard(t, c, wire.ConsumerOffsetsTopic, index)
	require.Equal(t, groupFetched{offset: 9}, groupFetchOne(t, c, group, "in", false))

	// A pending commit that comes after the plain one wins on commit,
	// across a compaction and a reload.
	require.NoError(t, p.commitOffsets(t, c, 5, group, "", -1, "in", 10))
	forceCompaction(t, c, wire.ConsumerOffsetsTopic, index)
	reloadShard(t, c, wire.ConsumerOffsetsTopic, index)
	p.end(t, c, true)
	require.Equal(t, groupFetched{offset: 10}, groupFetchOne(t, c, group, "in", true))
	_, lso := txnOffsets(t, c, wire.ConsumerOffsetsTopic, index)
	end, _ := txnOffsets(t, c, wire.ConsumerOffsetsTopic, index)
	require.Equal(t, end, lso, "no transaction left open in the log")
}

func TestShareStateCompactionKeepsStagedAcknowledgements(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil, "share.record.lock.duration.ms", "600000")
	pid, epoch := shareTxnBegin(t, c, "tx")
	require.NoError(t, m1.acknowledge("in", 0, 5, 9, wire.AckRelease))
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.NoError(t, part)
	index := shareStatePartition(t, c, "g", "in", 0)
	forceCompaction(t, c, wire.ShareGroupStateTopic, index)
	// The share coordinator moves: its new leader replays the compacted
	// log, staged acknowledgements included.
	leader, err := c.Leader(wire.ShareGroupStateTopic, index)
	require.NoError(t, err)
	require.NoError(t, c.MoveLeader(wire.ShareGroupStateTopic, index, txnOtherNode(c, leader)))
	shareEndTxn(t, c, "tx", pid, epoch, true)
	require.Equal(t, int64(5), shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset)
	m2 := shareJoin(t, c, "g", "m2", "in")
	require.Equal(t, offsetsFrom(5, 9, 2), m2.fetch("in", 0))
}

// TestCompactionRunsByItselfAndBoundsShareStateLog: a share group that
// keeps acknowledging writes an update per acknowledgement; the log stays
// bounded without any forcing.
func TestCompactionRunsByItselfAndBoundsShareStateLog(t *testing.T) {
	c := newTestCluster(t)
	require.NoError(t, c.do(func() { c.cfg.compactMinBytes, c.cfg.compactKeep = 4<<10, 0 }))
	createTopic(t, c, "work", 1)
	admin := newTestClient(t, c)
	shareSetGroupConfigs(t, admin, "g", "share.auto.offset.reset", "earliest")
	m := shareJoin(t, c, "g", "m", "work")
	const records = 300
	appendBatches(t, c, "work", 0, records, func(int) int64 { return time.Now().UnixMilli() })
	acked := int64(0)
	for acked < records {
		got := m.fetch("work", 0)
		require.NotEmpty(t, got)
		for off := range got {
			require.NoError(t, m.acknowledge("work", 0, off, off, wire.AckAccept))
			acked++
		}
	}
	index := shareStatePartition(t, c, "g", "work", 0)
	waitCompacted(t, c, wire.ShareGroupStateTopic, index)
	_, _, _, bytes := logShape(t, c, wire.ShareGroupStateTopic, index)
	require.Less(t, bytes, int64(3*(4<<10)))
	require.Positive(t, loopStatsOf(t, c).compactions)
	reloadShard(t, c, wire.ShareGroupStateTopic, index)
	require.Equal(t, int64(records), shareOffsets(t, admin, "g", "work")[0].StartOffset)
}

// TestConsumerGroupsSurviveCompaction: KIP-848 consumer groups keep their
// members, epochs and assignments through a compaction and a reload.
func TestConsumerGroupsSurviveCompaction(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "cg-in", 2)
	m1, m2 := newCGMember(t, c, "cg-compact", "m1"), newCGMember(t, c, "cg-compact", "m2")
	m1.join("cg-in")
	m2.join("cg-in")
	m1.heartbeat()
	m2.heartbeat()
	m1.heartbeat()
	before := cgDescribe(t, c, "cg-compact")
	index := c.CoordinatorPartition(coordinatorGroup, "cg-compact")
	forceCompaction(t, c, wire.ConsumerOffsetsTopic, index)
	reloadShard(t, c, wire.ConsumerOffsetsTopic, index)
	after := cgDescribe(t, c, "cg-compact")
	require.Equal(t, before.Epoch, after.Epoch)
	require.Equal(t, before.AssignmentEpoch, after.AssignmentEpoch)
	require.Equal(t, before.State, after.State)
	require.Len(t, after.Members, 2)
	for i := range before.Members {
		require.Equal(t, before.Members[i].MemberID, after.Members[i].MemberID)
		require.Equal(t, before.Members[i].MemberEpoch, after.Members[i].MemberEpoch)
		require.Equal(t, before.Members[i].Assignment, after.Members[i].Assignment)
	}
	m1.heartbeat() // the members go on where they were
	require.Len(t, m1.partitionsOf("cg-in"), 1)
}

// TestCompactionKeepsRecentHistory: a compaction keeps the records of the
// last compactKeep as they were appended, so that a reader following
// __share_group_state from before the compaction still reads every record
// written since (the log start does not pass its position), and the log
// with that history kept replays to the same share state, staged
// acknowledgements of an open transaction included; without keep, the
// log start passes the reader.
func TestCompactionKeepsRecentHistory(t *testing.T) {
	for _, keep := range []time.Duration{time.Minute, 0} {
		c, m1 := shareTxnSetup(t, nil, "share.record.lock.duration.ms", "600000")
		key := shareStateKey("g", m1.topicID("in"), 0)
		index := c.CoordinatorPartition(coordinatorShare, key)
		var follower int64
		require.NoError(t, c.do(func() { follower = c.partitionOf(wire.ShareGroupStateTopic, index).next }))
		require.NoError(t, m1.acknowledge("in", 0, 0, 2, wire.AckAccept))
		pid, epoch := shareTxnBegin(t, c, "tx")
		_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{3, 5, wire.AckAccept})
		require.NoError(t, part)
		before := shareRecordStates(t, c, "g", "in", 0)
		compactNow(t, c, wire.ShareGroupStateTopic, index, keep)
		var logStart int64
		require.NoError(t, c.do(func() { logStart = c.partitionOf(wire.ShareGroupStateTopic, index).logStart }))
		if keep == 0 {
			require.Greater(t, logStart, follower, "without keep the compaction drops the history")
			continue
		}
		require.LessOrEqual(t, logStart, follower, "the records the follower has not read yet are kept")
		reloadShard(t, c, wire.ShareGroupStateTopic, index)
		require.Equal(t, before, shareRecordStates(t, c, "g", "in", 0), "the log with its history kept replays to the same state")
		require.NoError(t, txnErr(txnEnd(t, c, txnCoordinatorNode(t, c, "tx"), 5, "tx", pid, epoch, true).ErrorCode))
		shareEventually(t, testCtx(t), "the staged records committed once", func() bool {
			return shareRecordStates(t, c, "g", "in", 0)[shareAcquired] == 4
		})
		require.Equal(t, int64(6), shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset)
	}
}
