package differential_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/testkit"
)

// scenarioShareSessions runs the same session endings against both
// targets and compares what comes back, with which delivery count, and
// whether it came back before its lock could have expired: a dropped
// connection (the session's, another one, one carrying two members'
// sessions, one whose fetch is parked), the final epoch by ShareFetch and
// by ShareAcknowledge, RELEASE, leaving the group, being fenced, and an
// expired lock's refusals. (Kafka's forgetting of a connection's last
// session when an earlier one on it closes is not compared: which of two
// closes the bundled broker handles first is not ordered, so that step
// would not be deterministic there; docs/differences.md lists it.) Every group has a 60 s lock, and a record is
// waited for at most sessionWait (12 s): "back" means it came back long
// before its lock could have expired. What is still held is shown by its
// member renewing it; a close is known to be handled once a control
// member's record, released by a later close, came back.
//
// The members are testkit.ShareMember: each has its own connections, so
// that closing them is what a test does, and kgo negotiates the share
// requests' versions (v2 on both targets).
func scenarioShareSessions(ctx context.Context, tg *target, tr *transcript) {
	acks := func(top, part int16) string { return errName(top) + "/" + errName(part) }
	var n int
	fresh := func(lockMs string, values ...string) (topic, group string) {
		n++
		topic, group = tg.name(fmt.Sprintf("ss%d", n)), tg.name(fmt.Sprintf("ss%d-group", n))
		tg.createTopic(ctx, topic, 1)
		tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(recentTs(), values...))
		tg.alterGroupConfig(ctx, group, 0, "share.auto.offset.reset", kmsg.StringPtr("earliest"), false)
		tg.alterGroupConfig(ctx, group, 0, "share.record.lock.duration.ms", kmsg.StringPtr(lockMs), false)
		return topic, group
	}
	join := func(topic, group string) *testkit.ShareMember {
		return testkit.JoinShare(ctx, tg.t, tg.seeds, group, topic, 0)
	}
	produce := func(topic string, values ...string) {
		tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(recentTs(), values...))
	}
	acquire := func(step string, m *testkit.ShareMember) {
		tr.add(step, "%s", testkit.FormatDeliveries(m.Acquire(ctx)))
	}
	back := func(step string, m *testkit.ShareMember, want int) {
		tr.add(step, "%s", sessionComeBack(ctx, m, want))
	}
	const lock = "60000"

	// A dropped connection: the one that opened the session.
	topic, group := fresh(lock, "a", "b")
	m1, m2 := join(topic, group), join(topic, group)
	acquire("disconnect: first delivery", m1)
	m1.Disconnect()
	back("disconnect: back", m2, 2)
	tr.add("disconnect: the old session", "%s", acks(m1.Acknowledge(ctx, false, testkit.Ack(0, 1, testkit.AckAccept))))

	// Other connections of the session, and a replaced session.
	topic, group = fresh(lock, "a", "b")
	m1, m2, control := join(topic, group), join(topic, group), join(topic, group)
	acquire("other connections: first delivery", m1)
	closeA := m1.SwitchConnection()
	tr.add("other connections: renew on another connection", "%s", acks(m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))))
	closeB := m1.SwitchConnection()
	m1.Forget()
	resp := m1.Fetch(ctx, 200*time.Millisecond)
	tr.add("other connections: replace the session", "%s acquired=[%s]", errName(resp.ErrorCode), testkit.FormatDeliveries(testkit.Acquired(tg.t, resp)))
	tr.add("other connections: renew in the new session", "%s", acks(m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))))
	produce(topic, "c")
	acquire("other connections: control", control)
	closeB()
	closeA()
	control.Disconnect()
	back("other connections: control back", m2, 1)
	tr.add("other connections: renew after both closed", "%s", acks(m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))))
	m1.Disconnect()
	back("other connections: back after the new session's connection closed", m2, 2)

	// One connection, two members' sessions: its close releases the last.
	topic, group = fresh(lock, "a")
	m1, m3, m2 := join(topic, group), join(topic, group), join(topic, group)
	m3.ShareConnectionOf(m1)
	acquire("shared connection: first member", m1)
	produce(topic, "b")
	acquire("shared connection: second member", m3)
	m1.Disconnect()
	back("shared connection: back", m2, 1)
	tr.add("shared connection: the first member renews", "%s", acks(m1.Acknowledge(ctx, true, testkit.Ack(0, 0, testkit.AckRenew))))

	// A connection closed while its fetch is parked.
	topic, group = fresh(lock, "a", "b")
	m1, m2 = join(topic, group), join(topic, group)
	acquire("parked fetch: first delivery", m1)
	done := m1.ParkFetch(ctx, 5*time.Second)
	m1.Disconnect()
	<-done
	// The broker reads the parked fetch from a connection the client has
	// closed, and a renew on a new connection can reach it first, at an
	// epoch the session has not reached yet: the renew is sent again
	// (it moves no epoch when refused) until the fetch has been taken,
	// within the fetch's wait.
	var top, part int16
	for until := time.Now().Add(4 * time.Second); ; {
		top, part = m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))
		if top != kerr.InvalidShareSessionEpoch.Code || time.Now().After(until) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	tr.add("parked fetch: renew while it waits", "%s", acks(top, part))
	back("parked fetch: back once the wait ended", m2, 2)

	// The final epoch.
	for _, byFetch := range []bool{true, false} {
		by := map[bool]string{true: "ShareFetch", false: "ShareAcknowledge"}[byFetch]
		topic, group = fresh(lock, "a", "b", "c")
		m1, m2 = join(topic, group), join(topic, group)
		acquire("final epoch by "+by+": first delivery", m1)
		epoch := m1.SessionEpoch
		tr.add("final epoch by "+by+": close, accepting 0, releasing 1", "%s",
			acks(m1.CloseSession(ctx, byFetch, testkit.Ack(0, 0, testkit.AckAccept), testkit.Ack(1, 1, testkit.AckRelease))))
		back("final epoch by "+by+": back", m2, 2)
		tr.add("final epoch by "+by+": acknowledge at epoch 0", "%s", acks(m1.Acknowledge(ctx, false, testkit.Ack(2, 2, testkit.AckAccept))))
		m1.SessionEpoch = epoch
		tr.add("final epoch by "+by+": acknowledge in the closed session", "%s", acks(m1.Acknowledge(ctx, false, testkit.Ack(2, 2, testkit.AckAccept))))
	}

	// RELEASE.
	topic, group = fresh(lock, "a", "b")
	m1, m2 = join(topic, group), join(topic, group)
	acquire("release: first delivery", m1)
	tr.add("release: release", "%s", acks(m1.Acknowledge(ctx, false, testkit.Ack(0, 1, testkit.AckRelease))))
	back("release: back", m2, 2)

	// Leaving the group.
	topic, group = fresh(lock, "a", "b", "c")
	m1, m2 = join(topic, group), join(topic, group)
	acquire("leave: first delivery", m1)
	tr.code("leave: leave", m1.Leave(ctx))
	tr.add("leave: accept after leaving", "%s", acks(m1.Acknowledge(ctx, false, testkit.Ack(0, 0, testkit.AckAccept))))
	produce(topic, "d")
	acquire("leave: the session acquires after leaving", m1)
	tr.add("leave: renew", "%s", acks(m1.Acknowledge(ctx, true, testkit.Ack(1, 3, testkit.AckRenew))))
	m1.Disconnect()
	back("leave: back after the connection closed", m2, 3)

	// Being fenced.
	topic, group = fresh(lock, "a", "b")
	tg.alterGroupConfig(ctx, group, 0, "share.session.timeout.ms", kmsg.StringPtr("6000"), false)
	tg.alterGroupConfig(ctx, group, 0, "share.heartbeat.interval.ms", kmsg.StringPtr("1000"), false)
	m1, m2 = join(topic, group), join(topic, group)
	acquire("fenced: first delivery", m1)
	tg.retry(ctx, "the silent member to be fenced", func() error {
		if code := m2.Heartbeat(ctx); code != 0 {
			return codeErr(code)
		}
		if tg.shareMemberListed(ctx, group, m1.ID) {
			return fmt.Errorf("still a member")
		}
		return nil
	})
	tr.add("fenced: renew", "%s", acks(m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))))
	tr.code("fenced: heartbeat", m1.Heartbeat(ctx))
	m1.Disconnect()
	back("fenced: back after the connection closed", m2, 2)

	// An expired lock, the record delivered to another member.
	topic, group = fresh("1000", "a", "b")
	m1, m2 = join(topic, group), join(topic, group)
	acquire("expired: first delivery", m1)
	back("expired: the other member's delivery", m2, 2)
	tr.add("expired: renew", "%s", acks(m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))))
	tr.add("expired: accept", "%s", acks(m1.Acknowledge(ctx, false, testkit.Ack(0, 1, testkit.AckAccept))))
	tr.add("expired: release", "%s", acks(m1.Acknowledge(ctx, false, testkit.Ack(0, 1, testkit.AckRelease))))
	tr.add("expired: the other member renews", "%s", acks(m2.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))))
	// Once the other member has acknowledged the records, they are below
	// the start offset, and an acknowledgement of them succeeds without
	// a look at who held them: a RENEW's success proves a lock only when
	// it came back before that lock's known end (shareconsumer's
	// lateRenewal).
	tr.add("expired: the other member accepts", "%s", acks(m2.Acknowledge(ctx, false, testkit.Ack(0, 1, testkit.AckAccept))))
	tr.add("expired: renew of records the other member acknowledged", "%s", acks(m1.Acknowledge(ctx, true, testkit.Ack(0, 1, testkit.AckRenew))))
	tr.add("expired: accept of records the other member acknowledged", "%s", acks(m1.Acknowledge(ctx, false, testkit.Ack(0, 1, testkit.AckAccept))))
}

// sessionWait bounds the wait for records to come back; the scenario's
// locks are 60 s.
const sessionWait = 12 * time.Second

// sessionComeBack has m acquire until it holds want offsets or sessionWait
// passes, and describes what it got: "back 0:2 1:2" (offset:delivery
// count), or "not back within 30s of a 60s lock" with what it got.
func sessionComeBack(ctx context.Context, m *testkit.ShareMember, want int) string {
	got := map[int64]int16{}
	deadline := time.Now().Add(sessionWait)
	for len(got) < want && time.Now().Before(deadline) && ctx.Err() == nil {
		resp := m.Fetch(ctx, 500*time.Millisecond)
		if resp.ErrorCode != 0 {
			return "top-level " + errName(resp.ErrorCode)
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				for _, ar := range rp.AcquiredRecords {
					for o := ar.FirstOffset; o <= ar.LastOffset; o++ {
						got[o] = ar.DeliveryCount
					}
				}
			}
		}
	}
	if len(got) < want {
		return fmt.Sprintf("not back within %v of a 60s lock [%s]", sessionWait, testkit.FormatDeliveries(got))
	}
	return "back " + testkit.FormatDeliveries(got)
}

// shareMemberListed reports whether ShareGroupDescribe lists member.
func (tg *target) shareMemberListed(ctx context.Context, group, member string) bool {
	tg.t.Helper()
	req := kmsg.NewPtrShareGroupDescribeRequest()
	req.GroupIDs = []string{group}
	resp := tg.send(ctx, 1, req).(*kmsg.ShareGroupDescribeResponse)
	for _, g := range resp.Groups {
		for _, m := range g.Members {
			if m.MemberID == member {
				return true
			}
		}
	}
	return false
}
