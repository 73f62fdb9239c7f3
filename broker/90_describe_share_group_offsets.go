package broker

// DescribeShareGroupOffsets (key 90, KIP-932).
//
// Versions: 0-1. v1 adds the lag.
//
// Behaviour:
//   - Served by the group coordinator of each group (NOT_COORDINATOR
//     elsewhere; GROUP_ID_NOT_FOUND for a name that is no share group).
//   - For each partition asked for (all initialized share-partitions when
//     Topics is null): the start offset of the share-partition as the share
//     coordinator persisted it, or -1 when the group has no state for it
//     yet, and the partition's leader epoch; v1 adds the lag, the records
//     between the start offset and the last stable offset that are neither
//     ACKNOWLEDGED nor ARCHIVED.
//   - An unknown topic or partition gets UNKNOWN_TOPIC_OR_PARTITION.
//
// Skipped:
//   - authorization.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() {
	registerAPI(apiSpec{key: 90, min: 0, max: 1, handle: handleDescribeShareGroupOffsets})
}

func handleDescribeShareGroupOffsets(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.DescribeShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
	sc := c.coordinators.share
	for _, rg := range req.Groups {
		g := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		g.GroupID = rg.GroupID
		if err := c.groupCoordinatorError(r.node.id, rg.GroupID); err != nil {
			g.ErrorCode = err.Code
			resp.Groups = append(resp.Groups, g)
			continue
		}
		if sc.groups[rg.GroupID] == nil {
			g.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "no share group has this name"
			g.ErrorMessage = &msg
			resp.Groups = append(resp.Groups, g)
			continue
		}
		topics := rg.Topics
		if topics == nil {
			topics = sc.initializedTopics(rg.GroupID)
		}
		for _, rt := range topics {
			gt := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
			gt.Topic = rt.Topic
			t := c.topics[rt.Topic]
			if t != nil {
				gt.TopicID = t.id
			}
			for _, index := range rt.Partitions {
				gp := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
				gp.Partition = index
				gp.StartOffset = -1
				if t == nil || t.internal || index < 0 || int(index) >= len(t.partitions) {
					gp.ErrorCode = kerr.UnknownTopicOrPartition.Code
					gt.Partitions = append(gt.Partitions, gp)
					continue
				}
				p := t.partitions[index]
				gp.LeaderEpoch = p.leaderEpoch
				if ps := sc.persisted(shareKey{group: rg.GroupID, topicID: t.id, partition: index}); ps != nil {
					gp.StartOffset = ps.start
					gp.Lag = persistedLag(ps, p.lastStableOffset())
				}
				gt.Partitions = append(gt.Partitions, gp)
			}
			g.Topics = append(g.Topics, gt)
		}
		resp.Groups = append(resp.Groups, g)
	}
	return resp, nil
}

// initializedTopics lists, by topic name, the partitions a group has share
// state for.
func (sc *shareCoordinator) initializedTopics(group string) []kmsg.DescribeShareGroupOffsetsRequestGroupTopic {
	var out []kmsg.DescribeShareGroupOffsetsRequestGroupTopic
	for _, key := range sc.shareStateKeys(group) {
		t := sc.c.topicsByID[key.topicID]
		if t == nil {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Topic == t.name {
			out[n-1].Partitions = append(out[n-1].Partitions, key.partition)
			continue
		}
		rt := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
		rt.Topic, rt.Partitions = t.name, []int32{key.partition}
		out = append(out, rt)
	}
	return out
}

// persistedLag counts the offsets in [start, lso) not yet done.
func persistedLag(ps *sharePersisted, lso int64) int64 {
	if lso <= ps.start {
		return 0
	}
	lag := lso - ps.start
	for i, r := range ps.recs {
		if ps.start+int64(i) < lso && r.done() {
			lag--
		}
	}
	return lag
}
