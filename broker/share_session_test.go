package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// The tests of this file check how share sessions end and what that does
// to the records their members hold, as Kafka 4.4 does it
// (integration/realkafka/share_semantics_test.go established it against
// a real Kafka; integration/differential compares the two). Every group
// has a ten-minute lock: a record that comes back during a test came
// back long before its lock could have expired.

// shareSessionSetup is shareTopicSetup with a ten-minute lock, and the
// leader of in/0.
func shareSessionSetup(t *testing.T, configs ...string) (*Cluster, int32) {
	t.Helper()
	c := shareTopicSetup(t, append([]string{"share.record.lock.duration.ms", "600000"}, configs...)...)
	leader, err := c.Leader("in", 0)
	require.NoError(t, err)
	return c, leader
}

// The close of the connection that opened a session releases what its
// member holds, at once and without lowering the delivery count, and ends
// the session.
func TestShareSessionConnectionCloseReleases(t *testing.T) {
	c, leader := shareSessionSetup(t)
	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Equal(t, offsetsFrom(0, 9, 1), m1.fetch("in", 0))
	m2 := shareJoin(t, c, "g", "m2", "in")
	m1.disconnect(leader)
	require.Equal(t, offsetsFrom(0, 9, 2), shareAcquireEventually(t, m2, "in", 0), "the lost delivery counts")
	require.ErrorIs(t, m1.acknowledge("in", 0, 0, 0, wire.AckAccept), kerr.ShareSessionNotFound, "the session ended with its connection")
}

// A connection that only carried later requests of a session releases
// nothing when it closes; nor does the connection that opened a session
// the member has since replaced (epoch 0), and the replacement itself
// releases nothing: the member keeps its records across sessions, and
// the close of the replacement's connection releases them.
func TestShareSessionOtherConnectionsReleaseNothing(t *testing.T) {
	c, leader := shareSessionSetup(t)
	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Equal(t, offsetsFrom(0, 9, 1), m1.fetch("in", 0))
	opener := m1.conns[leader]

	closes := shareConnCloses(t, c)
	other := dialWire(t, c, leader)
	m1.conns[leader] = other
	require.NoError(t, m1.renew("in", 0, 0, 9), "a request of the session on another connection")
	other.close()

	// m1 replaces its session on a third connection.
	delete(m1.conns, leader)
	m1.sessions[leader] = 0
	require.Empty(t, m1.fetch("in", 0), "the replaced session's records are still m1's")
	require.NoError(t, m1.renew("in", 0, 0, 9), "and the new session acknowledges them")
	opener.close()
	shareEventually(t, testCtx(t), "the old opener's close to be handled", func() bool {
		return shareConnCloses(t, c) == closes+1
	})
	require.Equal(t, map[shareRecordState]int{shareAcquired: 10}, shareRecordStates(t, c, "g", "in", 0),
		"neither the other connection nor the replaced session's released anything")
	require.NoError(t, m1.renew("in", 0, 0, 9))

	m2 := shareJoin(t, c, "g", "m2", "in")
	m1.disconnect(leader)
	require.Equal(t, offsetsFrom(0, 9, 2), shareAcquireEventually(t, m2, "in", 0))
}

// Kafka ties a connection to the last session it opened: two members'
// sessions on one connection, and its close releases the later one's
// records only. The earlier session goes on serving its member.
func TestShareSessionConnectionReleasesItsLastSession(t *testing.T) {
	c, leader := shareSessionSetup(t, "share.partition.max.record.locks", "100")
	prod := shareProducer(t, c)
	m1 := shareJoin(t, c, "g", "m1", "in")
	m3 := shareJoin(t, c, "g", "m3", "in")
	require.Equal(t, offsetsFrom(0, 9, 1), m1.fetch("in", 0))
	shareProduce(t, prod, "in", 1, "later")
	m3.conns = m1.conns // one connection for both
	require.Equal(t, offsetsFrom(10, 10, 1), m3.fetch("in", 0))

	m2 := shareJoin(t, c, "g", "m2", "in")
	m1.disconnect(leader)
	require.Equal(t, offsetsFrom(10, 10, 2), shareAcquireEventually(t, m2, "in", 0), "m3's record only")
	require.NoError(t, m1.renew("in", 0, 0, 9), "m1's session outlived the connection that opened it")
	require.ErrorIs(t, m3.acknowledge("in", 0, 10, 10, wire.AckAccept), kerr.ShareSessionNotFound)
}

// Leaving the group releases nothing and ends no session, as on Kafka:
// the member may still acknowledge its records, and its session still
// acquires, until the session's connection closes. A new session needs
// membership (the deliberate difference of docs/differences.md).
func TestShareLeaveKeepsRecordsUntilTheSessionEnds(t *testing.T) {
	c, leader := shareSessionSetup(t)
	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Equal(t, offsetsFrom(0, 9, 1), m1.fetch("in", 0))
	shareLeave(t, c, m1)
	m2 := shareJoin(t, c, "g", "m2", "in")
	require.Empty(t, m2.fetch("in", 0), "m1 still holds its records")
	require.NoError(t, m1.acknowledge("in", 0, 0, 0, wire.AckAccept), "and acknowledges them in its session")
	shareProduce(t, shareProducer(t, c), "in", 1, "later")
	require.Equal(t, offsetsFrom(10, 10, 1), m1.fetch("in", 0), "its session still acquires")

	stranger := *m1
	stranger.conns, stranger.sessions = nil, map[int32]int32{}
	require.ErrorIs(t, txnErr(stranger.fetchFrom(leader, "in", 0).ErrorCode), kerr.UnknownMemberID, "a new session needs membership")

	m1.disconnect(leader)
	require.Equal(t, offsetsFrom(1, 10, 2), shareAcquireEventually(t, m2, "in", 0))
}

// Closing an earlier session opened on a connection leaves the
// connection tied to its last session, whose records its close releases.
// (Kafka 4.4 forgets the connection's session then, and releases nothing
// when it closes: docs/differences.md.)
func TestShareSessionEarlierSessionCloseKeepsTheLast(t *testing.T) {
	c, leader := shareSessionSetup(t, "share.partition.max.record.locks", "100")
	m1 := shareJoin(t, c, "g", "m1", "in")
	m3 := shareJoin(t, c, "g", "m3", "in")
	require.Equal(t, offsetsFrom(0, 9, 1), m1.fetch("in", 0))
	shareProduce(t, shareProducer(t, c), "in", 1, "later")
	m3.conns = m1.conns
	require.Equal(t, offsetsFrom(10, 10, 1), m3.fetch("in", 0))
	require.NoError(t, m1.closeSession(leader))
	m2 := shareJoin(t, c, "g", "m2", "in")
	require.Equal(t, offsetsFrom(0, 9, 2), shareAcquireEventually(t, m2, "in", 0), "m1's close released its own")
	m1.disconnect(leader)
	require.Equal(t, offsetsFrom(10, 10, 2), shareAcquireEventually(t, m2, "in", 0), "the connection's close released m3's")
}

// A session that no connection would release any more (its connection
// opened another session since) ends once its member has left, so that
// departed members' sessions do not pile up; the records stay the
// member's until their lock expires. While the member is in the group
// such a session stays, as on Kafka.
func TestShareSessionsOfDepartedMembersEnd(t *testing.T) {
	c, leader := shareSessionSetup(t)
	m1 := shareJoin(t, c, "g", "m1", "in")
	m3 := shareJoin(t, c, "g", "m3", "in")
	m4 := shareJoin(t, c, "g", "m4", "in")
	require.Len(t, m1.fetch("in", 0), 10)
	shareLeave(t, c, m1)
	require.NoError(t, m1.renew("in", 0, 0, 9), "m1 left; its session stays while its connection would release it")
	m3.conns = m1.conns
	require.Empty(t, m3.fetch("in", 0), "m3 opens a session on m1's connection")
	require.ErrorIs(t, m1.renew("in", 0, 0, 9), kerr.ShareSessionNotFound, "nothing would release m1's session now")
	require.Equal(t, map[shareRecordState]int{shareAcquired: 10}, shareRecordStates(t, c, "g", "in", 0), "its records stay m1's")

	m4.conns = m1.conns
	require.Empty(t, m4.fetch("in", 0), "m4 opens a session on the same connection")
	require.Empty(t, m3.fetch("in", 0), "m3 is in the group: its session stays")
	shareLeave(t, c, m3)
	require.ErrorIs(t, txnErr(m3.fetchFrom(leader, "in", 0).ErrorCode), kerr.ShareSessionNotFound, "m3 left: its session ended")
	require.Empty(t, m4.fetch("in", 0), "m4's session, its connection's last, stays")
}

// shareLeave sends m's leaving heartbeat (epoch -1).
func shareLeave(t testing.TB, c *Cluster, m *rawShareMember) {
	t.Helper()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.MemberEpoch = m.group, m.id, -1
	resp := txnWire(t, c, shareGroupCoordinator(t, c, m.group), req).(*kmsg.ShareGroupHeartbeatResponse)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
}

// A connection the broker closes (here: idle past ConnectionsMaxIdle)
// releases its session's records as one the client closes does.
func TestShareSessionIdleConnectionCloseReleases(t *testing.T) {
	c := newTestCluster(t, Nodes(1), ConnectionsMaxIdle(300*time.Millisecond))
	createTopic(t, c, "in", 1)
	shareSetGroupConfigs(t, newTestClient(t, c), "g", "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "600000")
	shareProduce(t, shareProducer(t, c), "in", 1, shareValues("in", 10)...)
	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Equal(t, offsetsFrom(0, 9, 1), m1.fetch("in", 0))
	m2 := shareJoin(t, c, "g", "m2", "in")
	require.Equal(t, offsetsFrom(0, 9, 2), shareAcquireEventually(t, m2, "in", 0), "m1 fell silent; its connection was closed")
}

// shareBigSession has member m of group g hold four partitions of topic
// "big" whose windows are each one batch of 30,000 records, in one
// session at node 0: releasing it scans more window slots than one turn
// may.
func shareBigSession(t *testing.T) (*Cluster, *rawShareMember) {
	t.Helper()
	c := newTestCluster(t, Nodes(1))
	createTopic(t, c, "big", 4)
	shareSetGroupConfigs(t, newTestClient(t, c), "g", "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "600000")
	recs := make([]kv, 30000)
	for i := range recs {
		recs[i] = kv{value: []byte{'v'}}
	}
	batches := map[int32][]byte{}
	for p := range int32(4) {
		batches[p] = buildBatch(recs, -1, -1, -1, false, false, time.Now())
	}
	for p, err := range produceBatches(t, c, "big", batches) {
		require.NoError(t, err, "partition %d", p)
	}
	m := shareJoin(t, c, "g", "m", "big")
	for p := range int32(4) {
		m.fetch("big", p)
	}
	for p := range int32(4) {
		require.Equal(t, map[shareRecordState]int{shareAcquired: 30000}, shareRecordStates(t, c, "g", "big", p), "partition %d", p)
	}
	return c, m
}

// Releasing a session's records scans the in-flight windows of its
// partitions; a turn of the loop scans at most shareReleaseSlotsPerTurn
// slots (or one partition's window), the rest waits for later turns.
func TestShareSessionReleaseIsSliced(t *testing.T) {
	c, m := shareBigSession(t)
	m.disconnect(0)
	shareEventually(t, testCtx(t), "every record released", func() bool {
		for p := range int32(4) {
			if shareRecordStates(t, c, "g", "big", p)[shareAvailable] != 30000 {
				return false
			}
		}
		return true
	})
	var maxTurn int
	require.NoError(t, c.do(func() { maxTurn = c.stats.shareReleaseMaxTurn }))
	require.Positive(t, maxTurn)
	require.LessOrEqual(t, maxTurn, shareReleaseSlotsPerTurn, "one turn scanned 4 windows of 30,000")
}

// A member that opens a new session at a node while the release of its
// ended session there is still pending has that release finished first:
// the pending slices never reach what it acquires in the new session.
func TestShareSessionReopenFinishesPendingRelease(t *testing.T) {
	c, _ := shareBigSession(t)
	var (
		pending             bool
		heldAfterOpen       int
		acquired, heldAtEnd int
		fetchErrs           bool
	)
	// One turn of the loop, so that no slice of the release runs between
	// the steps; assertions wait until it is over (a failing require must
	// run on the test's goroutine).
	require.NoError(t, c.do(func() {
		sc := c.coordinators.share
		g := sc.groups["g"]
		key := shareSessionKey{group: "g", member: "m", node: 0}
		now := time.Now()
		sc.closeSession(g.session(key), now)
		pending = sc.releasing[key] != nil
		s := sc.openSession(g, key, nil, now)
		for _, sp := range sc.liveByGroup["g"] {
			heldAfterOpen += sp.acquired
		}
		topic := c.topics["big"]
		for p := range int32(4) {
			s.parts[shareTP{topicID: topic.id, partition: p}] = struct{}{}
		}
		ans := &shareFetchAnswer{ShareFetchResponse: kmsg.NewPtrShareFetchResponse()}
		acquired, fetchErrs = sc.fetchInto(0, s, shareFetchLimits{maxRecords: 200000, maxBytes: 1 << 30, wholeBatches: true}, ans, now)
		sc.releaseTurn(now)
		for _, sp := range sc.liveByGroup["g"] {
			heldAtEnd += sp.acquired
		}
	}))
	require.True(t, pending, "more than one turn's work: a release was pending")
	require.Zero(t, heldAfterOpen, "the pending release was finished as the session opened")
	require.False(t, fetchErrs)
	require.Equal(t, 120000, acquired)
	require.Equal(t, 120000, heldAtEnd, "the old release did not reach the new session's records")
}

// Deleting a share group ends the sessions its departed members kept: the
// group's state is gone, and a fetch in them must not start it again;
// nothing refers to them any more.
func TestShareGroupDeletionEndsSessions(t *testing.T) {
	c, leader := shareSessionSetup(t)
	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Len(t, m1.fetch("in", 0), 10)
	shareLeave(t, c, m1)
	require.NoError(t, m1.renew("in", 0, 0, 9), "the session outlives the member")
	require.NoError(t, deleteGroupErr(t, c, "g"))
	var tied int
	require.NoError(t, c.do(func() { tied = len(c.coordinators.share.connSessions) }))
	require.Zero(t, tied, "no connection is tied to a session of the deleted group")
	require.ErrorIs(t, txnErr(m1.fetchFrom(leader, "in", 0).ErrorCode), kerr.ShareSessionNotFound)
}
