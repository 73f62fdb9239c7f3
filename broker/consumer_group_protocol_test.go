package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestConsumerGroupHeartbeatValidation(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "v", 1)
	m := newCGMember(t, c, "valid", "m1")
	str := func(s string) *string { return &s }
	cases := []struct {
		name string
		mut  func(r *kmsg.ConsumerGroupHeartbeatRequest)
		err  *kerr.Error
		msg  string
	}{
		{"empty group", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Group = " " }, kerr.InvalidRequest, "GroupId can't be empty."},
		{"v1 empty member id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "" }, kerr.InvalidRequest, "MemberId can't be empty."},
		{"blank instance id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.InstanceID = str("") }, kerr.InvalidRequest, "InstanceId can't be empty."},
		{"blank rack id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RackID = str(" ") }, kerr.InvalidRequest, "RackId can't be empty."},
		{"join without rebalance timeout", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMillis = -1 }, kerr.InvalidRequest, "RebalanceTimeoutMs must be provided in first request."},
		{"join with owned partitions", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{Partitions: []int32{0}}}
		}, kerr.InvalidRequest, "TopicPartitions must be empty when (re-)joining."},
		{"join with null owned partitions", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Topics = nil }, kerr.InvalidRequest, "TopicPartitions must be empty when (re-)joining."},
		{"join without subscription", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = nil }, kerr.InvalidRequest, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."},
		{"static leave without instance", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -2 }, kerr.InvalidRequest, "InstanceId can't be null."},
		{"epoch below -2", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -3 }, kerr.InvalidRequest, "MemberEpoch is invalid."},
		{"bad regex", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicRegex = str("v(") }, kerr.InvalidRegularExpression, ""},
		{"unknown assignor", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = str("sticky") }, kerr.UnsupportedAssignor, "ServerAssignor sticky is not supported. Supported assignors: uniform, range."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := m.joinReq("v")
			tc.mut(req)
			resp := m.expect(req, tc.err)
			if tc.msg != "" {
				require.NotNil(t, resp.ErrorMessage)
				require.Equal(t, tc.msg, *resp.ErrorMessage)
			}
		})
	}
	t.Run("not coordinator", func(t *testing.T) {
		other := (groupCoordinatorNode(t, c, "valid") + 1) % 2
		resp := cgSend(t, c, other, m.joinReq("v"))
		require.ErrorIs(t, kerr.ErrorForCode(resp.ErrorCode), kerr.NotCoordinator)
	})
	t.Run("v0 joins without a member id and gets one", func(t *testing.T) {
		req := m.joinReq("v")
		req.Version, req.MemberID, req.Group = 0, "", "valid-v0"
		resp := cgSend(t, c, groupCoordinatorNode(t, c, "valid-v0"), req)
		require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
		require.NotNil(t, resp.MemberID)
		require.Len(t, *resp.MemberID, 22, "a UUID in Kafka's base64 form")
		require.Equal(t, int32(2), resp.MemberEpoch, "a new group's first member: one epoch for its subscription, one for the topics' metadata")
	})
	require.Equal(t, 0, c.handlerPanics)
}

// TestConsumerGroupRevokeBeforeAssign walks two members through a
// rebalance: the second joiner waits for the partitions the first still
// holds, the first revokes before it takes the new epoch, and only then
// does the second get them.
func TestConsumerGroupRevokeBeforeAssign(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "rb", 4)
	m1, m2 := newCGMember(t, c, "rb-group", "m1"), newCGMember(t, c, "rb-group", "m2")

	r := m1.join("rb")
	require.Equal(t, int32(2), r.MemberEpoch, "a new group's subscription and metadata each move the epoch")
	require.Equal(t, []int32{0, 1, 2, 3}, m1.partitionsOf("rb"))

	r = m2.join("rb")
	require.Equal(t, int32(3), r.MemberEpoch, "the join moved the group epoch")
	require.NotNil(t, r.Assignment, "a full request gets its assignment")
	require.Empty(t, m2.partitionsOf("rb"), "m1 still holds m2's target")
	d := cgDescribe(t, c, "rb-group")
	require.Equal(t, cgStateReconciling, d.State)
	require.Equal(t, int32(3), d.Epoch)
	require.Equal(t, int32(3), d.AssignmentEpoch)

	r = m1.heartbeat()
	require.Equal(t, int32(2), r.MemberEpoch, "m1 must revoke before it takes epoch 3")
	require.Equal(t, []int32{0, 1}, m1.partitionsOf("rb"), "sticky: m1 keeps the first half")

	r = m2.heartbeat()
	require.Nil(t, r.Assignment, "nothing changed for m2 while m1 has not revoked")
	require.Empty(t, m2.partitionsOf("rb"))

	r = m1.heartbeat() // now owns only 0 and 1
	require.Equal(t, int32(3), r.MemberEpoch)
	require.Nil(t, r.Assignment, "m1's assignment did not change")

	r = m2.heartbeat()
	require.Equal(t, int32(3), r.MemberEpoch)
	require.Equal(t, []int32{2, 3}, m2.partitionsOf("rb"))
	d = cgDescribe(t, c, "rb-group")
	require.Equal(t, cgStateStable, d.State)
	require.Len(t, d.Members, 2)
	for _, dm := range d.Members {
		require.Equal(t, int8(1), dm.MemberType)
		require.Equal(t, dm.Assignment, dm.TargetAssignment)
		require.Equal(t, "rb", dm.Assignment.TopicPartitions[0].Topic)
	}

	// A heartbeat at the previous epoch owning a subset is accepted (the
	// answer that raised the epoch was lost); anything else is fenced.
	prev := m2.hbReq()
	prev.MemberEpoch = 2
	m2.expect(prev, kerr.FencedMemberEpoch) // m2 never had epoch 2
	ahead := m1.hbReq()
	ahead.MemberEpoch = 7
	m1.expect(ahead, kerr.FencedMemberEpoch)
	lost := m1.hbReq()
	lost.MemberEpoch = 2
	require.Equal(t, int32(3), m1.do(lost).MemberEpoch)
	notSubset := m1.hbReq()
	notSubset.MemberEpoch = 2
	notSubset.Topics[0].Partitions = []int32{0, 1, 2}
	m1.expect(notSubset, kerr.FencedMemberEpoch)

	// m2 leaves: its partitions go back to m1 at the next epoch.
	leave := m2.hbReq()
	leave.MemberEpoch = -1
	r = m2.send(leave)
	require.NoError(t, kerr.ErrorForCode(r.ErrorCode))
	require.Equal(t, int32(-1), r.MemberEpoch)
	r = m1.heartbeat()
	require.Equal(t, int32(4), r.MemberEpoch)
	require.Equal(t, []int32{0, 1, 2, 3}, m1.partitionsOf("rb"))
	m2.expect(m2.hbReq(), kerr.UnknownMemberID)
	require.Equal(t, 0, c.handlerPanics)
}

// TestConsumerGroupOffsets commits with member epochs: current epoch,
// ahead (STALE_MEMBER_EPOCH), behind for a partition held since then
// (KIP-1251: accepted) or assigned later (stale), OffsetCommit below v9,
// unknown members, and the OffsetFetch v9 checks.
func TestConsumerGroupOffsets(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "off", 4)
	m1, m2 := newCGMember(t, c, "off-group", "m1"), newCGMember(t, c, "off-group", "m2")
	m1.join("off")
	m2.join("off")
	m1.heartbeat()
	m1.heartbeat()
	m2.heartbeat()
	require.Equal(t, []int32{0, 1}, m1.partitionsOf("off"))
	require.Equal(t, []int32{2, 3}, m2.partitionsOf("off"))
	require.Equal(t, int32(3), m1.epoch)

	require.NoError(t, cgCommit(t, c, 9, "off-group", "m1", 3, "off", 0, 10))
	require.ErrorIs(t, cgCommit(t, c, 9, "off-group", "m1", 4, "off", 0, 11), kerr.StaleMemberEpoch)
	require.NoError(t, cgCommit(t, c, 9, "off-group", "m1", 2, "off", 0, 12), "partition 0 was m1's since epoch 2")
	require.ErrorIs(t, cgCommit(t, c, 9, "off-group", "m2", 2, "off", 2, 13), kerr.StaleMemberEpoch, "m2 got partition 2 at epoch 3")
	require.ErrorIs(t, cgCommit(t, c, 9, "off-group", "m1", 2, "off", 2, 13), kerr.StaleMemberEpoch, "not m1's partition")
	require.ErrorIs(t, cgCommit(t, c, 8, "off-group", "m1", 3, "off", 0, 14), kerr.UnsupportedVersion)
	require.ErrorIs(t, cgCommit(t, c, 9, "off-group", "nobody", 3, "off", 0, 15), kerr.UnknownMemberID)
	require.ErrorIs(t, cgCommit(t, c, 9, "off-group", "", -1, "off", 0, 16), kerr.UnknownMemberID, "no admin commits while members are in")

	err, off := cgFetch(t, c, "off-group", nil, -1, "off", 0)
	require.NoError(t, err)
	require.Equal(t, int64(12), off)
	m1id := "m1"
	err, off = cgFetch(t, c, "off-group", &m1id, 3, "off", 0)
	require.NoError(t, err)
	require.Equal(t, int64(12), off)
	err, _ = cgFetch(t, c, "off-group", &m1id, 2, "off", 0)
	require.ErrorIs(t, err, kerr.StaleMemberEpoch)
	nobody := "nobody"
	err, _ = cgFetch(t, c, "off-group", &nobody, 3, "off", 0)
	require.ErrorIs(t, err, kerr.UnknownMemberID)

	// OffsetDelete keeps the offsets of subscribed topics; DeleteGroups
	// refuses a group with members.
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "off-group"
	od.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "off", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
	odr := groupAwait(t, groupSend(t, c, groupCoordinatorNode(t, c, "off-group"), od)).(*kmsg.OffsetDeleteResponse)
	require.Zero(t, odr.ErrorCode)
	require.ErrorIs(t, kerr.ErrorForCode(odr.Topics[0].Partitions[0].ErrorCode), kerr.GroupSubscribedToTopic)
	require.ErrorIs(t, deleteGroupErr(t, c, "off-group"), kerr.NonEmptyGroup)

	for _, m := range []*cgMember{m1, m2} {
		leave := m.hbReq()
		leave.MemberEpoch = -1
		require.Zero(t, m.send(leave).ErrorCode)
	}
	require.Equal(t, cgStateEmpty, cgDescribe(t, c, "off-group").State)
	require.NoError(t, cgCommit(t, c, 9, "off-group", "", -1, "off", 1, 20), "an empty group takes admin commits")
	odr = groupAwait(t, groupSend(t, c, groupCoordinatorNode(t, c, "off-group"), od)).(*kmsg.OffsetDeleteResponse)
	require.Zero(t, odr.Topics[0].Partitions[0].ErrorCode, "no member subscribes any more")
	require.NoError(t, deleteGroupErr(t, c, "off-group"))
	d := cgDescribe(t, c, "off-group")
	require.ErrorIs(t, kerr.ErrorForCode(d.ErrorCode), kerr.GroupIDNotFound)
	require.Equal(t, 0, c.handlerPanics)
}

func deleteGroupErr(t testing.TB, c *Cluster, group string) error {
	t.Helper()
	req := kmsg.NewPtrDeleteGroupsRequest()
	req.Groups = []string{group}
	resp := groupAwait(t, groupSend(t, c, groupCoordinatorNode(t, c, group), req)).(*kmsg.DeleteGroupsResponse)
	return kerr.ErrorForCode(resp.Groups[0].ErrorCode)
}

// TestConsumerGroupStaticMembers: a static member that leaves with epoch
// -2 keeps its partitions for its next incarnation, which takes them over
// without a new group epoch; the instance id is refused while held, and
// a member whose session times out is gone.
func TestConsumerGroupStaticMembers(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "st", 2)
	inst := "instance-a"
	a1 := newCGMember(t, c, "st-group", "a1")
	a1.instance = &inst
	b := newCGMember(t, c, "st-group", "b")
	a1.join("st")
	b.join("st")
	a1.heartbeat()
	a1.heartbeat()
	b.heartbeat()
	require.Len(t, a1.partitionsOf("st"), 1)
	require.Len(t, b.partitionsOf("st"), 1)
	epoch := cgDescribe(t, c, "st-group").Epoch

	leave := a1.hbReq()
	leave.MemberEpoch = -2
	r := a1.send(leave)
	require.Zero(t, r.ErrorCode)
	require.Equal(t, int32(-2), r.MemberEpoch)
	d := cgDescribe(t, c, "st-group")
	require.Equal(t, epoch, d.Epoch, "a temporary leave does not rebalance")
	require.Equal(t, cgStateReconciling, d.State)

	a2 := newCGMember(t, c, "st-group", "a2")
	a2.instance = &inst
	r = a2.join("st")
	require.Equal(t, epoch, r.MemberEpoch, "the new incarnation takes the group epoch at once")
	require.Equal(t, a1.partitionsOf("st"), a2.partitionsOf("st"), "and inherits the assignment")
	d = cgDescribe(t, c, "st-group")
	require.Equal(t, epoch, d.Epoch)
	require.Equal(t, cgStateStable, d.State)
	require.Len(t, d.Members, 2)

	a3 := newCGMember(t, c, "st-group", "a3")
	a3.instance = &inst
	a3.expect(a3.joinReq("st"), kerr.UnreleasedInstanceID)
	a1.expect(a1.hbReq(), kerr.FencedInstanceID)
	other := "instance-unknown"
	ghost := newCGMember(t, c, "st-group", "ghost")
	ghost.instance, ghost.epoch = &other, 3
	ghost.expect(ghost.hbReq(), kerr.UnknownMemberID)

	// a2 leaves for a while and never comes back: its session ends and b
	// gets everything.
	leave = a2.hbReq()
	leave.MemberEpoch = -2
	require.Zero(t, a2.send(leave).ErrorCode)
	b.heartbeat()
	require.Len(t, b.partitionsOf("st"), 1, "the partitions wait for the instance")
	cgAge(t, c, "st-group", "a2", time.Minute)
	cgTick(t, c, 0)
	b.heartbeat()
	require.Equal(t, []int32{0, 1}, b.partitionsOf("st"))
	require.Greater(t, cgDescribe(t, c, "st-group").Epoch, epoch)
	require.Equal(t, 0, c.handlerPanics)
}

// TestConsumerGroupTimeouts fences a member that stops heartbeating and
// one that does not revoke within its rebalance timeout.
func TestConsumerGroupTimeouts(t *testing.T) {
	// The session timeout is below the ten minutes after which an empty
	// group without offsets is deleted (group_expiry.go), so that the
	// group is still there, Empty, once its last session ends.
	c := newTestCluster(t, Nodes(1), ConsumerGroupSessionTimeout(time.Minute))
	createTopic(t, c, "to", 2)
	m1, m2 := newCGMember(t, c, "to-group", "m1"), newCGMember(t, c, "to-group", "m2")
	req := m1.joinReq("to")
	req.RebalanceTimeoutMillis = 1000
	m1.do(req)
	m2.join("to")
	m1.heartbeat() // told to revoke one partition, which it never does
	require.Len(t, m1.partitionsOf("to"), 1)
	cgTick(t, c, 500*time.Millisecond)
	require.Len(t, cgDescribe(t, c, "to-group").Members, 2, "within the rebalance timeout")
	cgTick(t, c, 2*time.Second)
	d := cgDescribe(t, c, "to-group")
	require.Len(t, d.Members, 1, "fenced for not revoking")
	require.Equal(t, "m2", d.Members[0].MemberID)
	m2.heartbeat()
	require.Equal(t, []int32{0, 1}, m2.partitionsOf("to"))

	cgTick(t, c, 2*time.Minute)
	require.Equal(t, cgStateEmpty, cgDescribe(t, c, "to-group").State, "session timed out")
	m2.expect(m2.hbReq(), kerr.UnknownMemberID)
}

// TestConsumerGroupTypes: which type a group is, as Kafka decides it.
func TestConsumerGroupTypes(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "ty", 1)

	// A classic group that only holds offsets converts, offsets kept.
	require.NoError(t, cgCommit(t, c, 9, "ty-offsets", "", -1, "ty", 0, 7))
	m := newCGMember(t, c, "ty-offsets", "m")
	m.join("ty")
	err, off := cgFetch(t, c, "ty-offsets", nil, -1, "ty", 0)
	require.NoError(t, err)
	require.Equal(t, int64(7), off)
	require.Equal(t, map[string]string{"ty-offsets": "consumer"}, listGroupTypes(t, c, "ty-offsets"))

	// A consumer group with members refuses classic members; once empty
	// a JoinGroup turns it back into a classic group.
	node := groupCoordinatorNode(t, c, "ty-offsets")
	join := groupAwait(t, groupSend(t, c, node, groupJoinReq(9, "ty-offsets", "", time.Minute, time.Minute))).(*kmsg.JoinGroupResponse)
	require.ErrorIs(t, kerr.ErrorForCode(join.ErrorCode), kerr.InconsistentGroupProtocol)
	leave := m.hbReq()
	leave.MemberEpoch = -1
	require.Zero(t, m.send(leave).ErrorCode)
	first := groupAwait(t, groupSend(t, c, node, groupJoinReq(9, "ty-offsets", "", time.Minute, time.Minute))).(*kmsg.JoinGroupResponse)
	require.ErrorIs(t, kerr.ErrorForCode(first.ErrorCode), kerr.MemberIDRequired)
	require.Equal(t, map[string]string{"ty-offsets": "classic"}, listGroupTypes(t, c, "ty-offsets"),
		"the first JoinGroup converts the group, even when it answers MEMBER_ID_REQUIRED")
	joined := groupJoined(t, groupSend(t, c, node, groupJoinReq(9, "ty-offsets", first.MemberID, time.Minute, time.Minute)))
	require.Equal(t, map[string]string{"ty-offsets": "classic"}, listGroupTypes(t, c, "ty-offsets"))
	err, off = cgFetch(t, c, "ty-offsets", nil, -1, "ty", 0)
	require.NoError(t, err)
	require.Equal(t, int64(7), off, "the offsets survive both conversions")

	// A classic group with members is not a consumer group.
	m2 := newCGMember(t, c, "ty-offsets", "m2")
	r := m2.expect(m2.joinReq("ty"), kerr.GroupIDNotFound)
	require.Equal(t, "Group ty-offsets is not a consumer group.", *r.ErrorMessage)
	d := cgDescribe(t, c, "ty-offsets")
	require.ErrorIs(t, kerr.ErrorForCode(d.ErrorCode), kerr.GroupIDNotFound)
	require.NotEmpty(t, joined.MemberID)

	// Unknown groups: joining creates one, other epochs do not.
	ghost := newCGMember(t, c, "ty-none", "g")
	ghost.epoch = 1
	ghost.expect(ghost.hbReq(), kerr.GroupIDNotFound)
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Version = 5
	dg.Groups = []string{"ty-dg"}
	mg := newCGMember(t, c, "ty-dg", "m")
	mg.join("ty")
	dgr := groupAwait(t, groupSend(t, c, groupCoordinatorNode(t, c, "ty-dg"), dg)).(*kmsg.DescribeGroupsResponse)
	require.Equal(t, "Dead", dgr.Groups[0].State, "DescribeGroups does not describe consumer groups")
	require.Equal(t, 0, c.handlerPanics)
}

// listGroupTypes lists the type of the named groups, asking every node.
func listGroupTypes(t testing.TB, c *Cluster, names ...string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	for _, n := range c.NodeIDs() {
		req := kmsg.NewPtrListGroupsRequest()
		req.Version = 5
		resp := groupAwait(t, groupSend(t, c, n, req)).(*kmsg.ListGroupsResponse)
		for _, g := range resp.Groups {
			for _, want := range names {
				if g.Group == want {
					out[g.Group] = g.GroupType
					if g.GroupType == "consumer" {
						require.Equal(t, "consumer", g.ProtocolType)
					}
				}
			}
		}
	}
	return out
}

// TestConsumerGroupRegex subscribes by regular expression: topics are
// matched whole (not by substring), a new matching topic moves the epoch
// at the next heartbeat, and a subscription by name and by regex add up.
func TestConsumerGroupRegex(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	createTopic(t, c, "rx-a", 1)
	createTopic(t, c, "rx-b", 2)
	createTopic(t, c, "xrx-a", 1)
	createTopic(t, c, "named", 1)
	m := newCGMember(t, c, "rx-group", "m")
	req := m.joinReq("named")
	expr := "rx-.*"
	req.SubscribedTopicRegex = &expr
	m.do(req)
	require.Equal(t, []int32{0}, m.partitionsOf("rx-a"))
	require.Equal(t, []int32{0, 1}, m.partitionsOf("rx-b"))
	require.Equal(t, []int32{0}, m.partitionsOf("named"))
	require.Empty(t, m.partitionsOf("xrx-a"), "the regex matches whole names")
	epoch := m.epoch

	createTopic(t, c, "rx-c", 1)
	r := m.heartbeat()
	require.Equal(t, epoch+1, r.MemberEpoch, "a new matching topic moved the epoch")
	require.Equal(t, []int32{0}, m.partitionsOf("rx-c"))
	d := cgDescribe(t, c, "rx-group")
	require.Equal(t, expr, *d.Members[0].SubscribedTopicRegex)
	require.Equal(t, []string{"named"}, d.Members[0].SubscribedTopics)
	require.Equal(t, 0, c.handlerPanics)
}

// TestConsumerGroupCoordinatorMove: a new coordinator rebuilds consumer
// groups from __consumer_offsets: members, epochs, assignments (a member
// mid-revocation included) and the group type.
func TestConsumerGroupCoordinatorMove(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "mv", 4)
	m1, m2 := newCGMember(t, c, "mv-group", "m1"), newCGMember(t, c, "mv-group", "m2")
	m1.join("mv")
	m2.join("mv")
	m1.heartbeat() // m1 is revoking 2 and 3
	before := cgDescribe(t, c, "mv-group")
	require.NoError(t, cgCommit(t, c, 9, "mv-group", "m1", m1.epoch, "mv", 0, 5))

	old := groupCoordinatorNode(t, c, "mv-group")
	groupMoveCoordinator(t, c, "mv-group")
	resp := cgSend(t, c, old, m1.hbReq())
	require.ErrorIs(t, kerr.ErrorForCode(resp.ErrorCode), kerr.NotCoordinator)
	after := cgDescribe(t, c, "mv-group")
	require.Equal(t, before, after, "the new coordinator describes the same group")

	m1.heartbeat() // revoked: takes epoch 3
	require.Equal(t, int32(3), m1.epoch)
	m2.heartbeat()
	require.Equal(t, []int32{2, 3}, m2.partitionsOf("mv"))
	err, off := cgFetch(t, c, "mv-group", nil, -1, "mv", 0)
	require.NoError(t, err)
	require.Equal(t, int64(5), off)
	require.Equal(t, cgStateStable, cgDescribe(t, c, "mv-group").State)
	require.Equal(t, 0, c.handlerPanics)
}

// TestConsumerGroupTxnOffsetCommit commits a consumer group's offsets in a
// transaction with the member epoch as the generation: checked like
// OffsetCommit (any version: transactional commits are exempt from the v9
// rule; one without member and generation is accepted; a stale epoch is
// ILLEGAL_GENERATION), invisible until the transaction commits.
func TestConsumerGroupTxnOffsetCommit(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "in", 1)
	m := newCGMember(t, c, "txn848", "m")
	m.join("in")
	p := groupTxnInit(t, c, "txn848-id")

	require.ErrorIs(t, p.commitOffsets(t, c, 5, "txn848", "m", m.epoch+1, "in", 3), kerr.IllegalGeneration,
		"a stale epoch reads ILLEGAL_GENERATION in a transaction, as Kafka maps it")
	require.ErrorIs(t, p.commitOffsets(t, c, 5, "txn848", "ghost", m.epoch, "in", 3), kerr.UnknownMemberID)
	require.NoError(t, p.commitOffsets(t, c, 5, "txn848", "", -1, "in", 4), "a transactional commit need not say who commits")
	require.NoError(t, p.commitOffsets(t, c, 5, "txn848", "m", m.epoch, "in", 5))
	require.Equal(t, groupFetched{offset: -1}, groupFetchOne(t, c, "txn848", "in", false))
	p.end(t, c, true)
	require.Equal(t, groupFetched{offset: 5}, groupFetchOne(t, c, "txn848", "in", true))
}
