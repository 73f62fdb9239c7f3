package realkafka_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/integration/kafkatest"
	"github.com/kshare-go/kshare/internal/testkit"
)

// The tests of this file establish, against a real Kafka 4.4, what ends a
// share session and what that does to the records its member holds: a
// dropped connection, the final epoch, RELEASE, leaving the group, being
// fenced, a leadership move, a broker restart, an expired lock. The
// bundled broker does the same (broker/share_session.go), and
// integration/differential compares the two on the one-node cases.
// docs/design.md ("Kafka 4.4 share-group semantics, established by
// experiment") lists what they found.
//
// Every group here but the expiry test's has a 60 s acquisition lock, and
// every wait for a record to come back is bounded by semWait (30 s): a
// record that comes back came back before its lock could have expired.
// Whether the delivery count was lowered shows in the next delivery's
// count: a first delivery is 1, so a record released and delivered again
// is at 2 unless the release lowered the count.

const (
	semLock = "60000"
	semWait = 30 * time.Second
)

// semSetup creates a one-partition topic holding values and a share group
// that reads it from the start with the given lock duration.
func semSetup(ctx context.Context, t *testing.T, seeds []string, lockMs string, values ...string) (topic, group string) {
	t.Helper()
	topic = uniqueName(t, "kshare-sem")
	group = uniqueName(t, "kshare-sem-group")
	admin := testkit.Client(t, seeds)
	testkit.CreateTopic(ctx, t, admin, topic, 1)
	testkit.SetGroupConfigs(ctx, t, admin, group, "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", lockMs)
	semProduce(ctx, t, seeds, topic, values...)
	return topic, group
}

// semProduce writes values to partition 0 of topic, in one batch.
func semProduce(ctx context.Context, t *testing.T, seeds []string, topic string, values ...string) {
	t.Helper()
	cl := testkit.Client(t, seeds, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var rs []*kgo.Record
	for _, v := range values {
		rs = append(rs, &kgo.Record{Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// comeBack has m acquire until it holds want's offsets (bounded by
// semWait) and fails the test unless it got exactly want: offsets and
// delivery counts.
func comeBack(ctx context.Context, t *testing.T, m *testkit.ShareMember, want map[int64]int16, what string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, semWait)
	defer cancel()
	got := map[int64]int16{}
	for len(got) < len(want) {
		for o, n := range m.Acquire(wctx) {
			got[o] = n
		}
	}
	if testkit.FormatDeliveries(got) != testkit.FormatDeliveries(want) {
		t.Fatalf("%s: acquired %s, want %s", what, testkit.FormatDeliveries(got), testkit.FormatDeliveries(want))
	}
	t.Logf("%s: %s", what, testkit.FormatDeliveries(got))
}

// deliveries returns offsets first..last at count.
func deliveries(first, last int64, count int16) map[int64]int16 {
	out := map[int64]int16{}
	for o := first; o <= last; o++ {
		out[o] = count
	}
	return out
}

// expectCodes fails the test unless an acknowledgement was answered
// wantTop at the top level and wantPart for the partition.
func expectCodes(t *testing.T, what string, top, part, wantTop, wantPart int16) {
	t.Helper()
	if top != wantTop || part != wantPart {
		t.Fatalf("%s: %s/%s, want %s/%s", what, testkit.ErrName(top), testkit.ErrName(part), testkit.ErrName(wantTop), testkit.ErrName(wantPart))
	}
	t.Logf("%s: %s/%s", what, testkit.ErrName(top), testkit.ErrName(part))
}

// acquireExactly has m acquire and fails the test unless it got want.
func acquireExactly(ctx context.Context, t *testing.T, m *testkit.ShareMember, want map[int64]int16, what string) {
	t.Helper()
	if got := m.Acquire(ctx); testkit.FormatDeliveries(got) != testkit.FormatDeliveries(want) {
		t.Fatalf("%s: acquired %s, want %s", what, testkit.FormatDeliveries(got), testkit.FormatDeliveries(want))
	}
}

var (
	codeNotFound     = kerr.ShareSessionNotFound.Code
	codeBadEpoch     = kerr.InvalidShareSessionEpoch.Code
	codeRecordState  = kerr.InvalidRecordState.Code
	codeUnknownTP    = kerr.UnknownTopicOrPartition.Code
	codeUnknownMembr = kerr.UnknownMemberID.Code
)

// Question 1: a dropped connection. The connection that opened a session
// closes while its member holds records, without closing the session: the
// records come back at once, and the delivery cut short counts (the next
// delivery is the second). The session is gone.
func TestKafkaShareDisconnectReleases(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	topic, group := semSetup(ctx, t, seeds, semLock, "a", "b")
	m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	acquireExactly(ctx, t, m1, deliveries(0, 1, 1), "m1's first delivery")
	m1.Disconnect()
	comeBack(ctx, t, m2, deliveries(0, 1, 2), "after m1's connection dropped")
	top, part := m1.Acknowledge(ctx, false, testkit.Ack(0, 1, testkit.AckAccept))
	expectCodes(t, "m1 acknowledges in its old session", top, part, codeNotFound, 0)
}

// Question 1, other connections: a connection that only carried later
// requests of a session, and the connection that opened a session the
// member then replaced (epoch 0 on another connection), release nothing
// when they close; replacing the session releases nothing either: the
// member still holds its records and acknowledges them in the new session.
// To know that Kafka has handled those closes before looking, a control
// member's connection closes after them, and its record comes back first.
func TestKafkaShareOtherConnectionsReleaseNothing(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	topic, group := semSetup(ctx, t, seeds, semLock, "a", "b")
	m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	control := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	acquireExactly(ctx, t, m1, deliveries(0, 1, 1), "m1 on connection A")

	closeA := m1.SwitchConnection()
	top, part := m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))
	expectCodes(t, "m1 renews on connection B", top, part, 0, 0)
	closeB := m1.SwitchConnection()
	m1.Forget()
	resp := m1.Fetch(ctx, 200*time.Millisecond)
	if resp.ErrorCode != 0 || len(testkit.Acquired(t, resp)) != 0 {
		t.Fatalf("m1 replaces its session on connection C: %s, acquired %s; want OK and nothing (m1 holds everything)",
			testkit.ErrName(resp.ErrorCode), testkit.FormatDeliveries(testkit.Acquired(t, resp)))
	}
	top, part = m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))
	expectCodes(t, "m1 renews its records in the new session", top, part, 0, 0)

	semProduce(ctx, t, seeds, topic, "c")
	acquireExactly(ctx, t, control, deliveries(2, 2, 1), "the control member")
	closeB()
	closeA()
	control.Disconnect()
	comeBack(ctx, t, m2, deliveries(2, 2, 2), "the control member's record, after A, B and its connection closed")
	top, part = m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))
	expectCodes(t, "m1 renews on C after A and B closed", top, part, 0, 0)

	m1.Disconnect()
	comeBack(ctx, t, m2, deliveries(0, 1, 2), "after C, which opened m1's session, closed")
}

// Question 1, one connection for two members' sessions: Kafka ties a
// connection to the last session it opened, so its close releases that
// session's records only; the earlier session lives on.
func TestKafkaShareConnectionReleasesItsLastSession(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	topic, group := semSetup(ctx, t, seeds, semLock, "a")
	m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m3 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m3.ShareConnectionOf(m1)
	acquireExactly(ctx, t, m1, deliveries(0, 0, 1), "m1")
	semProduce(ctx, t, seeds, topic, "b")
	acquireExactly(ctx, t, m3, deliveries(1, 1, 1), "m3, on m1's connection")
	m1.Disconnect()
	comeBack(ctx, t, m2, deliveries(1, 1, 2), "after the shared connection closed")
	top, part := m1.Acknowledge(ctx, true, testkit.Ack(0, 0, testkit.AckRenew))
	expectCodes(t, "m1 renews in its session, on a new connection", top, part, 0, 0)
}

// Question 1, a Kafka 4.4 quirk: when a session opened earlier on a
// connection closes, Kafka forgets the connection's last session too, and
// the connection's close then releases nothing. (The bundled broker
// releases the last session's records: docs/differences.md.)
func TestKafkaShareEarlierSessionCloseForgetsTheConnection(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	topic, group := semSetup(ctx, t, seeds, semLock, "a")
	m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m3 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	control := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m3.ShareConnectionOf(m1)
	acquireExactly(ctx, t, m1, deliveries(0, 0, 1), "m1")
	semProduce(ctx, t, seeds, topic, "b")
	acquireExactly(ctx, t, m3, deliveries(1, 1, 1), "m3, on m1's connection")
	top, part := m1.CloseSession(ctx, false)
	expectCodes(t, "m1 closes its session", top, part, 0, 0)
	comeBack(ctx, t, m2, deliveries(0, 0, 2), "m1's record")
	semProduce(ctx, t, seeds, topic, "c")
	acquireExactly(ctx, t, control, deliveries(2, 2, 1), "the control member")
	m1.Disconnect()
	control.Disconnect()
	comeBack(ctx, t, m2, deliveries(2, 2, 2), "the control member's record, after the shared connection closed")
	m3.ShareConnectionOf(m1)
	top, part = m3.Acknowledge(ctx, true, testkit.Ack(1, 1, testkit.AckRenew))
	expectCodes(t, "m3 renews: its records were not released", top, part, 0, 0)
}

// Question 1, a parked fetch: Kafka reads nothing more from a connection
// while a request of it is parked, so a connection that closes while its
// ShareFetch waits for records is seen closed, and its session's records
// released, only when the wait ends. Meanwhile the session lives.
func TestKafkaShareParkedFetchHoldsTheClose(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	topic, group := semSetup(ctx, t, seeds, semLock, "a", "b")
	m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	acquireExactly(ctx, t, m1, deliveries(0, 1, 1), "m1")
	done := m1.ParkFetch(ctx, 10*time.Second)
	m1.Disconnect()
	<-done
	top, part := m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))
	expectCodes(t, "m1 renews on a new connection while the closed one's fetch is parked", top, part, 0, 0)
	comeBack(ctx, t, m2, deliveries(0, 1, 2), "once the parked fetch's wait ended")
}

// Question 2: closing a session with the final epoch (-1), by ShareFetch
// or ShareAcknowledge, applies the acknowledgements it carries and
// releases the rest at once; the delivery cut short counts.
func TestKafkaShareFinalEpochReleases(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	for _, byFetch := range []bool{true, false} {
		name := map[bool]string{true: "ShareFetch", false: "ShareAcknowledge"}[byFetch]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			topic, group := semSetup(ctx, t, seeds, semLock, "a", "b", "c")
			m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
			m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
			acquireExactly(ctx, t, m1, deliveries(0, 2, 1), "m1")
			epoch := m1.SessionEpoch
			top, part := m1.CloseSession(ctx, byFetch, testkit.Ack(0, 0, testkit.AckAccept), testkit.Ack(1, 1, testkit.AckRelease))
			expectCodes(t, "m1 closes, accepting 0 and releasing 1", top, part, 0, 0)
			comeBack(ctx, t, m2, map[int64]int16{1: 2, 2: 2}, "after the close")
			top, part = m1.Acknowledge(ctx, false, testkit.Ack(2, 2, testkit.AckAccept))
			expectCodes(t, "an acknowledgement at epoch 0", top, part, codeBadEpoch, 0)
			m1.SessionEpoch = epoch
			top, part = m1.Acknowledge(ctx, false, testkit.Ack(2, 2, testkit.AckAccept))
			expectCodes(t, "an acknowledgement in the closed session", top, part, codeNotFound, 0)
		})
	}
}

// Question 3: RELEASE makes a record available at once; its delivery
// count is not lowered, so the next delivery is the second.
func TestKafkaShareReleaseKeepsTheCount(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	topic, group := semSetup(ctx, t, seeds, semLock, "a", "b")
	m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	acquireExactly(ctx, t, m1, deliveries(0, 1, 1), "m1")
	top, part := m1.Acknowledge(ctx, false, testkit.Ack(0, 1, testkit.AckRelease))
	expectCodes(t, "m1 releases", top, part, 0, 0)
	comeBack(ctx, t, m2, deliveries(0, 1, 2), "after RELEASE")
}

// memberListed reports whether ShareGroupDescribe lists member in group.
func memberListed(ctx context.Context, t *testing.T, cl *kgo.Client, group, member string) bool {
	t.Helper()
	req := kmsg.NewPtrShareGroupDescribeRequest()
	req.GroupIDs = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Groups) != 1 {
		t.Fatalf("describe %s: %v", group, err)
	}
	for _, m := range resp.Groups[0].Members {
		if m.MemberID == member {
			return true
		}
	}
	return false
}

// Question 4: leaving the group (ShareGroupHeartbeat with epoch -1)
// releases nothing: Kafka's group coordinator does not tell the
// share-partition leader, and the member's session lives on. The member
// still acknowledges its records, its session still acquires new ones,
// and Kafka even lets it open a new session (it checks no membership);
// its records come back, counted, when its connection closes.
func TestKafkaShareLeaveKeepsRecords(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	topic, group := semSetup(ctx, t, seeds, semLock, "a", "b", "c")
	admin := testkit.Client(t, seeds)
	m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	acquireExactly(ctx, t, m1, deliveries(0, 2, 1), "m1")
	if code := m1.Leave(ctx); code != 0 {
		t.Fatalf("leave: %s", testkit.ErrName(code))
	}
	if memberListed(ctx, t, admin, group, m1.ID) {
		t.Fatal("m1 is still in the group after leaving")
	}
	top, part := m1.Acknowledge(ctx, false, testkit.Ack(0, 0, testkit.AckAccept))
	expectCodes(t, "m1 accepts 0 after leaving", top, part, 0, 0)
	semProduce(ctx, t, seeds, topic, "d")
	acquireExactly(ctx, t, m1, deliveries(3, 3, 1), "m1's session, after it left, acquires a new record")
	m1.Forget()
	resp := m1.Fetch(ctx, 200*time.Millisecond)
	if resp.ErrorCode != 0 {
		t.Fatalf("m1 opens a new session after leaving: %s, want OK (Kafka checks no membership)", testkit.ErrName(resp.ErrorCode))
	}
	top, part = m1.Acknowledge(ctx, true, testkit.Ack(1, 3, testkit.AckRenew))
	expectCodes(t, "m1 renews its records in the new session", top, part, 0, 0)
	m1.Disconnect()
	comeBack(ctx, t, m2, map[int64]int16{1: 2, 2: 2, 3: 2}, "after m1's connection closed")
}

// Question 4, fenced: a member that misses its session timeout is fenced,
// and keeps its records and its session exactly as one that left.
func TestKafkaShareFenceKeepsRecords(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	topic, group := semSetup(ctx, t, seeds, semLock, "a", "b")
	admin := testkit.Client(t, seeds)
	testkit.SetGroupConfigs(ctx, t, admin, group, "share.session.timeout.ms", "6000", "share.heartbeat.interval.ms", "1000")
	m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	acquireExactly(ctx, t, m1, deliveries(0, 1, 1), "m1")
	// m1 never heartbeats again; m2 does, and so stays in the group.
	for memberListed(ctx, t, admin, group, m1.ID) {
		if code := m2.Heartbeat(ctx); code != 0 {
			t.Fatalf("m2's heartbeat: %s", testkit.ErrName(code))
		}
		select {
		case <-ctx.Done():
			t.Fatal("m1 was not fenced before the deadline")
		case <-time.After(500 * time.Millisecond):
		}
	}
	top, part := m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))
	expectCodes(t, "the fenced m1 renews its records", top, part, 0, 0)
	if code := m1.Heartbeat(ctx); code != codeUnknownMembr {
		t.Fatalf("the fenced m1's heartbeat: %s, want %s", testkit.ErrName(code), testkit.ErrName(codeUnknownMembr))
	}
	m1.Disconnect()
	comeBack(ctx, t, m2, deliveries(0, 1, 2), "after the fenced m1's connection closed")
}

// Question 6: once a record's lock expired and it went to another member,
// the first member's RENEW, ACCEPT and RELEASE are refused with
// INVALID_RECORD_STATE for the partition (the request is OK).
func TestKafkaShareExpiredLockRefusesTheFirstMember(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	topic, group := semSetup(ctx, t, seeds, "1000", "a", "b")
	m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	acquireExactly(ctx, t, m1, deliveries(0, 1, 1), "m1")
	comeBack(ctx, t, m2, deliveries(0, 1, 2), "after m1's locks expired")
	top, part := m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))
	expectCodes(t, "m1 renews", top, part, 0, codeRecordState)
	top, part = m1.Acknowledge(ctx, false, testkit.Ack(0, 1, testkit.AckAccept))
	expectCodes(t, "m1 accepts", top, part, 0, codeRecordState)
	top, part = m1.Acknowledge(ctx, false, testkit.Ack(0, 1, testkit.AckRelease))
	expectCodes(t, "m1 releases", top, part, 0, codeRecordState)
	top, part = m2.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))
	expectCodes(t, "m2 renews", top, part, 0, 0)
}

// semTopicOn creates a one-partition topic with the given replicas (the
// first the preferred leader) and waits until every replica is in sync.
func semTopicOn(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, replicas ...int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions, rt.ReplicationFactor = -1, -1
	a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	a.Partition, a.Replicas = 0, replicas
	rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("create %s on %v: %v", topic, replicas, err)
	}
	waitLeader(ctx, t, cl, topic, replicas[0], len(replicas))
}

// waitLeader waits until node leads partition 0 of topic with isr replicas
// in sync.
func waitLeader(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, node int32, isr int) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("node %d to lead %s", node, topic), func(ctx context.Context) (bool, string) {
		parts, _, err := partitionState(ctx, cl, topic)
		if err != nil || len(parts) != 1 {
			return false, fmt.Sprintf("%v", err)
		}
		p := parts[0]
		return p.Leader == node && len(p.ISR) == isr, fmt.Sprintf("leader %d replicas %v isr %v", p.Leader, p.Replicas, p.ISR)
	})
}

// Question 5, a leadership move: preferred leader election moves a
// share-partition to another broker, which loads its state from the share
// coordinator. What was released or acknowledged before keeps its count;
// a record acquired when leadership moved comes back with the delivery at
// the old leader not counted (under-counted), because Kafka persists an
// acquisition only when it ends. A member's acknowledgement at the old
// leader is UNKNOWN_TOPIC_OR_PARTITION.
func TestKafkaShareLeaderMoveUnderCounts(t *testing.T) {
	two := kafkatest.Bootstrap2(t)
	seeds := two.Seeds
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	admin := testkit.Client(t, seeds)
	topic := uniqueName(t, "kshare-sem-move")
	group := uniqueName(t, "kshare-sem-move-group")
	semTopicOn(ctx, t, admin, topic, 2, 1)
	testkit.SetGroupConfigs(ctx, t, admin, group, "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", semLock)
	semProduce(ctx, t, seeds, topic, "a", "b", "c", "d")
	m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	if m1.Leader != 2 {
		t.Fatalf("the partition is led by %d, not 2", m1.Leader)
	}
	acquireExactly(ctx, t, m1, deliveries(0, 3, 1), "m1 at node 2")
	top, part := m1.Acknowledge(ctx, false, testkit.Ack(0, 0, testkit.AckRelease), testkit.Ack(1, 1, testkit.AckAccept))
	expectCodes(t, "m1 releases 0 and accepts 1; 2-3 stay acquired", top, part, 0, 0)

	electPreferred(ctx, t, admin, topic, 1, 2)
	m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	comeBack(ctx, t, m2, map[int64]int16{0: 2, 2: 1, 3: 1}, "at the new leader")
	top, part = m1.Acknowledge(ctx, false, testkit.Ack(2, 2, testkit.AckAccept))
	expectCodes(t, "m1 accepts 2 at the old leader", top, part, 0, codeUnknownTP)
}

// electPreferred makes replicas the replica order of partition 0 of topic
// and runs preferred leader elections until replicas[0] leads it.
func electPreferred(ctx context.Context, t *testing.T, admin *kgo.Client, topic string, replicas ...int32) {
	t.Helper()
	adm := kadm.NewClient(admin)
	assignReplicas(ctx, t, admin, topic, 0, replicas...)
	waitFor(ctx, t, fmt.Sprintf("node %d to lead after a preferred leader election", replicas[0]), func(ctx context.Context) (bool, string) {
		res, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {0: {}}})
		parts, _, perr := partitionState(ctx, admin, topic)
		if perr != nil || len(parts) != 1 {
			return false, fmt.Sprint(perr)
		}
		return parts[0].Leader == replicas[0], fmt.Sprintf("leader %d, election %v %v", parts[0].Leader, res, err)
	})
}

// assignReplicas gives partition of topic the replicas, in that order.
func assignReplicas(ctx context.Context, t *testing.T, admin *kgo.Client, topic string, partition int32, replicas ...int32) {
	t.Helper()
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, partition, replicas)
	if resps, err := kadm.NewClient(admin).AlterPartitionAssignments(ctx, req); err != nil || resps.Error() != nil {
		t.Fatalf("assign the replicas of %s/%d to %v: %v %v", topic, partition, replicas, err, resps.Error())
	}
}

// leaderEpochAt asks node itself for the leader and leader epoch of
// partition 0 of topic.
func leaderEpochAt(ctx context.Context, t *testing.T, cl *kgo.Client, node int32, topic string) (leader, epoch int32) {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := cl.Broker(int(node)).Request(ctx, req)
	if err != nil {
		t.Fatalf("metadata from node %d: %v", node, err)
	}
	mr := resp.(*kmsg.MetadataResponse)
	if len(mr.Topics) != 1 || len(mr.Topics[0].Partitions) != 1 {
		t.Fatalf("metadata from node %d: %d topics", node, len(mr.Topics))
	}
	p := mr.Topics[0].Partitions[0]
	return p.Leader, p.LeaderEpoch
}

// Question 8, leadership away and back: a preferred leader election moves
// the share-partition to the other broker and a second one brings it
// back. The member's share session with the first leader stands, but the
// leader loaded the share-partition again from its persisted state,
// without the member's acquisitions: another member is handed the same
// records (with count 1) and accepts them, and the first member's RENEW
// of them, in the session it acquired them in and long before its lock
// would have run out, is then answered with success (they are below the
// start offset). The partition's leader epoch, asked of the leader after
// that RENEW, is two past the one it had when the records were acquired,
// which is how a ledger commit tells such a success from a real renewal
// (docs/design.md, assumption 1).
func TestKafkaShareLeaderAwayAndBackRenewsForgottenRecords(t *testing.T) {
	two := kafkatest.Bootstrap2(t)
	seeds := two.Seeds
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	admin := testkit.Client(t, seeds)
	topic := uniqueName(t, "kshare-sem-back")
	group := uniqueName(t, "kshare-sem-back-group")
	semTopicOn(ctx, t, admin, topic, 2, 1)
	testkit.SetGroupConfigs(ctx, t, admin, group, "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", semLock)
	semProduce(ctx, t, seeds, topic, "a", "b", "c", "d")
	m1 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	if m1.Leader != 2 {
		t.Fatalf("the partition is led by %d, not 2", m1.Leader)
	}
	leader, before := leaderEpochAt(ctx, t, admin, 2, topic)
	if leader != 2 {
		t.Fatalf("node 2 says node %d leads %s", leader, topic)
	}
	acquireExactly(ctx, t, m1, deliveries(0, 3, 1), "m1 at node 2")
	top, part := m1.Acknowledge(ctx, true, testkit.Ack(0, 3, testkit.AckRenew))
	expectCodes(t, "m1 renews what it holds", top, part, 0, 0)

	electPreferred(ctx, t, admin, topic, 1, 2)
	electPreferred(ctx, t, admin, topic, 2, 1)
	m2 := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
	acquireExactly(ctx, t, m2, deliveries(0, 3, 1), "m2 at node 2, after the leadership came back")
	top, part = m2.Acknowledge(ctx, false, testkit.Ack(0, 3, testkit.AckAccept))
	expectCodes(t, "m2 accepts them", top, part, 0, 0)
	top, part = m1.Acknowledge(ctx, true, testkit.Ack(0, 3, testkit.AckRenew))
	expectCodes(t, "m1 renews, in its session, the records m2 accepted", top, part, 0, 0)
	leader, after := leaderEpochAt(ctx, t, admin, 2, topic)
	if leader != 2 || after != before+2 {
		t.Fatalf("after the RENEW node 2 says node %d leads at epoch %d; before the acquisition, epoch %d: want node 2 at %d", leader, after, before, before+2)
	}
}

// topicIDOf returns the id of topic.
func topicIDOf(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) [16]byte {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	return resp.Topics[0].TopicID
}

// shareCoordinatorOf asks FindCoordinator which node coordinates the share
// state of partition 0 of topic for group.
func shareCoordinatorOf(ctx context.Context, t *testing.T, cl *kgo.Client, group string, topicID [16]byte) int32 {
	t.Helper()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = 2 // share
	req.CoordinatorKeys = []string{group + ":" + base64.RawURLEncoding.EncodeToString(topicID[:]) + ":0"}
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Coordinators) != 1 {
			t.Fatalf("FindCoordinator for the share state of %s: %v", group, err)
		}
		if c := resp.Coordinators[0]; c.ErrorCode == 0 {
			return c.NodeID
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no share coordinator for %s before the deadline", group)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// shareStateTopic holds the share coordinators' state; each of its
// partitions has one replica on the test clusters (kafka.sh).
const shareStateTopic = "__share_group_state"

// spreadShareState moves partitions of the share state topic until each
// of nodes leads one: a cluster that first served share groups while a
// node was down (an earlier test restarting it) put them all on the
// other, and a group's share coordinator could then never be on that node.
func spreadShareState(ctx context.Context, t *testing.T, admin *kgo.Client, nodes ...int32) {
	t.Helper()
	var parts []kmsg.MetadataResponseTopicPartition
	waitFor(ctx, t, "the share state topic's leaders", func(ctx context.Context) (bool, string) {
		var err error
		parts, _, err = partitionState(ctx, admin, shareStateTopic)
		for _, p := range parts {
			if p.Leader < 0 {
				return false, fmt.Sprintf("partition %d has no leader", p.Partition)
			}
		}
		return err == nil && len(parts) > 0, fmt.Sprint(err)
	})
	led := map[int32][]int32{}
	for _, p := range parts {
		led[p.Leader] = append(led[p.Leader], p.Partition)
	}
	for _, n := range nodes {
		if len(led[n]) > 0 {
			continue
		}
		from := int32(-1)
		for node, ps := range led {
			if len(ps) > 1 && (from < 0 || len(ps) > len(led[from])) {
				from = node
			}
		}
		if from < 0 {
			t.Fatalf("no partition of %s to move to node %d: leaders %v", shareStateTopic, n, led)
		}
		p := led[from][0]
		led[from], led[n] = led[from][1:], []int32{p}
		assignReplicas(ctx, t, admin, shareStateTopic, p, n)
		waitFor(ctx, t, fmt.Sprintf("node %d to lead %s/%d", n, shareStateTopic, p), func(ctx context.Context) (bool, string) {
			parts, _, err := partitionState(ctx, admin, shareStateTopic)
			for _, q := range parts {
				if q.Partition == p {
					return q.Leader == n, fmt.Sprintf("leader %d", q.Leader)
				}
			}
			return false, fmt.Sprint(err)
		})
	}
}

// Question 5, a broker restart: the broker leading a share-partition stops
// (a controlled shutdown) and starts again while a member holds records
// there. The shutdown closes the member's connection, which releases its
// records, and the release reaches the share coordinator when that runs on
// the other broker: the counts survive. When the share coordinator runs
// on the stopping broker itself, the release is lost with it, and the
// records come back with the delivery not counted.
func TestKafkaShareRestartCountsDependOnTheShareCoordinator(t *testing.T) {
	two := kafkatest.Bootstrap2(t)
	seeds := two.Seeds
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	admin := testkit.Client(t, seeds)
	topic := uniqueName(t, "kshare-sem-restart")
	semTopicOn(ctx, t, admin, topic, 2)
	semProduce(ctx, t, seeds, topic, "a", "b")
	// One group whose share coordinator is on node 1, one on node 2.
	topicID := topicIDOf(ctx, t, admin, topic)
	shareCoordinatorOf(ctx, t, admin, uniqueName(t, "kshare-sem-restart-group"), topicID) // the share state topic exists
	spreadShareState(ctx, t, admin, 1, 2)
	groups := map[int32]string{}
	for tries := 0; len(groups) < 2; tries++ {
		if tries == 200 {
			t.Fatalf("%d groups, and their share coordinators are all on %v", tries, groups)
		}
		group := uniqueName(t, "kshare-sem-restart-group")
		if node := shareCoordinatorOf(ctx, t, admin, group, topicID); groups[node] == "" {
			groups[node] = group
		}
	}
	for node, group := range groups {
		testkit.SetGroupConfigs(ctx, t, admin, group, "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", semLock)
		m := testkit.JoinShare(ctx, t, seeds, group, topic, 0)
		acquireExactly(ctx, t, m, deliveries(0, 1, 1), fmt.Sprintf("the member of the group coordinated by node %d", node))
	}
	if err := two.StopNode2(ctx); err != nil {
		t.Fatal(err)
	}
	if err := two.StartNode2(ctx); err != nil {
		t.Fatal(err)
	}
	waitLeader(ctx, t, admin, topic, 2, 1)
	comeBack(ctx, t, testkit.JoinShare(ctx, t, seeds, groups[1], topic, 0), deliveries(0, 1, 2), "share coordinator on node 1")
	comeBack(ctx, t, testkit.JoinShare(ctx, t, seeds, groups[2], topic, 0), deliveries(0, 1, 1), "share coordinator on node 2, the restarted one")
}
