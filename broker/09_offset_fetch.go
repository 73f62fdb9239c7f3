package broker

// OffsetFetch (key 9).
//
// Versions: 1-10 (Kafka 4 removed 0). v1-7 ask for one group, v8+ for a
// batch of groups; v7 adds RequireStable, v9 the member id and epoch, v10
// names topics by id.
//
// Behaviour:
//   - Answered by the group's coordinator. v1-7: a coordinator error is the
//     top-level error from v2, each partition's error in v1; v8+: each group
//     is checked on its own.
//   - Null topics (v2+) ask for every committed offset of the group.
//   - A partition without a committed offset, and every partition of a group
//     that does not exist, answers offset -1 without error.
//   - With RequireStable (v7+), a partition whose transactional offset
//     commit awaits its transaction's marker answers UNSTABLE_OFFSET_COMMIT,
//     so that the client retries.
//   - v10: UNKNOWN_TOPIC_ID for a topic id the cluster does not know.
//   - v9's MemberId and MemberEpoch are checked for KIP-848 consumer groups:
//     without them (an admin) anything may be read; with them the member
//     must exist (UNKNOWN_MEMBER_ID) at that epoch (STALE_MEMBER_EPOCH).
//     Classic groups are not checked, as on Kafka.
//
// Skipped:
//   - authorization.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 9, min: 1, max: 10, handle: handleOffsetFetch}) }

func handleOffsetFetch(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.OffsetFetchRequest)
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	g := c.coordinators.group

	if req.Version >= 8 {
		for _, rg := range req.Groups {
			topics := make([]fetchRequestTopic, 0, len(rg.Topics))
			for _, rt := range rg.Topics {
				topics = append(topics, fetchRequestTopic{name: rt.Topic, id: rt.TopicID, partitions: rt.Partitions})
			}
			sg := kmsg.NewOffsetFetchResponseGroup()
			sg.Group = rg.Group
			err := g.checkConsumerFetcher(r.node.id, rg.Group, rg.MemberID, rg.MemberEpoch)
			if err == nil {
				sg.Topics, err = g.fetchGroup(r.node.id, rg.Group, topics, rg.Topics == nil, req.Version >= 10, req.RequireStable)
			}
			if err != nil {
				sg.ErrorCode = err.Code
			}
			resp.Groups = append(resp.Groups, sg)
		}
		return resp, nil
	}

	topics := make([]fetchRequestTopic, 0, len(req.Topics))
	for _, rt := range req.Topics {
		topics = append(topics, fetchRequestTopic{name: rt.Topic, partitions: rt.Partitions})
	}
	fetched, err := g.fetchGroup(r.node.id, req.Group, topics, req.Topics == nil && req.Version >= 2, false, req.RequireStable)
	if err != nil {
		if req.Version >= 2 {
			resp.ErrorCode = err.Code
			return resp, nil
		}
		fetched = g.fetchFailed(topics, err)
	}
	for _, ft := range fetched {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = ft.Topic
		for _, fp := range ft.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = fp.Partition, fp.Offset, fp.LeaderEpoch, fp.Metadata, fp.ErrorCode
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// fetchGroup answers one group of an OffsetFetch, or the group-level error.
func (g *groupCoordinator) fetchGroup(node int32, group string, topics []fetchRequestTopic, all, byID, requireStable bool) ([]kmsg.OffsetFetchResponseGroupTopic, *kerr.Error) {
	st, err := g.shardFor(node, group)
	switch {
	case err != nil:
		return nil, err
	case group == "":
		return nil, kerr.InvalidGroupID
	}
	return g.fetchOffsets(st, group, topics, all, byID, requireStable), nil
}

// checkConsumerFetcher applies v9's member checks when the group is a
// KIP-848 consumer group; classic groups are not checked.
func (g *groupCoordinator) checkConsumerFetcher(node int32, group string, memberID *string, epoch int32) *kerr.Error {
	st, err := g.shardFor(node, group)
	if err != nil {
		return nil // fetchGroup answers it
	}
	if grp := st.groups[group]; grp != nil && grp.consumer != nil {
		return grp.consumer.checkFetcher(memberID, epoch)
	}
	return nil
}

// fetchFailed answers every requested partition with err (v1 has no
// top-level error).
func (g *groupCoordinator) fetchFailed(topics []fetchRequestTopic, err *kerr.Error) []kmsg.OffsetFetchResponseGroupTopic {
	out := make([]kmsg.OffsetFetchResponseGroupTopic, 0, len(topics))
	for _, ft := range topics {
		rt := kmsg.NewOffsetFetchResponseGroupTopic()
		rt.Topic = ft.name
		for _, p := range ft.partitions {
			rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			rp.Partition, rp.Offset, rp.ErrorCode = p, -1, err.Code
			rt.Partitions = append(rt.Partitions, rp)
		}
		out = append(out, rt)
	}
	return out
}
