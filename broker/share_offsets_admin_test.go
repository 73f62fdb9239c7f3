package broker

import (
	"cmp"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// leave makes the member leave its share group.
func (m *rawShareMember) leave() {
	m.t.Helper()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.MemberEpoch = m.group, m.id, -1
	resp := txnWire(m.t, m.c, shareGroupCoordinator(m.t, m.c, m.group), req).(*kmsg.ShareGroupHeartbeatResponse)
	require.NoError(m.t, kerr.ErrorForCode(resp.ErrorCode))
}

func alterShareOffsets(t testing.TB, c *Cluster, node int32, group string, topics map[string]map[int32]int64) *kmsg.AlterShareGroupOffsetsResponse {
	t.Helper()
	req := kmsg.NewPtrAlterShareGroupOffsetsRequest()
	req.GroupID = group
	for _, name := range sortedKeys(topics) {
		rt := kmsg.NewAlterShareGroupOffsetsRequestTopic()
		rt.Topic = name
		for _, p := range sortedKeys(topics[name]) {
			rt.Partitions = append(rt.Partitions, kmsg.AlterShareGroupOffsetsRequestTopicPartition{Partition: p, StartOffset: topics[name][p]})
		}
		req.Topics = append(req.Topics, rt)
	}
	return txnWire(t, c, node, req).(*kmsg.AlterShareGroupOffsetsResponse)
}

func deleteShareOffsets(t testing.TB, c *Cluster, node int32, group string, topics ...string) *kmsg.DeleteShareGroupOffsetsResponse {
	t.Helper()
	req := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
	req.GroupID = group
	for _, name := range topics {
		req.Topics = append(req.Topics, kmsg.DeleteShareGroupOffsetsRequestTopic{Topic: name})
	}
	return txnWire(t, c, node, req).(*kmsg.DeleteShareGroupOffsetsResponse)
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}

// TestShareGroupOffsetsAdmin alters and deletes a share group's start
// offsets: only while the group is empty, per-partition and per-topic
// errors as Kafka gives them, and the next members read from where the
// admin said, also after the share coordinator moved.
func TestShareGroupOffsetsAdmin(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "sa", 2)
	createTopic(t, c, "untouched", 1)
	admin := newTestClient(t, c)
	shareSetGroupConfigs(t, admin, "sa-group", "share.auto.offset.reset", "earliest")
	shareProduce(t, shareProducer(t, c), "sa", 2, shareValues("v", 20)...)
	node := shareGroupCoordinator(t, c, "sa-group")

	m1 := shareJoin(t, c, "sa-group", "m1", "sa")
	require.Len(t, m1.fetch("sa", 0), 10)
	require.NoError(t, m1.acknowledge("sa", 0, 0, 4, wire.AckAccept))
	require.Equal(t, int64(5), shareOffsets(t, admin, "sa-group", "sa")[0].StartOffset)

	r := alterShareOffsets(t, c, node, "sa-group", map[string]map[int32]int64{"sa": {0: 8}})
	require.ErrorIs(t, kerr.ErrorForCode(r.ErrorCode), kerr.NonEmptyGroup)
	d := deleteShareOffsets(t, c, node, "sa-group", "sa")
	require.ErrorIs(t, kerr.ErrorForCode(d.ErrorCode), kerr.NonEmptyGroup)
	m1.leave()

	r = alterShareOffsets(t, c, node, "sa-group", map[string]map[int32]int64{
		"sa":   {0: 8, 1: 3, 7: 1},
		"nope": {0: 1},
	})
	require.Zero(t, r.ErrorCode)
	require.Len(t, r.Topics, 2)
	errs := map[string]map[int32]error{}
	for _, rt := range r.Topics {
		errs[rt.Topic] = map[int32]error{}
		for _, rp := range rt.Partitions {
			errs[rt.Topic][rp.Partition] = kerr.ErrorForCode(rp.ErrorCode)
		}
		if rt.Topic == "sa" {
			require.Equal(t, cgTopicID(t, c, "sa"), rt.TopicID)
		} else {
			require.Zero(t, rt.TopicID)
		}
	}
	require.NoError(t, errs["sa"][0])
	require.NoError(t, errs["sa"][1])
	require.ErrorIs(t, errs["sa"][7], kerr.UnknownTopicOrPartition)
	require.ErrorIs(t, errs["nope"][0], kerr.UnknownTopicOrPartition)
	offsets := shareOffsets(t, admin, "sa-group", "sa")
	require.Equal(t, int64(8), offsets[0].StartOffset)
	require.Equal(t, int64(3), offsets[1].StartOffset)

	// The share coordinator that takes over replays the same state.
	idx := shareStatePartition(t, c, "sa-group", "sa", 0)
	leader, err := c.Leader(wire.ShareGroupStateTopic, idx)
	require.NoError(t, err)
	require.NoError(t, c.MoveLeader(wire.ShareGroupStateTopic, idx, (leader+1)%3))
	require.Equal(t, int64(8), shareOffsets(t, admin, "sa-group", "sa")[0].StartOffset)

	m2 := shareJoin(t, c, "sa-group", "m2", "sa")
	got := m2.fetch("sa", 0)
	require.Equal(t, map[int64]int16{8: 1, 9: 1}, got, "from the altered offset, with fresh delivery counts")
	require.Len(t, m2.fetch("sa", 1), 7)
	m2.leave()

	d = deleteShareOffsets(t, c, node, "sa-group", "sa", "nope", "untouched")
	require.Zero(t, d.ErrorCode)
	require.Len(t, d.Topics, 3)
	require.Equal(t, "sa", d.Topics[0].Topic, "deleted topics first, as on Kafka")
	require.Zero(t, d.Topics[0].ErrorCode)
	require.Equal(t, cgTopicID(t, c, "sa"), d.Topics[0].TopicID)
	require.Equal(t, "nope", d.Topics[1].Topic)
	require.ErrorIs(t, kerr.ErrorForCode(d.Topics[1].ErrorCode), kerr.UnknownTopicOrPartition)
	require.Equal(t, "untouched", d.Topics[2].Topic)
	require.ErrorIs(t, kerr.ErrorForCode(d.Topics[2].ErrorCode), kerr.UnknownTopicOrPartition)
	require.Equal(t, "There is no offset information to delete.", *d.Topics[2].ErrorMessage)
	require.Empty(t, shareOffsets(t, admin, "sa-group", "sa"), "no share state left for the topic")

	m3 := shareJoin(t, c, "sa-group", "m3", "sa")
	require.Len(t, m3.fetch("sa", 0), 10, "the group starts over where share.auto.offset.reset says")
	require.Equal(t, 0, c.handlerPanics)
}

func TestShareGroupOffsetsAdminGroupErrors(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "se", 1)
	require.NoError(t, cgCommit(t, c, 9, "classic", "", -1, "se", 0, 1))
	cases := []struct {
		group string
		err   *kerr.Error
		msg   string
	}{
		{"", kerr.InvalidGroupID, ""},
		{"classic", kerr.GroupIDNotFound, "Group classic is not a share group."},
	}
	for _, tc := range cases {
		node := int32(0)
		if tc.group != "" {
			node = shareGroupCoordinator(t, c, tc.group)
		}
		r := alterShareOffsets(t, c, node, tc.group, map[string]map[int32]int64{"se": {0: 0}})
		require.ErrorIs(t, kerr.ErrorForCode(r.ErrorCode), tc.err, tc.group)
		d := deleteShareOffsets(t, c, node, tc.group, "se")
		require.ErrorIs(t, kerr.ErrorForCode(d.ErrorCode), tc.err, tc.group)
		if tc.msg != "" {
			require.Equal(t, tc.msg, *r.ErrorMessage)
			require.Equal(t, tc.msg, *d.ErrorMessage)
		}
	}
	none := shareGroupCoordinator(t, c, "none")
	d := deleteShareOffsets(t, c, none, "none", "se")
	require.ErrorIs(t, kerr.ErrorForCode(d.ErrorCode), kerr.GroupIDNotFound)
	require.Equal(t, "Group none not found.", *d.ErrorMessage)
	r := alterShareOffsets(t, c, (none+1)%2, "none", nil)
	require.ErrorIs(t, kerr.ErrorForCode(r.ErrorCode), kerr.NotCoordinator)

	// Altering a name no group has creates an empty share group.
	r = alterShareOffsets(t, c, none, "none", map[string]map[int32]int64{"se": {0: 0}})
	require.Zero(t, r.ErrorCode)
	require.NoError(t, kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	d = deleteShareOffsets(t, c, none, "none", "se")
	require.Zero(t, d.ErrorCode, "the group exists now")
	require.Zero(t, d.Topics[0].ErrorCode)
}

// TestAlterShareGroupOffsetsRepeatedPartition: a request naming one
// partition many times resets it once, to the offset given last, and
// answers every entry; its work does not grow with the repeats (two state
// records, where it used to write two per entry).
func TestAlterShareGroupOffsetsRepeatedPartition(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	createTopic(t, c, "rep", 1)
	admin := newTestClient(t, c)
	shareProduce(t, shareProducer(t, c), "rep", 1, shareValues("v", 10)...)
	node := shareGroupCoordinator(t, c, "rep-group")
	require.Zero(t, alterShareOffsets(t, c, node, "rep-group", map[string]map[int32]int64{"rep": {0: 1}}).ErrorCode)
	idx := shareStatePartition(t, c, "rep-group", "rep", 0)
	before := endOffset(t, c, wire.ShareGroupStateTopic, idx)

	const repeats = 1000
	req := kmsg.NewPtrAlterShareGroupOffsetsRequest()
	req.GroupID = "rep-group"
	rt := kmsg.NewAlterShareGroupOffsetsRequestTopic()
	rt.Topic = "rep"
	for i := range repeats {
		rt.Partitions = append(rt.Partitions, kmsg.AlterShareGroupOffsetsRequestTopicPartition{Partition: 0, StartOffset: int64(i % 9)})
	}
	rt.Partitions[repeats-1].StartOffset = 6
	req.Topics = append(req.Topics, rt)
	resp := txnWire(t, c, node, req).(*kmsg.AlterShareGroupOffsetsResponse)
	require.Zero(t, resp.ErrorCode)
	require.Len(t, resp.Topics, 1)
	require.Len(t, resp.Topics[0].Partitions, repeats, "every entry answered")
	for _, rp := range resp.Topics[0].Partitions {
		require.Zero(t, rp.ErrorCode)
	}
	written := endOffset(t, c, wire.ShareGroupStateTopic, idx) - before
	require.LessOrEqual(t, written, int64(2), "state records written for one partition named %d times", repeats)
	require.Equal(t, int64(6), shareOffsets(t, admin, "rep-group", "rep")[0].StartOffset, "the offset given last")
	require.Equal(t, 0, c.handlerPanics)
}
