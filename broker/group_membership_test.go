package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	groupTestSession   = 30 * time.Second
	groupTestRebalance = 30 * time.Second
)

// groupStableOne makes a one-member stable group and returns the member id
// and generation.
func groupStableOne(t *testing.T, c *Cluster, node int32, group string) (string, int32) {
	t.Helper()
	joined := groupJoined(t, groupJoin(t, c, node, groupJoinReq(9, group, "", groupTestSession, groupTestRebalance)))
	require.Equal(t, joined.MemberID, joined.LeaderID)
	sync := groupAwait(t, groupSend(t, c, node, groupSyncReq(group, joined.MemberID, joined.Generation, map[string]string{joined.MemberID: "all"}))).(*kmsg.SyncGroupResponse)
	require.NoError(t, kerr.ErrorForCode(sync.ErrorCode))
	require.Equal(t, "all", string(sync.MemberAssignment))
	return joined.MemberID, joined.Generation
}

func TestGroupJoinMemberIDRequiredThenStable(t *testing.T) {
	c := newTestCluster(t)
	const group = "g-single"
	node := groupCoordinatorNode(t, c, group)

	first := groupAwait(t, groupSend(t, c, node, groupJoinReq(9, group, "", groupTestSession, groupTestRebalance))).(*kmsg.JoinGroupResponse)
	require.ErrorIs(t, kerr.ErrorForCode(first.ErrorCode), kerr.MemberIDRequired)
	require.Contains(t, first.MemberID, "group-test-")

	// An unknown member id is refused; the handed-out one is accepted.
	unknown := groupAwait(t, groupSend(t, c, node, groupJoinReq(9, group, "nobody", groupTestSession, groupTestRebalance))).(*kmsg.JoinGroupResponse)
	require.ErrorIs(t, kerr.ErrorForCode(unknown.ErrorCode), kerr.UnknownMemberID)
	joined := groupJoined(t, groupSend(t, c, node, groupJoinReq(9, group, first.MemberID, groupTestSession, groupTestRebalance)))
	require.Equal(t, first.MemberID, joined.MemberID)
	require.Equal(t, joined.MemberID, joined.LeaderID)
	require.Equal(t, int32(1), joined.Generation)
	require.Equal(t, "range", *joined.Protocol)
	require.Len(t, joined.Members, 1)
	require.Equal(t, "meta-range", string(joined.Members[0].ProtocolMetadata))

	require.Equal(t, "CompletingRebalance", groupDescribe(t, c, node, group).State)
	sync := groupAwait(t, groupSend(t, c, node, groupSyncReq(group, joined.MemberID, 1, map[string]string{joined.MemberID: "p0"}))).(*kmsg.SyncGroupResponse)
	require.NoError(t, kerr.ErrorForCode(sync.ErrorCode))
	require.Equal(t, "p0", string(sync.MemberAssignment))
	require.NoError(t, groupHeartbeat(t, c, node, group, joined.MemberID, 1))
	require.ErrorIs(t, groupHeartbeat(t, c, node, group, joined.MemberID, 7), kerr.IllegalGeneration)

	d := groupDescribe(t, c, node, group)
	require.Equal(t, "Stable", d.State)
	require.Equal(t, "consumer", d.ProtocolType)
	require.Equal(t, "range", d.Protocol)
	require.Len(t, d.Members, 1)
	require.Equal(t, "p0", string(d.Members[0].MemberAssignment))
}

func TestGroupRebalanceWaitsForEveryMember(t *testing.T) {
	c := newTestCluster(t)
	const group = "g-two"
	node := groupCoordinatorNode(t, c, group)
	a, gen := groupStableOne(t, c, node, group)

	// B joins with v3 (no MEMBER_ID_REQUIRED): its answer waits for A.
	bJoin := groupSend(t, c, node, groupJoinReq(3, group, "", groupTestSession, groupTestRebalance))
	groupRequireWaiting(t, bJoin)
	require.ErrorIs(t, groupHeartbeat(t, c, node, group, a, gen), kerr.RebalanceInProgress)
	require.Equal(t, "PreparingRebalance", groupDescribe(t, c, node, group).State)

	aJoined := groupJoined(t, groupSend(t, c, node, groupJoinReq(9, group, a, groupTestSession, groupTestRebalance)))
	bJoined := groupJoined(t, bJoin)
	require.Equal(t, gen+1, aJoined.Generation)
	require.Equal(t, gen+1, bJoined.Generation)
	require.Equal(t, a, aJoined.LeaderID, "the leader that rejoined stays leader")
	require.Equal(t, a, bJoined.LeaderID)
	require.Len(t, aJoined.Members, 2, "the leader learns every member")
	require.Empty(t, bJoined.Members, "followers learn no members")

	// B's SyncGroup waits for the leader's assignments.
	b := bJoined.MemberID
	bSync := groupSend(t, c, node, groupSyncReq(group, b, bJoined.Generation, nil))
	groupRequireWaiting(t, bSync)
	aSync := groupAwait(t, groupSend(t, c, node, groupSyncReq(group, a, aJoined.Generation, map[string]string{a: "p0", b: "p1"}))).(*kmsg.SyncGroupResponse)
	require.Equal(t, "p0", string(aSync.MemberAssignment))
	bSynced := groupAwait(t, bSync).(*kmsg.SyncGroupResponse)
	require.NoError(t, kerr.ErrorForCode(bSynced.ErrorCode))
	require.Equal(t, "p1", string(bSynced.MemberAssignment))
	require.Equal(t, "Stable", groupDescribe(t, c, node, group).State)

	// A stale generation cannot sync.
	stale := groupAwait(t, groupSend(t, c, node, groupSyncReq(group, b, gen, nil))).(*kmsg.SyncGroupResponse)
	require.ErrorIs(t, kerr.ErrorForCode(stale.ErrorCode), kerr.IllegalGeneration)
}

func TestGroupJoinWindowDropsMembersThatDoNotRejoin(t *testing.T) {
	c := newTestCluster(t)
	const group = "g-window"
	node := groupCoordinatorNode(t, c, group)
	a, gen := groupStableOne(t, c, node, group)

	// A never rejoins: when the join window closes, B's join completes
	// without it and B leads.
	bJoin := groupJoin(t, c, node, groupJoinReq(9, group, "", groupTestSession, groupTestRebalance))
	groupRequireWaiting(t, bJoin)
	groupCloseWindows(t, c, group)
	bJoined := groupJoined(t, bJoin)
	require.Equal(t, bJoined.MemberID, bJoined.LeaderID)
	require.Len(t, bJoined.Members, 1)
	require.ErrorIs(t, groupHeartbeat(t, c, node, group, a, gen), kerr.UnknownMemberID)
}

func TestGroupLeaderThatNeverSyncsIsRemoved(t *testing.T) {
	c := newTestCluster(t)
	const group = "g-nosync"
	node := groupCoordinatorNode(t, c, group)
	leader := groupJoined(t, groupSend(t, c, node, groupJoinReq(3, group, "", groupTestSession, groupTestRebalance)))
	followerJoin := groupSend(t, c, node, groupJoinReq(3, group, "", groupTestSession, groupTestRebalance))
	groupRequireWaiting(t, followerJoin)
	groupJoined(t, groupSend(t, c, node, groupJoinReq(3, group, leader.MemberID, groupTestSession, groupTestRebalance)))
	follower := groupJoined(t, followerJoin)

	// The leader never sends its assignments: when the sync window
	// closes it is removed, and the waiting follower must rejoin.
	waiting := groupSend(t, c, node, groupSyncReq(group, follower.MemberID, follower.Generation, nil))
	groupRequireWaiting(t, waiting)
	groupCloseWindows(t, c, group)
	synced := groupAwait(t, waiting).(*kmsg.SyncGroupResponse)
	require.ErrorIs(t, kerr.ErrorForCode(synced.ErrorCode), kerr.RebalanceInProgress)
	rejoined := groupJoined(t, groupSend(t, c, node, groupJoinReq(3, group, follower.MemberID, groupTestSession, groupTestRebalance)))
	require.Equal(t, follower.MemberID, rejoined.LeaderID)
	require.Len(t, rejoined.Members, 1)
}

func TestGroupSessionExpiryEmptiesGroup(t *testing.T) {
	c := newTestCluster(t)
	const group = "g-expire"
	node := groupCoordinatorNode(t, c, group)
	member, gen := groupStableOne(t, c, node, group)

	// The member stops heartbeating; its session ends at the next sweep.
	groupEndSessions(t, c, group)
	require.Eventually(t, func() bool { return groupDescribe(t, c, node, group).State == "Empty" }, 30*time.Second, 20*time.Millisecond)
	require.ErrorIs(t, groupHeartbeat(t, c, node, group, member, gen), kerr.UnknownMemberID)
	d := groupDescribe(t, c, node, group)
	require.Empty(t, d.Members)
	require.Equal(t, "consumer", d.ProtocolType, "an empty group keeps its protocol type")
}

func TestGroupLeaveBatched(t *testing.T) {
	c := newTestCluster(t)
	const group = "g-leave"
	node := groupCoordinatorNode(t, c, group)
	a, _ := groupStableOne(t, c, node, group)

	// A static member joins: its answer waits for A to rejoin, which A
	// never does; the batched leave removes both, which ends the join.
	instance := "instance-1"
	staticReq := groupJoinReq(9, group, "", groupTestSession, groupTestRebalance)
	staticReq.InstanceID = &instance
	staticJoin := groupSend(t, c, node, staticReq)
	groupRequireWaiting(t, staticJoin)

	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Version = 5
	leave.Group = group
	leave.Members = []kmsg.LeaveGroupRequestMember{
		{MemberID: a},
		{InstanceID: &instance},
		{MemberID: "ghost"},
	}
	resp := groupAwait(t, groupSend(t, c, node, leave)).(*kmsg.LeaveGroupResponse)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	require.Len(t, resp.Members, 3)
	require.NoError(t, kerr.ErrorForCode(resp.Members[0].ErrorCode))
	require.NoError(t, kerr.ErrorForCode(resp.Members[1].ErrorCode))
	require.ErrorIs(t, kerr.ErrorForCode(resp.Members[2].ErrorCode), kerr.UnknownMemberID)

	left := groupAwait(t, staticJoin).(*kmsg.JoinGroupResponse)
	require.ErrorIs(t, kerr.ErrorForCode(left.ErrorCode), kerr.UnknownMemberID)
	require.Equal(t, "Empty", groupDescribe(t, c, node, group).State)

	// v0-2 carry one member and answer with the top-level error.
	old := kmsg.NewPtrLeaveGroupRequest()
	old.Version = 1
	old.Group, old.MemberID = group, a
	oldResp := groupAwait(t, groupSend(t, c, node, old)).(*kmsg.LeaveGroupResponse)
	require.ErrorIs(t, kerr.ErrorForCode(oldResp.ErrorCode), kerr.UnknownMemberID)
}

func TestGroupStaticMemberRestartFencesOldID(t *testing.T) {
	c := newTestCluster(t)
	const group = "g-static"
	node := groupCoordinatorNode(t, c, group)
	leader, _ := groupStableOne(t, c, node, group)

	instance := "instance-a"
	req := groupJoinReq(9, group, "", groupTestSession, groupTestRebalance)
	req.InstanceID = &instance
	join := groupSend(t, c, node, req)
	leaderJoined := groupJoined(t, groupSend(t, c, node, groupJoinReq(9, group, leader, groupTestSession, groupTestRebalance)))
	followerJoined := groupJoined(t, join)
	old := followerJoined.MemberID
	require.Contains(t, old, instance+"-")
	groupAwait(t, groupSend(t, c, node, groupSyncReq(group, leader, leaderJoined.Generation, map[string]string{leader: "p0", old: "p1"})))

	// The instance restarts: a new member id, the same generation and
	// assignment, no rebalance; the old id is fenced.
	restarted := groupJoined(t, groupSend(t, c, node, req))
	require.NotEqual(t, old, restarted.MemberID)
	require.Equal(t, leaderJoined.Generation, restarted.Generation)
	sync := groupSyncReq(group, restarted.MemberID, restarted.Generation, nil)
	sync.InstanceID = &instance
	synced := groupAwait(t, groupSend(t, c, node, sync)).(*kmsg.SyncGroupResponse)
	require.NoError(t, kerr.ErrorForCode(synced.ErrorCode))
	require.Equal(t, "p1", string(synced.MemberAssignment))
	require.Equal(t, "Stable", groupDescribe(t, c, node, group).State)

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version = 4
	hb.Group, hb.MemberID, hb.Generation, hb.InstanceID = group, old, restarted.Generation, &instance
	require.ErrorIs(t, kerr.ErrorForCode(groupAwait(t, groupSend(t, c, node, hb)).(*kmsg.HeartbeatResponse).ErrorCode), kerr.FencedInstanceID)
}

func TestGroupJoinValidation(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	const group = "g-validate"
	node := groupCoordinatorNode(t, c, group)
	joinErr := func(n int32, req *kmsg.JoinGroupRequest) error {
		return kerr.ErrorForCode(groupAwait(t, groupSend(t, c, n, req)).(*kmsg.JoinGroupResponse).ErrorCode)
	}
	require.ErrorIs(t, joinErr((node+1)%2, groupJoinReq(9, group, "", groupTestSession, groupTestRebalance)), kerr.NotCoordinator)
	require.ErrorIs(t, joinErr(node, groupJoinReq(9, group, "", 0, groupTestRebalance)), kerr.InvalidSessionTimeout)
	require.ErrorIs(t, joinErr(node, groupJoinReq(9, group, "", time.Hour, groupTestRebalance)), kerr.InvalidSessionTimeout)
	require.ErrorIs(t, joinErr(node, groupJoinReq(9, "", "", groupTestSession, groupTestRebalance)), kerr.InvalidGroupID)
	noProtocols := groupJoinReq(9, group, "", groupTestSession, groupTestRebalance)
	noProtocols.Protocols = nil
	require.ErrorIs(t, joinErr(node, noProtocols), kerr.InconsistentGroupProtocol)

	groupStableOne(t, c, node, group)
	otherType := groupJoinReq(9, group, "", groupTestSession, groupTestRebalance)
	otherType.ProtocolType = "connect"
	require.ErrorIs(t, joinErr(node, otherType), kerr.InconsistentGroupProtocol)
	require.ErrorIs(t, joinErr(node, groupJoinReq(3, group, "", groupTestSession, groupTestRebalance, "sticky")), kerr.InconsistentGroupProtocol)
}

func TestGroupProtocolSelectionByVotes(t *testing.T) {
	c := newTestCluster(t)
	const group = "g-vote"
	node := groupCoordinatorNode(t, c, group)
	aJoin := groupSend(t, c, node, groupJoinReq(3, group, "", groupTestSession, groupTestRebalance, "range", "sticky"))
	aJoined := groupJoined(t, aJoin)
	require.Equal(t, "range", *aJoined.Protocol)

	// Two members prefer sticky, one range: sticky wins.
	bJoin := groupSend(t, c, node, groupJoinReq(3, group, "", groupTestSession, groupTestRebalance, "sticky", "range"))
	cJoin := groupSend(t, c, node, groupJoinReq(3, group, "", groupTestSession, groupTestRebalance, "sticky", "range"))
	a2 := groupJoined(t, groupSend(t, c, node, groupJoinReq(3, group, aJoined.MemberID, groupTestSession, groupTestRebalance, "range", "sticky")))
	require.Equal(t, "sticky", *a2.Protocol)
	require.Equal(t, "sticky", *groupJoined(t, bJoin).Protocol)
	require.Equal(t, "sticky", *groupJoined(t, cJoin).Protocol)
	for _, m := range a2.Members {
		require.Equal(t, "meta-sticky", string(m.ProtocolMetadata))
	}
}

func TestGroupWaitingJoinFailsWhenCoordinatorMoves(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	const group = "g-move-join"
	node := groupCoordinatorNode(t, c, group)
	a, _ := groupStableOne(t, c, node, group)
	bJoin := groupSend(t, c, node, groupJoinReq(3, group, "", groupTestSession, groupTestRebalance))
	groupRequireWaiting(t, bJoin)

	to := groupMoveCoordinator(t, c, group)
	moved := groupAwait(t, bJoin).(*kmsg.JoinGroupResponse)
	require.ErrorIs(t, kerr.ErrorForCode(moved.ErrorCode), kerr.NotCoordinator)

	// The new coordinator replayed the stable group: A's generation holds.
	require.ErrorIs(t, groupHeartbeat(t, c, node, group, a, 1), kerr.NotCoordinator)
	require.NoError(t, groupHeartbeat(t, c, to, group, a, 1))
	d := groupDescribe(t, c, to, group)
	require.Equal(t, "Stable", d.State)
	require.Len(t, d.Members, 1)
	require.Equal(t, "all", string(d.Members[0].MemberAssignment))
}

func TestGroupListAndDescribeAndDelete(t *testing.T) {
	c := newTestCluster(t)
	groupTopic(t, c, "t", 2)
	node := int32(0)
	groupStableOne(t, c, node, "g-live")
	require.Equal(t, map[int32]error{0: nil}, groupCommit(t, c, node, 9, "g-offsets", "", -1, "t", map[int32]int64{0: 5}))

	list := func(states, types []string) map[string]kmsg.ListGroupsResponseGroup {
		req := kmsg.NewPtrListGroupsRequest()
		req.Version = 5
		req.StatesFilter, req.TypesFilter = states, types
		resp := groupAwait(t, groupSend(t, c, node, req)).(*kmsg.ListGroupsResponse)
		out := make(map[string]kmsg.ListGroupsResponseGroup)
		for _, g := range resp.Groups {
			out[g.Group] = g
		}
		return out
	}
	all := list(nil, nil)
	require.Contains(t, all, "g-live")
	require.Contains(t, all, "g-offsets")
	require.Equal(t, "Stable", all["g-live"].GroupState)
	require.Equal(t, "classic", all["g-live"].GroupType)
	require.Equal(t, "consumer", all["g-live"].ProtocolType)
	require.Equal(t, "", all["g-offsets"].ProtocolType)
	require.Equal(t, []string{"g-offsets"}, groupNames(list([]string{"empty"}, nil)))
	require.Empty(t, list(nil, []string{"consumer"}))
	require.Len(t, list(nil, []string{"Classic"}), 2)

	unknown := groupDescribe(t, c, node, "g-none")
	require.ErrorIs(t, kerr.ErrorForCode(unknown.ErrorCode), kerr.GroupIDNotFound)
	require.Equal(t, "Dead", unknown.State)

	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Version = 2
	del.Groups = []string{"g-live", "g-offsets", "g-none"}
	resp := groupAwait(t, groupSend(t, c, node, del)).(*kmsg.DeleteGroupsResponse)
	require.Len(t, resp.Groups, 3)
	require.ErrorIs(t, kerr.ErrorForCode(resp.Groups[0].ErrorCode), kerr.NonEmptyGroup)
	require.NoError(t, kerr.ErrorForCode(resp.Groups[1].ErrorCode))
	require.ErrorIs(t, kerr.ErrorForCode(resp.Groups[2].ErrorCode), kerr.GroupIDNotFound)
	require.NotContains(t, list(nil, nil), "g-offsets")
	fetched, err := groupFetch(t, c, node, "g-offsets", "t", false, 0)
	require.NoError(t, err)
	require.Equal(t, int64(-1), fetched["t"][0].offset)
}

func groupNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
