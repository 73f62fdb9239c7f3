package broker

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cgMember drives one KIP-848 member with raw ConsumerGroupHeartbeat
// requests at the group's coordinator, remembering its epoch and what it
// owns as a client would.
type cgMember struct {
	t        testing.TB
	c        *Cluster
	group    string
	id       string
	instance *string
	epoch    int32
	owned    map[[16]byte][]int32
}

func newCGMember(t testing.TB, c *Cluster, group, id string) *cgMember {
	return &cgMember{t: t, c: c, group: group, id: id}
}

// send sends req to the group's coordinator and returns the answer.
func (m *cgMember) send(req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	m.t.Helper()
	return cgSend(m.t, m.c, groupCoordinatorNode(m.t, m.c, m.group), req)
}

func cgSend(t testing.TB, c *Cluster, node int32, req kmsg.Request) *kmsg.ConsumerGroupHeartbeatResponse {
	t.Helper()
	return groupAwait(t, groupSend(t, c, node, req)).(*kmsg.ConsumerGroupHeartbeatResponse)
}

// joinReq is a full epoch-0 heartbeat subscribing to topics.
func (m *cgMember) joinReq(topics ...string) *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = m.group, m.id, 0
	req.InstanceID = m.instance
	req.RebalanceTimeoutMillis = 30000
	req.SubscribedTopicNames = topics
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	return req
}

// hbReq is a regular heartbeat at the member's epoch reporting what it
// owns.
func (m *cgMember) hbReq() *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
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

// do sends req, requires success and applies the answer: the new epoch,
// and the new assignment if one came (the client revokes at once).
func (m *cgMember) do(req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	m.t.Helper()
	resp := m.send(req)
	require.NoError(m.t, kerr.ErrorForCode(resp.ErrorCode), "member %s: %s", m.id, cgMessage(resp))
	require.NotNil(m.t, resp.MemberID)
	require.Equal(m.t, m.id, *resp.MemberID)
	m.epoch = resp.MemberEpoch
	if resp.Assignment != nil {
		m.owned = make(map[[16]byte][]int32)
		for _, tp := range resp.Assignment.Topics {
			m.owned[tp.TopicID] = append([]int32(nil), tp.Partitions...)
		}
	}
	return resp
}

func cgMessage(resp *kmsg.ConsumerGroupHeartbeatResponse) string {
	if resp.ErrorMessage == nil {
		return ""
	}
	return *resp.ErrorMessage
}

// cgAge makes a member's last heartbeat d older, so that a sweep expires
// it alone.
func cgAge(t testing.TB, c *Cluster, group, member string, d time.Duration) {
	t.Helper()
	found := false
	require.NoError(t, c.do(func() {
		st, err := c.coordinators.group.shardFor(groupCoordinatorNodeLocked(c, group), group)
		if err != nil || st.groups[group] == nil || st.groups[group].consumer == nil {
			return
		}
		if m := st.groups[group].consumer.members[member]; m != nil {
			m.lastSeen = m.lastSeen.Add(-d)
			found = true
		}
	}))
	require.True(t, found, "member %s of %s", member, group)
}

// groupCoordinatorNodeLocked is groupCoordinatorNode on the run loop.
func groupCoordinatorNodeLocked(c *Cluster, group string) int32 {
	return c.coordinatorPartitionFor(coordinatorGroup, group).leader
}

func (m *cgMember) join(topics ...string) *kmsg.ConsumerGroupHeartbeatResponse {
	m.t.Helper()
	return m.do(m.joinReq(topics...))
}

func (m *cgMember) heartbeat() *kmsg.ConsumerGroupHeartbeatResponse {
	m.t.Helper()
	return m.do(m.hbReq())
}

// expect sends req and requires the error err.
func (m *cgMember) expect(req *kmsg.ConsumerGroupHeartbeatRequest, err *kerr.Error) *kmsg.ConsumerGroupHeartbeatResponse {
	m.t.Helper()
	resp := m.send(req)
	require.ErrorIs(m.t, kerr.ErrorForCode(resp.ErrorCode), err, "member %s: %s", m.id, cgMessage(resp))
	return resp
}

// partitionsOf returns the partitions of topic the member owns, sorted.
func (m *cgMember) partitionsOf(topic string) []int32 {
	out := append([]int32(nil), m.owned[cgTopicID(m.t, m.c, topic)]...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// cgTopicID returns a topic's id.
func cgTopicID(t testing.TB, c *Cluster, topic string) [16]byte {
	t.Helper()
	var id [16]byte
	found := false
	require.NoError(t, c.do(func() {
		if tp := c.topics[topic]; tp != nil {
			id, found = tp.id, true
		}
	}))
	require.True(t, found, "topic %s", topic)
	return id
}

// cgDescribe describes one group at its coordinator.
func cgDescribe(t testing.TB, c *Cluster, group string) kmsg.ConsumerGroupDescribeResponseGroup {
	t.Helper()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Version = 1
	req.Groups = []string{group}
	resp := groupAwait(t, groupSend(t, c, groupCoordinatorNode(t, c, group), req)).(*kmsg.ConsumerGroupDescribeResponse)
	require.Len(t, resp.Groups, 1)
	return resp.Groups[0]
}

// cgTick fires every group's timer as if at now+d.
func cgTick(t testing.TB, c *Cluster, d time.Duration) {
	t.Helper()
	require.NoError(t, c.do(func() {
		g := c.coordinators.group
		for _, sh := range g.shards.loaded {
			for _, grp := range sh.state.groups {
				g.groupDue(sh.state, grp, time.Now().Add(d))
			}
		}
	}))
}

// cgCommit sends an OffsetCommit of offset for topic/partition as member at
// epoch, with version v, and returns the partition's error.
func cgCommit(t testing.TB, c *Cluster, v int16, group, member string, epoch int32, topic string, partition int32, offset int64) error {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = v
	req.Group, req.MemberID, req.Generation = group, member, epoch
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = partition, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := groupAwait(t, groupSend(t, c, groupCoordinatorNode(t, c, group), req)).(*kmsg.OffsetCommitResponse)
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// cgFetch sends an OffsetFetch v9 for one partition as member at epoch and
// returns the group error and the offset.
func cgFetch(t testing.TB, c *Cluster, group string, member *string, epoch int32, topic string, partition int32) (error, int64) {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 9
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group, rg.MemberID, rg.MemberEpoch = group, member, epoch
	rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: []int32{partition}}}
	req.Groups = append(req.Groups, rg)
	resp := groupAwait(t, groupSend(t, c, groupCoordinatorNode(t, c, group), req)).(*kmsg.OffsetFetchResponse)
	g := resp.Groups[0]
	if g.ErrorCode != 0 {
		return kerr.ErrorForCode(g.ErrorCode), -1
	}
	return nil, g.Topics[0].Partitions[0].Offset
}
