package broker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestGroupOffsetCommitRules(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	groupTopic(t, c, "t", 3)
	const group = "g-commit"
	node := groupCoordinatorNode(t, c, group)

	// Generation -1 from outside the membership creates the group.
	require.Equal(t, map[int32]error{0: nil, 1: nil}, groupCommit(t, c, node, 9, group, "", -1, "t", map[int32]int64{0: 10, 1: 11}))
	fetched, err := groupFetch(t, c, node, group, "t", false, 0, 1, 2)
	require.NoError(t, err)
	require.Equal(t, map[int32]groupFetched{0: {offset: 10}, 1: {offset: 11}, 2: {offset: -1}}, fetched["t"])

	// A missing group with a generation: GROUP_ID_NOT_FOUND from v9,
	// ILLEGAL_GENERATION before.
	missingNode := groupCoordinatorNode(t, c, "g-missing")
	require.ErrorIs(t, groupCommit(t, c, missingNode, 9, "g-missing", "m", 3, "t", map[int32]int64{0: 1})[0], kerr.GroupIDNotFound)
	require.ErrorIs(t, groupCommit(t, c, missingNode, 8, "g-missing", "m", 3, "t", map[int32]int64{0: 1})[0], kerr.IllegalGeneration)
	require.ErrorIs(t, groupCommit(t, c, (node+1)%2, 9, group, "", -1, "t", map[int32]int64{0: 1})[0], kerr.NotCoordinator)
	require.ErrorIs(t, groupCommit(t, c, node, 9, group, "", -1, "nope", map[int32]int64{0: 1})[0], kerr.UnknownTopicOrPartition)
	require.ErrorIs(t, groupCommit(t, c, node, 9, group, "", -1, "t", map[int32]int64{9: 1})[9], kerr.UnknownTopicOrPartition)

	big := kmsg.NewPtrOffsetCommitRequest()
	big.Version = 9
	big.Group, big.Generation = group, -1
	md := strings.Repeat("x", maxOffsetMetadata+1)
	big.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, Metadata: &md}}}}
	bigResp := groupAwait(t, groupSend(t, c, node, big)).(*kmsg.OffsetCommitResponse)
	require.ErrorIs(t, kerr.ErrorForCode(bigResp.Topics[0].Partitions[0].ErrorCode), kerr.OffsetMetadataTooLarge)

	// Once the group has members, only its members commit, at their
	// generation.
	member, gen := groupStableOne(t, c, node, group)
	require.ErrorIs(t, groupCommit(t, c, node, 9, group, "", -1, "t", map[int32]int64{0: 1})[0], kerr.UnknownMemberID)
	require.ErrorIs(t, groupCommit(t, c, node, 9, group, "ghost", gen, "t", map[int32]int64{0: 1})[0], kerr.UnknownMemberID)
	require.ErrorIs(t, groupCommit(t, c, node, 9, group, member, gen+1, "t", map[int32]int64{0: 1})[0], kerr.IllegalGeneration)
	require.NoError(t, groupCommit(t, c, node, 9, group, member, gen, "t", map[int32]int64{2: 12})[2])

	// Null topics fetch everything the group committed.
	all, err := groupFetch(t, c, node, group, "t", false)
	require.NoError(t, err)
	require.Equal(t, map[int32]groupFetched{0: {offset: 10}, 1: {offset: 11}, 2: {offset: 12}}, all["t"])
	_, err = groupFetch(t, c, (node+1)%2, group, "t", false, 0)
	require.ErrorIs(t, err, kerr.NotCoordinator)
}

func TestGroupOffsetVersionsByName(t *testing.T) {
	c := newTestCluster(t)
	groupTopic(t, c, "t", 2)
	const group = "g-versions"
	for _, v := range []int16{2, 5, 7, 8} {
		require.NoError(t, groupCommit(t, c, 0, v, group, "", -1, "t", map[int32]int64{0: int64(100 + v)})[0], "v%d", v)
	}
	// v1 (single group, per-partition errors) and v5 (top-level error).
	for _, v := range []int16{1, 5, 7} {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = v
		req.Group = group
		req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{0, 1}}}
		resp := groupAwait(t, groupSend(t, c, 0, req)).(*kmsg.OffsetFetchResponse)
		require.Len(t, resp.Topics, 1, "v%d", v)
		require.Equal(t, int64(108), resp.Topics[0].Partitions[0].Offset, "v%d", v)
		require.Equal(t, int64(-1), resp.Topics[0].Partitions[1].Offset, "v%d", v)
	}
}

func TestGroupOffsetVersionsByTopicID(t *testing.T) {
	c := newTestCluster(t)
	groupTopic(t, c, "t", 1)
	var id [16]byte
	require.NoError(t, c.do(func() { id = c.topics["t"].id }))
	const group = "g-ids"

	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version = 10
	commit.Group, commit.Generation = group, -1
	commit.Topics = []kmsg.OffsetCommitRequestTopic{
		{TopicID: id, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 42, LeaderEpoch: -1}}},
		{TopicID: [16]byte{1}, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}},
	}
	resp := groupAwait(t, groupSend(t, c, 0, commit)).(*kmsg.OffsetCommitResponse)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
	require.Equal(t, id, resp.Topics[0].TopicID)
	require.ErrorIs(t, kerr.ErrorForCode(resp.Topics[1].Partitions[0].ErrorCode), kerr.UnknownTopicID)

	// v10 fetch by id; v9 sees the same offset by name.
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Version = 10
	fetch.Groups = []kmsg.OffsetFetchRequestGroup{{Group: group, Topics: []kmsg.OffsetFetchRequestGroupTopic{{TopicID: id, Partitions: []int32{0}}}}}
	fresp := groupAwait(t, groupSend(t, c, 0, fetch)).(*kmsg.OffsetFetchResponse)
	require.Equal(t, id, fresp.Groups[0].Topics[0].TopicID)
	require.Equal(t, int64(42), fresp.Groups[0].Topics[0].Partitions[0].Offset)
	byName, err := groupFetch(t, c, 0, group, "t", false, 0)
	require.NoError(t, err)
	require.Equal(t, int64(42), byName["t"][0].offset)
}

func TestGroupOffsetsSurviveCoordinatorMove(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	groupTopic(t, c, "t", 2)
	const group = "g-replay"
	node := groupCoordinatorNode(t, c, group)
	require.NoError(t, groupCommit(t, c, node, 9, group, "", -1, "t", map[int32]int64{0: 5, 1: 6})[0])
	require.NoError(t, groupCommit(t, c, node, 9, group, "", -1, "t", map[int32]int64{0: 7})[0])

	to := groupMoveCoordinator(t, c, group)
	_, err := groupFetch(t, c, node, group, "t", false, 0)
	require.ErrorIs(t, err, kerr.NotCoordinator)
	fetched, err := groupFetch(t, c, to, group, "t", false, 0, 1)
	require.NoError(t, err)
	require.Equal(t, map[int32]groupFetched{0: {offset: 7}, 1: {offset: 6}}, fetched["t"])

	// A deletion is replayed too.
	del := kmsg.NewPtrOffsetDeleteRequest()
	del.Group = group
	del.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 1}}}}
	dresp := groupAwait(t, groupSend(t, c, to, del)).(*kmsg.OffsetDeleteResponse)
	require.NoError(t, kerr.ErrorForCode(dresp.ErrorCode))
	back := groupMoveCoordinator(t, c, group)
	fetched, err = groupFetch(t, c, back, group, "t", false, 0, 1)
	require.NoError(t, err)
	require.Equal(t, map[int32]groupFetched{0: {offset: 7}, 1: {offset: -1}}, fetched["t"])
}

func TestGroupOffsetDeleteRespectsSubscriptions(t *testing.T) {
	c := newTestCluster(t)
	groupTopic(t, c, "sub", 1)
	groupTopic(t, c, "other", 1)
	const group = "g-offdel"
	require.NoError(t, groupCommit(t, c, 0, 9, group, "", -1, "sub", map[int32]int64{0: 1})[0])
	require.NoError(t, groupCommit(t, c, 0, 9, group, "", -1, "other", map[int32]int64{0: 1})[0])

	// A stable consumer group subscribed to "sub".
	meta := kmsg.ConsumerMemberMetadata{Version: 0, Topics: []string{"sub"}}
	req := groupJoinReq(9, group, "", groupTestSession, groupTestRebalance)
	req.Protocols[0].Metadata = meta.AppendTo(nil)
	joined := groupJoined(t, groupJoin(t, c, 0, req))
	groupAwait(t, groupSend(t, c, 0, groupSyncReq(group, joined.MemberID, joined.Generation, map[string]string{joined.MemberID: ""})))

	del := kmsg.NewPtrOffsetDeleteRequest()
	del.Group = group
	del.Topics = []kmsg.OffsetDeleteRequestTopic{
		{Topic: "sub", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}},
		{Topic: "other", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}},
	}
	resp := groupAwait(t, groupSend(t, c, 0, del)).(*kmsg.OffsetDeleteResponse)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	require.ErrorIs(t, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode), kerr.GroupSubscribedToTopic)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[1].Partitions[0].ErrorCode))
	all, err := groupFetch(t, c, 0, group, "", false)
	require.NoError(t, err)
	require.Contains(t, all, "sub")
	require.NotContains(t, all, "other")

	del.Group = "g-nothing"
	missing := groupAwait(t, groupSend(t, c, 0, del)).(*kmsg.OffsetDeleteResponse)
	require.ErrorIs(t, kerr.ErrorForCode(missing.ErrorCode), kerr.GroupIDNotFound)
}
