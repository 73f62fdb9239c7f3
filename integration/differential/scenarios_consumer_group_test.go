package differential_test

// KIP-848 consumer groups: ConsumerGroupHeartbeat and ConsumerGroupDescribe,
// the offsets of such groups with member epochs, and which type a group is.

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	vConsumerHeartbeat = 1
	vConsumerDescribe  = 1
	vOffsetCommitEpoch = 9 // the first version with member epochs
	vOffsetFetchEpoch  = 9
	vJoinGroup         = 9
	vListGroups        = 5
	vDescribeGroups    = 5
	vDeleteGroups      = 2
	vOffsetDelete      = 0
)

// cgMember is one KIP-848 member driven by raw heartbeats: it reports as
// owned exactly what its last assignment gave it, as a client that revokes
// and adopts at once would.
type cgMember struct {
	tg       *target
	group    string
	id       string
	instance *string
	epoch    int32
	owned    map[[16]byte][]int32
}

func (tg *target) newCGMember(group string) *cgMember {
	return &cgMember{tg: tg, group: group, id: newMemberID()}
}

func (m *cgMember) joinReq(topics ...string) *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group, req.MemberID, req.MemberEpoch = m.group, m.id, 0
	req.InstanceID = m.instance
	req.RebalanceTimeoutMillis = 30000
	req.SubscribedTopicNames = topics
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	return req
}

func (m *cgMember) hbReq() *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group, req.MemberID, req.MemberEpoch = m.group, m.id, m.epoch
	req.InstanceID = m.instance
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	ids := make([][16]byte, 0, len(m.owned))
	for id := range m.owned {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	for _, id := range ids {
		req.Topics = append(req.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: id, Partitions: m.owned[id]})
	}
	return req
}

// send sends a heartbeat and, on success, takes its epoch and assignment.
func (m *cgMember) send(ctx context.Context, req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	m.tg.t.Helper()
	r := m.tg.send(ctx, vConsumerHeartbeat, req).(*kmsg.ConsumerGroupHeartbeatResponse)
	if r.ErrorCode == 0 && r.MemberID != nil && *r.MemberID == m.id {
		m.epoch = r.MemberEpoch
		if r.Assignment != nil {
			m.owned = make(map[[16]byte][]int32)
			for _, t := range r.Assignment.Topics {
				m.owned[t.TopicID] = append([]int32(nil), t.Partitions...)
			}
		}
	}
	return r
}

// owns returns the partitions the member owns, sorted.
func (m *cgMember) owns() []int32 {
	var out []int32
	for _, ps := range m.owned {
		out = append(out, ps...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// cgResult records a heartbeat answer; epochs relative to base (the epoch
// the scenario knows; 0 for absolute).
func cgResult(r *kmsg.ConsumerGroupHeartbeatResponse, m *cgMember, base int32) string {
	if r.ErrorCode != 0 {
		return errName(r.ErrorCode)
	}
	epoch := fmt.Sprint(r.MemberEpoch)
	if base > 0 && r.MemberEpoch > 0 {
		epoch = fmt.Sprintf("base%+d", r.MemberEpoch-base)
	}
	assigned := "none"
	if r.Assignment != nil {
		n := 0
		for _, t := range r.Assignment.Topics {
			n += len(t.Partitions)
		}
		assigned = fmt.Sprintf("%d partitions", n)
	}
	return fmt.Sprintf("OK epoch=%s sameMemberID=%t interval=%d assignment=%s", epoch,
		r.MemberID != nil && *r.MemberID == m.id, r.HeartbeatIntervalMillis, assigned)
}

// cgDescribe describes one consumer group.
func (tg *target) cgDescribe(ctx context.Context, group string) kmsg.ConsumerGroupDescribeResponseGroup {
	tg.t.Helper()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	resp := tg.send(ctx, vConsumerDescribe, req).(*kmsg.ConsumerGroupDescribeResponse)
	if len(resp.Groups) != 1 {
		tg.t.Fatalf("%s: describe %s: %d groups", tg.kind, group, len(resp.Groups))
	}
	return resp.Groups[0]
}

// cgDescribeResult records a description without ids, hosts or epochs'
// absolute values: state, epochs equal or not, assignor, and each member's
// type, subscription and assignment sizes, sorted.
func cgDescribeResult(d kmsg.ConsumerGroupDescribeResponseGroup) string {
	if d.ErrorCode != 0 {
		return errName(d.ErrorCode)
	}
	var members []string
	for _, m := range d.Members {
		count := func(a kmsg.Assignment) int {
			n := 0
			for _, t := range a.TopicPartitions {
				n += len(t.Partitions)
			}
			return n
		}
		members = append(members, fmt.Sprintf("type=%d static=%t topics=%d regex=%t assigned=%d target=%d atGroupEpoch=%t",
			m.MemberType, m.InstanceID != nil, len(m.SubscribedTopics), m.SubscribedTopicRegex != nil,
			count(m.Assignment), count(m.TargetAssignment), m.MemberEpoch == d.Epoch))
	}
	sort.Strings(members)
	return fmt.Sprintf("OK state=%s epoch>0=%t assignmentEpoch=epoch:%t assignor=%s members=[%s]", d.State,
		d.Epoch > 0, d.AssignmentEpoch == d.Epoch, d.AssignorName, strings.Join(members, "; "))
}

// cgSettle heartbeats the members in turn until the group is Stable with
// every member holding its target (the real Kafka may compute assignments
// a moment later, and members reconcile one heartbeat at a time).
func (tg *target) cgSettle(ctx context.Context, members ...*cgMember) {
	tg.t.Helper()
	tg.retry(ctx, "consumer group to settle", func() error {
		for _, m := range members {
			if r := m.send(ctx, m.hbReq()); r.ErrorCode != 0 {
				return codeErr(r.ErrorCode)
			}
		}
		d := tg.cgDescribe(ctx, members[0].group)
		if d.ErrorCode != 0 {
			return codeErr(d.ErrorCode)
		}
		if d.State != "Stable" {
			return fmt.Errorf("state %s", d.State)
		}
		for _, m := range members {
			if m.epoch != d.Epoch {
				return fmt.Errorf("member at epoch %d, group at %d", m.epoch, d.Epoch)
			}
		}
		return nil
	})
}

// partitionCounts records how many partitions each member owns, sorted.
func partitionCounts(members ...*cgMember) string {
	var out []int
	for _, m := range members {
		out = append(out, len(m.owns()))
	}
	sort.Ints(out)
	return fmt.Sprint(out)
}

func scenarioConsumerHeartbeat(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("cg")
	tg.createTopic(ctx, topic, 4)
	group := tg.name("cg-group")
	m1 := tg.newCGMember(group)
	hb := func(step string, m *cgMember, req *kmsg.ConsumerGroupHeartbeatRequest, base int32) *kmsg.ConsumerGroupHeartbeatResponse {
		r := m.send(ctx, req)
		tr.add(step, "%s", cgResult(r, m, base))
		return r
	}
	bad := func(step string, mut func(*kmsg.ConsumerGroupHeartbeatRequest)) {
		req := m1.joinReq(topic)
		mut(req)
		hb(step, m1, req, 0)
	}
	bad("empty group id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Group = "" })
	bad("empty member id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "" })
	bad("join without a rebalance timeout", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMillis = -1 })
	bad("join owning partitions", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
		r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{Partitions: []int32{0}}}
	})
	bad("join without a subscription", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = nil })
	bad("epoch -3", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -3 })
	bad("epoch -2 without an instance id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -2 })
	bad("a regex that does not compile", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicRegex = kmsg.StringPtr("a(") })
	bad("an unknown server assignor", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = kmsg.StringPtr("sticky") })
	bad("unknown group at epoch 1", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = 1 })

	hb("join", m1, m1.joinReq(topic), 0)
	tg.cgSettle(ctx, m1)
	tr.add("first member settled", "partitions=%v", m1.owns())
	base := m1.epoch
	ahead := m1.hbReq()
	ahead.MemberEpoch = base + 5
	hb("heartbeat ahead of the member epoch", m1, ahead, base)
	hb("heartbeat at the member epoch", m1, m1.hbReq(), base)

	m2 := tg.newCGMember(group)
	hb("second member joins", m2, m2.joinReq(topic), base)
	tg.cgSettle(ctx, m1, m2)
	tr.add("two members settled", "partitions per member %s", partitionCounts(m1, m2))
	tr.add("describe two members", "%s", cgDescribeResult(tg.cgDescribe(ctx, group)))
	base = m1.epoch
	hb("rejoin at epoch 0 with the same member id", m1, m1.joinReq(topic), base)
	tg.cgSettle(ctx, m1, m2)

	leave := m2.hbReq()
	leave.MemberEpoch = -1
	hb("second member leaves", m2, leave, 0)
	gone := m2.hbReq()
	gone.MemberEpoch = base
	hb("heartbeat after leaving", m2, gone, base)
	tg.cgSettle(ctx, m1)
	tr.add("one member left", "partitions=%v", m1.owns())

	// Static members.
	sg := tg.name("cg-static")
	inst := "instance-a"
	s1 := tg.newCGMember(sg)
	s1.instance = &inst
	s1.send(ctx, s1.joinReq(topic))
	tg.cgSettle(ctx, s1)
	sEpoch := s1.epoch
	tmp := s1.hbReq()
	tmp.MemberEpoch = -2
	hb("static member leaves for a while", s1, tmp, 0)
	tr.add("describe after the temporary leave", "%s", cgDescribeResult(tg.cgDescribe(ctx, sg)))
	s2 := tg.newCGMember(sg)
	s2.instance = &inst
	hb("its next incarnation joins", s2, s2.joinReq(topic), sEpoch)
	tg.cgSettle(ctx, s2)
	tr.add("the new incarnation settled", "partitions=%v sameEpoch=%t", s2.owns(), s2.epoch == sEpoch)
	s3 := tg.newCGMember(sg)
	s3.instance = &inst
	hb("a third incarnation while the second is in", s3, s3.joinReq(topic), 0)
	old := s1.hbReq()
	old.MemberEpoch = sEpoch
	hb("the first incarnation heartbeats", s1, old, 0)
	other := "instance-unknown"
	ghost := tg.newCGMember(sg)
	ghost.instance, ghost.epoch = &other, 1
	hb("an unknown instance id at epoch 1", ghost, ghost.hbReq(), 0)

	tr.add("describe an unknown group", "%s", cgDescribeResult(tg.cgDescribe(ctx, tg.name("cg-none"))))
}

// cgCommit commits offset for topic/partition as member at epoch with
// OffsetCommit at version and returns the partition's answer.
func (tg *target) cgCommit(ctx context.Context, version int16, group, member string, epoch int32, topic string, partition int32, offset int64) string {
	tg.t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = group, member, epoch
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = partition, offset, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := tg.send(ctx, version, req).(*kmsg.OffsetCommitResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Sprintf("%d topics answered", len(resp.Topics))
	}
	return errName(resp.Topics[0].Partitions[0].ErrorCode)
}

// cgFetch reads topic/partition's committed offset with OffsetFetch v9 as
// member (nil: none) at epoch.
func (tg *target) cgFetch(ctx context.Context, group string, member *string, epoch int32, topic string, partition int32) string {
	tg.t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group, g.MemberID, g.MemberEpoch = group, member, epoch
	g.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: []int32{partition}}}
	req.Groups = append(req.Groups, g)
	resp := tg.send(ctx, vOffsetFetchEpoch, req).(*kmsg.OffsetFetchResponse)
	if len(resp.Groups) != 1 {
		return fmt.Sprintf("%d groups answered", len(resp.Groups))
	}
	rg := resp.Groups[0]
	if rg.ErrorCode != 0 {
		return "group " + errName(rg.ErrorCode)
	}
	p := rg.Topics[0].Partitions[0]
	return fmt.Sprintf("%s offset=%d", errName(p.ErrorCode), p.Offset)
}

// offsetDelete deletes topic/partition's offset of group.
func (tg *target) offsetDelete(ctx context.Context, group, topic string, partition int32) string {
	tg.t.Helper()
	req := kmsg.NewPtrOffsetDeleteRequest()
	req.Group = group
	req.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: partition}}}}
	resp := tg.send(ctx, vOffsetDelete, req).(*kmsg.OffsetDeleteResponse)
	if resp.ErrorCode != 0 {
		return "top-level " + errName(resp.ErrorCode)
	}
	return errName(resp.Topics[0].Partitions[0].ErrorCode)
}

// deleteGroup deletes one group.
func (tg *target) deleteGroup(ctx context.Context, group string) string {
	tg.t.Helper()
	req := kmsg.NewPtrDeleteGroupsRequest()
	req.Groups = []string{group}
	resp := tg.send(ctx, vDeleteGroups, req).(*kmsg.DeleteGroupsResponse)
	return errName(resp.Groups[0].ErrorCode)
}

// listedGroup lists the groups of the node and records group's entry.
func (tg *target) listedGroup(ctx context.Context, group string, types ...string) string {
	tg.t.Helper()
	req := kmsg.NewPtrListGroupsRequest()
	req.TypesFilter = types
	resp := tg.send(ctx, vListGroups, req).(*kmsg.ListGroupsResponse)
	if resp.ErrorCode != 0 {
		return errName(resp.ErrorCode)
	}
	for _, g := range resp.Groups {
		if g.Group == group {
			return fmt.Sprintf("type=%s protocolType=%q state=%s", g.GroupType, g.ProtocolType, g.GroupState)
		}
	}
	return "not listed"
}

func scenarioConsumerOffsets(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("cgo")
	tg.createTopic(ctx, topic, 2)
	group := tg.name("cgo-group")
	m1 := tg.newCGMember(group)
	m1.send(ctx, m1.joinReq(topic))
	tg.cgSettle(ctx, m1)
	tr.add("member settled", "partitions=%v", m1.owns())
	e := m1.epoch
	commit := func(step string, version int16, member string, epoch int32, partition int32, offset int64) {
		tr.add(step, "%s", tg.cgCommit(ctx, version, group, member, epoch, topic, partition, offset))
	}
	commit("commit at the member epoch", vOffsetCommitEpoch, m1.id, e, 0, 10)
	commit("commit ahead of the member epoch", vOffsetCommitEpoch, m1.id, e+1, 0, 11)
	commit("commit with OffsetCommit v8", 8, m1.id, e, 0, 12)
	commit("commit by an unknown member", vOffsetCommitEpoch, newMemberID(), e, 0, 13)
	commit("commit without a member while members are in", vOffsetCommitEpoch, "", -1, 0, 14)
	id := m1.id
	unknown := newMemberID()
	tr.add("fetch as the member", "%s", tg.cgFetch(ctx, group, &id, e, topic, 0))
	tr.add("fetch as the member at another epoch", "%s", tg.cgFetch(ctx, group, &id, e+1, topic, 0))
	tr.add("fetch as an unknown member", "%s", tg.cgFetch(ctx, group, &unknown, e, topic, 0))
	tr.add("fetch without a member", "%s", tg.cgFetch(ctx, group, nil, -1, topic, 0))

	// A second member takes one partition: m1's epoch moves while it keeps
	// the other (KIP-1251 accepts its commits at the older epoch there).
	m2 := tg.newCGMember(group)
	m2.send(ctx, m2.joinReq(topic))
	tg.cgSettle(ctx, m1, m2)
	tr.add("two members settled", "m1=%v m2=%v", m1.owns(), m2.owns())
	kept := m1.owns()[0]
	lost := m2.owns()[0]
	commit("commit at the previous epoch, for a partition held since", vOffsetCommitEpoch, m1.id, e, kept, 20)
	commit("commit at the previous epoch, for a partition now another's", vOffsetCommitEpoch, m1.id, e, lost, 21)

	txnID := tg.name("cgo-txn")
	pid, pepoch := tg.initTxn(ctx, txnID, 60000)
	tr.add("txn commit at the member epoch", "%s", tg.txnOffsetCommitAs(ctx, vTxnOffsetTV2, txnID, pid, pepoch, group, m1.id, m1.epoch, topic, kept, 30))
	tr.add("txn commit ahead of the member epoch", "%s", tg.txnOffsetCommitAs(ctx, vTxnOffsetTV2, txnID, pid, pepoch, group, m1.id, m1.epoch+1, topic, kept, 31))
	tr.add("txn commit at the previous epoch, for a partition held since", "%s", tg.txnOffsetCommitAs(ctx, vTxnOffsetTV2, txnID, pid, pepoch, group, m1.id, e, topic, kept, 33))
	tr.add("txn commit at the previous epoch, for a partition now another's", "%s", tg.txnOffsetCommitAs(ctx, vTxnOffsetTV2, txnID, pid, pepoch, group, m1.id, e, topic, lost, 34))
	tr.add("fetch as the member at its previous epoch", "%s", tg.cgFetch(ctx, group, &id, e, topic, kept))
	tr.add("txn commit without a member", "%s", tg.txnOffsetCommitAs(ctx, vTxnOffsetTV2, txnID, pid, pepoch, group, "", -1, topic, kept, 32))
	tr.add("end the transaction", "%s", errName(tg.endTxn(ctx, vEndTxnTV2, txnID, pid, pepoch, true).ErrorCode))
	tg.waitTxnSettled(ctx, txnID)
	tr.add("fetch the transactional commit", "%s", tg.cgFetch(ctx, group, nil, -1, topic, kept))

	tr.add("delete the offset of a subscribed topic", "%s", tg.offsetDelete(ctx, group, topic, 0))
	tr.add("delete the group with members", "%s", tg.deleteGroup(ctx, group))
	tr.add("listed while in use", "%s", tg.listedGroup(ctx, group, "consumer"))
	for _, m := range []*cgMember{m1, m2} {
		leave := m.hbReq()
		leave.MemberEpoch = -1
		m.send(ctx, leave)
	}
	tr.add("describe after everyone left", "%s", cgDescribeResult(tg.cgDescribe(ctx, group)))
	tr.add("listed when empty", "%s", tg.listedGroup(ctx, group, "consumer"))
	commit("commit without a member to the empty group", vOffsetCommitEpoch, "", -1, 1, 40)
	tr.add("delete an offset of the empty group", "%s", tg.offsetDelete(ctx, group, topic, 0))
	tr.add("delete the empty group", "%s", tg.deleteGroup(ctx, group))
	tr.add("describe the deleted group", "%s", cgDescribeResult(tg.cgDescribe(ctx, group)))
}

func scenarioConsumerGroupTypes(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("cgt")
	tg.createTopic(ctx, topic, 1)

	// A classic group that only holds offsets converts, keeping them.
	g1 := tg.name("cgt-offsets")
	tr.add("commit to a new group without a member", "%s", tg.cgCommit(ctx, vOffsetCommitEpoch, g1, "", -1, topic, 0, 7))
	tr.add("listed as", "%s", tg.listedGroup(ctx, g1))
	m := tg.newCGMember(g1)
	tr.add("consumer member joins", "%s", cgResult(m.send(ctx, m.joinReq(topic)), m, 0))
	tg.cgSettle(ctx, m)
	tr.add("listed after the join", "%s", tg.listedGroup(ctx, g1))
	tr.add("offsets kept", "%s", tg.cgFetch(ctx, g1, nil, -1, topic, 0))
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{g1}
	dgr := tg.send(ctx, vDescribeGroups, dg).(*kmsg.DescribeGroupsResponse)
	tr.add("DescribeGroups of a consumer group", "%s state=%s", errName(dgr.Groups[0].ErrorCode), dgr.Groups[0].State)

	// A JoinGroup to a consumer group: with members, Kafka takes it in as a
	// classic member; empty, the group becomes classic again.
	join := func(group string) *kmsg.JoinGroupResponse {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = group, 30000, 30000
		req.ProtocolType = "consumer"
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{}}}
		return tg.send(ctx, vJoinGroup, req).(*kmsg.JoinGroupResponse)
	}
	tr.add("JoinGroup to a consumer group with a member", "%s", errName(join(g1).ErrorCode))
	leave := m.hbReq()
	leave.MemberEpoch = -1
	tr.add("the member leaves", "%s", cgResult(m.send(ctx, leave), m, 0))
	tr.add("JoinGroup to the empty consumer group", "%s", errName(join(g1).ErrorCode))
	// The real Kafka lists what its log has committed, a moment later.
	tr.add("listed after the JoinGroup", "%s", tg.eventually(ctx, func() string { return tg.listedGroup(ctx, g1) },
		func(s string) bool { return strings.HasPrefix(s, "type=classic") }))
	tr.add("ConsumerGroupDescribe of a classic group", "%s", cgDescribeResult(tg.cgDescribe(ctx, g1)))

	// A share group's name is not a consumer group's.
	sg := tg.name("cgt-share")
	tg.shareHeartbeat(ctx, sg, newMemberID(), 0, []string{topic})
	s := tg.newCGMember(sg)
	tr.add("consumer member joins a share group", "%s", cgResult(s.send(ctx, s.joinReq(topic)), s, 0))
}
