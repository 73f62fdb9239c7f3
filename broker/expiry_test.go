package broker

// State that ends is cleaned up, and idle state costs nothing: expiring
// transactional ids, offsets, empty groups and producer state, and the
// timer heap holding nothing that is not due one day.

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// timerCount returns how many timers are armed and the earliest.
func timerCount(t testing.TB, c *Cluster) (int, time.Time) {
	t.Helper()
	var n int
	var next time.Time
	require.NoError(t, c.do(func() {
		n = len(c.timers)
		next, _ = c.nextTimer()
	}))
	return n, next
}

func TestTransactionalIDsExpireWhenIdle(t *testing.T) {
	c := newTestCluster(t, TransactionalIDExpiration(300*time.Millisecond))
	createTopic(t, c, "out", 1)
	emptyPID, _ := txnInitOK(t, c, "idle-empty")
	donePID, doneEpoch := txnInitOK(t, c, "idle-done")
	require.NoError(t, txnProduce(t, c, 12, "idle-done", "out", 0, donePID, doneEpoch, 0, "v"))
	end := txnEnd(t, c, txnCoordinatorNode(t, c, "idle-done"), 5, "idle-done", donePID, doneEpoch, true)
	require.NoError(t, txnErr(end.ErrorCode))
	// An ongoing transaction does not expire (its timeout, 60s, ends it).
	openPID, openEpoch := txnInitOK(t, c, "busy")
	require.NoError(t, txnProduce(t, c, 12, "busy", "out", 0, openPID, openEpoch, 0, "w"))

	for _, id := range []string{"idle-empty", "idle-done"} {
		require.Eventually(t, func() bool {
			return txnErr(txnDescribe(t, c, id).ErrorCode) == kerr.TransactionalIDNotFound
		}, 10*time.Second, 5*time.Millisecond, id)
	}
	require.Equal(t, "Ongoing", txnDescribe(t, c, "busy").State)

	// Forgotten means forgotten: the id starts over with a new producer id.
	again, _ := txnInitOK(t, c, "idle-empty")
	require.NotEqual(t, emptyPID, again)
}

// TestIdleTransactionalIDsCostNothingUntilTheyExpire: many ids arm one
// timer each, at their expiry a week away; nothing else is armed, so the
// loop has nothing to do until then.
func TestIdleTransactionalIDsCostNothingUntilTheyExpire(t *testing.T) {
	c := newTestCluster(t)
	const ids = 2000
	var failed *kerr.Error
	require.NoError(t, c.do(func() {
		tc := c.coordinators.txn
		now := time.Now()
		for i := 0; i < ids && failed == nil; i++ {
			id := fmt.Sprintf("id-%d", i)
			node := c.coordinatorPartitionFor(coordinatorTxn, id).leader
			_, _, failed = tc.initProducerID(node, id, 60000, nil, now)
		}
	}))
	require.Nil(t, failed)
	n, next := timerCount(t, c)
	require.Equal(t, ids, n, "one timer per id")
	require.True(t, next.After(time.Now().Add(7*24*time.Hour-time.Minute)), "the earliest is an expiry a week away, not a sweep: %v", next)
}

// TestEmptyShareGroupsCostNothing: share groups whose members all left
// are kept, as Kafka keeps them, with no timer and no live state; the
// members' share sessions, which leaving does not end (as on Kafka), end
// with their connections.
func TestEmptyShareGroupsCostNothing(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "sq", 1)
	const groups = 200
	closes := shareConnCloses(t, c)
	for i := 0; i < groups; i++ {
		group := fmt.Sprintf("sg-%d", i)
		m := shareJoin(t, c, group, "m", "sq")
		m.fetch("sq", 0)
		req := kmsg.NewPtrShareGroupHeartbeatRequest()
		req.Version = 1
		req.GroupID, req.MemberID, req.MemberEpoch = group, "m", -1
		resp := txnWire(t, c, shareGroupCoordinator(t, c, group), req).(*kmsg.ShareGroupHeartbeatResponse)
		require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
		m.disconnect(0)
	}
	shareEventually(t, testCtx(t), "every session's connection close handled", func() bool {
		return shareConnCloses(t, c) == closes+groups
	})
	n, _ := timerCount(t, c)
	require.Zero(t, n, "no member, no lock, no wait: nothing armed")
	states := map[string]int{}
	var sessions int
	require.NoError(t, c.do(func() {
		sc := c.coordinators.share
		for _, g := range sc.groups {
			states[g.state()]++
			for _, byNode := range g.sessions {
				sessions += len(byNode)
			}
		}
		sessions += len(sc.connSessions)
	}))
	require.Equal(t, map[string]int{"Empty": groups}, states)
	require.Zero(t, sessions)
}

func TestShareMemberSessionTimesOutByTimer(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "sq", 1)
	shareJoin(t, c, "sg", "m", "sq")
	require.NoError(t, c.do(func() {
		g := c.coordinators.share.groups["sg"]
		m := g.members["m"]
		m.lastSeen = time.Now().Add(-time.Hour) // as if it stopped heartbeating long ago
		c.coordinators.share.armSession(g, m)
	}))
	require.Eventually(t, func() bool {
		var n int
		_ = c.do(func() { n = len(c.coordinators.share.groups["sg"].members) })
		return n == 0
	}, 10*time.Second, time.Millisecond)
}

// stableConsumerGroup forms a one-member "consumer" group whose member
// subscribes to topics, with real consumer metadata.
func stableConsumerGroup(t *testing.T, c *Cluster, node int32, group string, topics ...string) (string, int32) {
	t.Helper()
	meta := kmsg.ConsumerMemberMetadata{Version: 0, Topics: topics}
	req := groupJoinReq(9, group, "", groupTestSession, groupTestRebalance)
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: meta.AppendTo(nil)}}
	joined := groupJoined(t, groupJoin(t, c, node, req))
	sync := groupAwait(t, groupSend(t, c, node, groupSyncReq(group, joined.MemberID, joined.Generation, map[string]string{joined.MemberID: ""}))).(*kmsg.SyncGroupResponse)
	require.NoError(t, kerr.ErrorForCode(sync.ErrorCode))
	return joined.MemberID, joined.Generation
}

func TestOffsetsExpireAsKafkaSays(t *testing.T) {
	const retention = 300 * time.Millisecond
	c := newTestCluster(t, OffsetsRetention(retention))
	groupTopic(t, c, "sub", 1)
	groupTopic(t, c, "other", 1)
	gone := func(group, topic string) func() bool {
		return func() bool {
			fetched, err := groupFetch(t, c, groupCoordinatorNode(t, c, group), group, topic, false, 0)
			return err == nil && fetched[topic][0].offset == -1
		}
	}

	// A group without a protocol (commits from outside any membership)
	// loses each offset once it is older than the retention, then goes.
	simple := "g-simple"
	node := groupCoordinatorNode(t, c, simple)
	require.NoError(t, groupCommit(t, c, node, 9, simple, "", -1, "other", map[int32]int64{0: 5})[0])
	require.Eventually(t, gone(simple, "other"), 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return groupDescribe(t, c, node, simple).State == "Dead" }, 10*time.Second, 5*time.Millisecond)

	// A stable consumer group keeps the offsets of what it subscribes to
	// and loses the others.
	stable := "g-stable"
	node = groupCoordinatorNode(t, c, stable)
	member, gen := stableConsumerGroup(t, c, node, stable, "sub")
	require.NoError(t, groupCommit(t, c, node, 9, stable, member, gen, "sub", map[int32]int64{0: 1})[0])
	require.NoError(t, groupCommit(t, c, node, 9, stable, member, gen, "other", map[int32]int64{0: 2})[0])
	require.Eventually(t, gone(stable, "other"), 10*time.Second, 5*time.Millisecond)
	fetched, err := groupFetch(t, c, node, stable, "sub", false, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), fetched["sub"][0].offset, "a subscribed topic's offset stays")

	// Once it is empty, the retention runs from then, and the group goes
	// with its last offset.
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Version = 5
	leave.Group = stable
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: member}}
	require.NoError(t, kerr.ErrorForCode(groupAwait(t, groupSend(t, c, node, leave)).(*kmsg.LeaveGroupResponse).ErrorCode))
	require.Equal(t, "Empty", groupDescribe(t, c, node, stable).State)
	require.Eventually(t, gone(stable, "sub"), 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return groupDescribe(t, c, node, stable).State == "Dead" }, 10*time.Second, 5*time.Millisecond)

	// The tombstones replay: a new coordinator knows neither group.
	groupMoveCoordinatorIfMany(t, c, stable)
}

// groupMoveCoordinatorIfMany is groupMoveCoordinator on a cluster of more
// than one node; on one node it reloads the partition in place.
func groupMoveCoordinatorIfMany(t *testing.T, c *Cluster, group string) {
	t.Helper()
	var back bool
	require.NoError(t, c.do(func() {
		p := c.coordinatorPartitionFor(coordinatorGroup, group)
		sh := c.coordinators.group.shards
		sh.loadAt(p)
		back = sh.loaded[shardKey{p.leader, p.index}].state.groups[group] != nil
	}))
	require.False(t, back, "replay must not bring back an expired group")
}

func TestPendingTransactionalOffsetsDoNotExpire(t *testing.T) {
	const retention = 200 * time.Millisecond
	c := newTestCluster(t, OffsetsRetention(retention))
	groupTopic(t, c, "in", 1)
	const group = "g-pending"
	node := groupCoordinatorNode(t, c, group)
	require.NoError(t, groupCommit(t, c, node, 9, group, "", -1, "in", map[int32]int64{0: 3})[0])
	p := groupTxnInit(t, c, "txn-pending")
	require.NoError(t, p.commitOffsets(t, c, 5, group, "", -1, "in", 4))
	// Wait past the retention of the plain commit: a due check must find
	// the pending commit and keep both the offset and the group.
	var groupKept, offsetKept bool
	require.NoError(t, c.do(func() {
		st, _ := c.coordinators.group.shardFor(node, group)
		grp := st.groups[group]
		o := grp.offsets[groupTP{"in", 0}]
		o.commitMs = time.Now().Add(-time.Hour).UnixMilli()
		grp.offsets[groupTP{"in", 0}] = o
		c.coordinators.group.groupDue(st, grp, time.Now())
		_, groupKept = st.groups[group]
		_, offsetKept = grp.offsets[groupTP{"in", 0}]
	}))
	require.True(t, groupKept)
	require.True(t, offsetKept)
	p.end(t, c, true)
	require.Equal(t, groupFetched{offset: 4}, groupFetchOne(t, c, group, "in", true))
	require.Eventually(t, func() bool { return groupFetchOne(t, c, group, "in", false).offset == -1 }, 10*time.Second, 5*time.Millisecond)
}

func TestEmptyGroupWithoutOffsetsIsDeletedAfterTheCleanupDelay(t *testing.T) {
	c := newTestCluster(t)
	const group = "g-nooffsets"
	node := groupCoordinatorNode(t, c, group)
	member, _ := groupStableOne(t, c, node, group)
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Version = 5
	leave.Group = group
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: member}}
	groupAwait(t, groupSend(t, c, node, leave))
	require.Equal(t, "Empty", groupDescribe(t, c, node, group).State, "kept for now, as Kafka keeps it until its next cleanup")
	// The timer may still be armed at the gone member's session end; once
	// it fires, the next deadline is the cleanup.
	require.NoError(t, c.do(func() {
		st, _ := c.coordinators.group.shardFor(node, group)
		c.coordinators.group.groupDue(st, st.groups[group], time.Now())
	}))
	n, next := timerCount(t, c)
	require.Equal(t, 1, n)
	require.True(t, next.After(time.Now().Add(emptyGroupDelay-time.Minute)), "next deadline %v", next)
	require.NoError(t, c.do(func() {
		st, _ := c.coordinators.group.shardFor(node, group)
		grp := st.groups[group]
		grp.stateSince = time.Now().Add(-emptyGroupDelay)
		c.coordinators.group.groupDue(st, grp, time.Now())
	}))
	require.Equal(t, "Dead", groupDescribe(t, c, node, group).State)
}

func TestProducerStateExpiresUnlessATransactionIsOpen(t *testing.T) {
	c := newTestCluster(t, ProducerIDExpiration(200*time.Millisecond))
	createTopic(t, c, "ps", 1)
	pid, epoch := txnInitOK(t, c, "open-txn")
	require.NoError(t, txnProduce(t, c, 12, "open-txn", "ps", 0, pid, epoch, 0, "t"))
	idempotent := produceReq("ps", buildBatch([]kv{{value: []byte("i")}}, 7777, 0, 0, false, false, time.Now()))
	require.NoError(t, kerr.ErrorForCode(txnWire(t, c, 0, idempotent).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode))

	producers := func() map[int64]bool {
		out := map[int64]bool{}
		require.NoError(t, c.do(func() {
			for id := range c.partitionOf("ps", 0).producers {
				out[id] = true
			}
		}))
		return out
	}
	require.Equal(t, map[int64]bool{pid: true, 7777: true}, producers())
	require.Eventually(t, func() bool { return !producers()[7777] }, 10*time.Second, 5*time.Millisecond)
	require.True(t, producers()[pid], "an open transaction pins its producer")

	require.NoError(t, txnErr(txnEnd(t, c, txnCoordinatorNode(t, c, "open-txn"), 5, "open-txn", pid, epoch, true).ErrorCode))
	require.Eventually(t, func() bool { return len(producers()) == 0 }, 10*time.Second, 5*time.Millisecond)
}

// TestClosedTransactionsLeaveNoTrace: a partition's bookkeeping of open
// transactions does not grow with the transactions that ended, whether or
// not anyone reads its last stable offset.
func TestClosedTransactionsLeaveNoTrace(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "closed", 1)
	const txnID = "many-commits"
	node := txnCoordinatorNode(t, c, txnID)
	pid, epoch := txnInitOK(t, c, txnID)
	for i := 0; i < 40; i++ {
		require.NoError(t, txnProduce(t, c, 12, txnID, "closed", 0, pid, epoch, 0, "v"))
		end := txnEnd(t, c, node, 5, txnID, pid, epoch, i%2 == 0)
		require.NoError(t, txnErr(end.ErrorCode))
		pid, epoch = end.ProducerID, end.ProducerEpoch
	}
	var open, producers int
	require.NoError(t, c.do(func() {
		p := c.partitionOf("closed", 0)
		open, producers = len(p.openTxns), len(p.producers)
	}))
	require.LessOrEqual(t, open, 1)
	require.Equal(t, 1, producers)
}

// TestBusyClusterFallsIdle: after a mix of work that arms every kind of
// timer (retention, transactions, classic and share groups, long polls,
// compaction), nothing is due before its time: a timer that re-armed
// itself for "now" without progress would show here as the earliest one.
func TestBusyClusterFallsIdle(t *testing.T) {
	c := newTestCluster(t, RetentionCheckInterval(time.Millisecond))
	require.NoError(t, c.do(func() { c.cfg.compactMinBytes = 1 << 10 }))
	createTopicWith(t, c, "bounded", 1, map[string]string{"retention.bytes": "300"})
	appendBatches(t, c, "bounded", 0, 20, func(int) int64 { return time.Now().UnixMilli() })

	const txnID = "idle-check"
	node := txnCoordinatorNode(t, c, txnID)
	pid, epoch := txnInitOK(t, c, txnID)
	for i := 0; i < 20; i++ {
		require.NoError(t, txnProduce(t, c, 12, txnID, "bounded", 0, pid, epoch, 0, "v"))
		end := txnEnd(t, c, node, 5, txnID, pid, epoch, true)
		require.NoError(t, txnErr(end.ErrorCode))
		pid, epoch = end.ProducerID, end.ProducerEpoch
	}

	const group = "g-idle"
	gnode := groupCoordinatorNode(t, c, group)
	member, gen := groupStableOne(t, c, gnode, group)
	require.NoError(t, groupCommit(t, c, gnode, 9, group, member, gen, "bounded", map[int32]int64{0: 1})[0])
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Version = 5
	leave.Group = group
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: member}}
	groupAwait(t, groupSend(t, c, gnode, leave))

	m := shareJoin(t, c, "sg-idle", "m", "bounded")
	got := m.fetch("bounded", 0)
	for off := range got {
		require.NoError(t, m.acknowledge("bounded", 0, off, off, 1))
	}
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.Version = 1
	hb.GroupID, hb.MemberID, hb.MemberEpoch = "sg-idle", "m", -1
	txnWire(t, c, shareGroupCoordinator(t, c, "sg-idle"), hb)

	rc := dialRaw(t, c)
	require.NoError(t, c.do(func() { c.cfg.maxFetchWait = 20 * time.Millisecond }))
	rc.roundTrip(fetchReq("bounded", 1<<20, 1<<20, 1000, fetchPart(0, 0, 1<<20)), 1)

	require.Eventually(t, func() bool {
		_, next := timerCount(t, c)
		return next.IsZero() || next.After(time.Now().Add(time.Second))
	}, 10*time.Second, 5*time.Millisecond, "some timer keeps coming due")
}

// TestConsumerGroupSessionsEndByTimer: a KIP-848 member that stops
// heartbeating is fenced by the group's timer, with no sweep.
func TestConsumerGroupSessionsEndByTimer(t *testing.T) {
	c := newTestCluster(t, ConsumerGroupSessionTimeout(100*time.Millisecond), OffsetsRetention(200*time.Millisecond))
	createTopic(t, c, "cg-t", 1)
	createTopic(t, c, "cg-other", 1)
	// Without commits, only the heartbeat armed the timer.
	newCGMember(t, c, "cg-quiet", "q").join("cg-t")
	require.Eventually(t, func() bool { return cgDescribe(t, c, "cg-quiet").State == cgStateEmpty }, 10*time.Second, 5*time.Millisecond)

	m := newCGMember(t, c, "cg-timer", "m")
	resp := m.join("cg-t")
	require.NoError(t, cgCommit(t, c, 9, "cg-timer", "m", resp.MemberEpoch, "cg-t", 0, 3))
	require.Eventually(t, func() bool { return cgDescribe(t, c, "cg-timer").State == cgStateEmpty }, 10*time.Second, 5*time.Millisecond)
	// Once empty, its offsets expire after the retention and the group goes.
	require.Eventually(t, func() bool {
		err, off := cgFetch(t, c, "cg-timer", nil, -1, "cg-t", 0)
		return err == nil && off == -1
	}, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		return kerr.ErrorForCode(cgDescribe(t, c, "cg-timer").ErrorCode) == kerr.GroupIDNotFound
	}, 10*time.Second, 5*time.Millisecond)
}
