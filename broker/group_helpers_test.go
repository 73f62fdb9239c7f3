package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// groupSend hands req to node's handlers on the run loop, as a connection
// would, and returns the channel its answer arrives on: at once, or later
// for a deferred JoinGroup or SyncGroup.
func groupSend(t testing.TB, c *Cluster, node int32, req kmsg.Request) <-chan kmsg.Response {
	t.Helper()
	r := &request{node: c.nodes[node], kreq: req, clientID: "group-test", reply: make(chan kmsg.Response, 1)}
	require.NoError(t, c.do(func() { c.dispatch(r) }))
	return r.reply
}

// groupAwait waits for an answer; a broken test fails instead of hanging.
func groupAwait(t testing.TB, ch <-chan kmsg.Response) kmsg.Response {
	t.Helper()
	select {
	case resp := <-ch:
		require.NotNil(t, resp)
		return resp
	case <-time.After(30 * time.Second):
		t.Fatal("no answer")
		return nil
	}
}

// groupRequireWaiting fails if the request was answered. The handler has
// run by the time groupSend returns, so an answer would already be there.
func groupRequireWaiting(t testing.TB, ch <-chan kmsg.Response) {
	t.Helper()
	select {
	case resp := <-ch:
		t.Fatalf("expected a deferred answer, got %#v", resp)
	default:
	}
}

// groupCoordinatorNode returns the node leading group's __consumer_offsets
// partition.
func groupCoordinatorNode(t testing.TB, c *Cluster, group string) int32 {
	t.Helper()
	leader, err := c.Leader(wire.ConsumerOffsetsTopic, c.CoordinatorPartition(coordinatorGroup, group))
	require.NoError(t, err)
	return leader
}

// groupMoveCoordinator moves group's __consumer_offsets partition to
// another node and returns that node.
func groupMoveCoordinator(t testing.TB, c *Cluster, group string) int32 {
	t.Helper()
	from := groupCoordinatorNode(t, c, group)
	to := (from + 1) % int32(len(c.nodes))
	require.NoError(t, c.MoveLeader(wire.ConsumerOffsetsTopic, c.CoordinatorPartition(coordinatorGroup, group), to))
	return to
}

// groupJoinReq builds a JoinGroup of the "consumer" protocol type offering
// the given protocol names, with the member's metadata equal to its names.
func groupJoinReq(version int16, group, memberID string, session, rebalance time.Duration, protocols ...string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = version
	req.Group = group
	req.MemberID = memberID
	req.SessionTimeoutMillis = int32(session / time.Millisecond)
	req.RebalanceTimeoutMillis = int32(rebalance / time.Millisecond)
	req.ProtocolType = "consumer"
	if len(protocols) == 0 {
		protocols = []string{"range"}
	}
	for _, p := range protocols {
		req.Protocols = append(req.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: []byte("meta-" + p)})
	}
	return req
}

// groupJoin sends a JoinGroup (a new dynamic member first gets its id with
// MEMBER_ID_REQUIRED, v4+) and returns the channel of the join answer,
// which arrives once the join phase completes.
func groupJoin(t testing.TB, c *Cluster, node int32, req *kmsg.JoinGroupRequest) <-chan kmsg.Response {
	t.Helper()
	if req.MemberID == "" && req.Version >= 4 && req.InstanceID == nil {
		first := groupAwait(t, groupSend(t, c, node, req)).(*kmsg.JoinGroupResponse)
		require.ErrorIs(t, kerr.ErrorForCode(first.ErrorCode), kerr.MemberIDRequired)
		require.NotEmpty(t, first.MemberID)
		again := *req
		again.MemberID = first.MemberID
		req = &again
	}
	return groupSend(t, c, node, req)
}

// groupJoined waits for a successful join answer.
func groupJoined(t testing.TB, ch <-chan kmsg.Response) *kmsg.JoinGroupResponse {
	t.Helper()
	resp := groupAwait(t, ch).(*kmsg.JoinGroupResponse)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	return resp
}

// groupSyncReq builds a v5 SyncGroup; assignments maps member ids to
// their assignment (the leader's plan).
func groupSyncReq(group, memberID string, generation int32, assignments map[string]string) *kmsg.SyncGroupRequest {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 5
	req.Group = group
	req.MemberID = memberID
	req.Generation = generation
	for id, a := range assignments {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: []byte(a)})
	}
	return req
}

// groupHeartbeat sends a v4 Heartbeat and returns its error.
func groupHeartbeat(t testing.TB, c *Cluster, node int32, group, memberID string, generation int32) error {
	t.Helper()
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version = 4
	req.Group, req.MemberID, req.Generation = group, memberID, generation
	return kerr.ErrorForCode(groupAwait(t, groupSend(t, c, node, req)).(*kmsg.HeartbeatResponse).ErrorCode)
}

// groupDescribe describes one group with DescribeGroups v6.
func groupDescribe(t testing.TB, c *Cluster, node int32, group string) kmsg.DescribeGroupsResponseGroup {
	t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Version = 6
	req.Groups = []string{group}
	resp := groupAwait(t, groupSend(t, c, node, req)).(*kmsg.DescribeGroupsResponse)
	require.Len(t, resp.Groups, 1)
	return resp.Groups[0]
}

// groupCommit commits offsets of one topic with OffsetCommit at version,
// as a member (or with generation -1 and no member, from outside).
func groupCommit(t testing.TB, c *Cluster, node int32, version int16, group, memberID string, generation int32, topic string, offsets map[int32]int64) map[int32]error {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = version
	req.Group, req.MemberID, req.Generation = group, memberID, generation
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	for p, o := range offsets {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, o
		md := "md"
		rp.Metadata = &md
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp := groupAwait(t, groupSend(t, c, node, req)).(*kmsg.OffsetCommitResponse)
	out := make(map[int32]error)
	for _, st := range resp.Topics {
		for _, sp := range st.Partitions {
			out[sp.Partition] = kerr.ErrorForCode(sp.ErrorCode)
		}
	}
	return out
}

// groupFetched is one partition of an OffsetFetch answer.
type groupFetched struct {
	offset int64
	err    error
}

// groupFetch fetches one topic's offsets (v8 form); nil partitions fetch
// every committed offset of the group.
func groupFetch(t testing.TB, c *Cluster, node int32, group, topic string, requireStable bool, partitions ...int32) (map[string]map[int32]groupFetched, error) {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 8
	req.RequireStable = requireStable
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = group
	if partitions != nil {
		rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: partitions}}
	}
	req.Groups = append(req.Groups, rg)
	resp := groupAwait(t, groupSend(t, c, node, req)).(*kmsg.OffsetFetchResponse)
	require.Len(t, resp.Groups, 1)
	out := make(map[string]map[int32]groupFetched)
	for _, rt := range resp.Groups[0].Topics {
		out[rt.Topic] = make(map[int32]groupFetched)
		for _, rp := range rt.Partitions {
			out[rt.Topic][rp.Partition] = groupFetched{offset: rp.Offset, err: kerr.ErrorForCode(rp.ErrorCode)}
		}
	}
	return out, kerr.ErrorForCode(resp.Groups[0].ErrorCode)
}

// groupTopic creates a topic directly on the loop (the white-box tests do
// not need the wire for it).
func groupTopic(t testing.TB, c *Cluster, name string, partitions int32) {
	t.Helper()
	require.NoError(t, c.do(func() { c.createTopic(name, partitions, nil, false) }))
}

// groupEdit runs fn on the run loop with the group as the coordinator
// serving it holds it. Tests use it to make a timeout pass now instead of
// waiting for it.
func groupEdit(t testing.TB, c *Cluster, group string, fn func(grp *classicGroup)) {
	t.Helper()
	node := groupCoordinatorNode(t, c, group)
	found := false
	require.NoError(t, c.do(func() {
		if st, err := c.coordinators.group.shardFor(node, group); err == nil && st.groups[group] != nil {
			found = true
			fn(st.groups[group])
			c.coordinators.group.reschedule(st, group, time.Now()) // deadlines may have moved earlier
		}
	}))
	require.True(t, found, "group %s is not served", group)
}

// groupCloseWindows makes the group's current join or sync window end:
// the next sweep completes the phase as its timeout would.
func groupCloseWindows(t testing.TB, c *Cluster, group string) {
	t.Helper()
	groupEdit(t, c, group, func(grp *classicGroup) {
		grp.joinDeadline, grp.syncDeadline = time.Now(), time.Now()
	})
}

// groupEndSessions makes every member's session end at the next sweep
// unless the member is heard from first.
func groupEndSessions(t testing.TB, c *Cluster, group string) {
	t.Helper()
	groupEdit(t, c, group, func(grp *classicGroup) {
		for _, m := range grp.members {
			m.sessionDeadline = time.Now()
		}
	})
}
