package broker

// OffsetDelete (key 47).
//
// Versions: 0.
//
// Behaviour:
//   - Deletes committed offsets of a group at its coordinator
//     (NOT_COORDINATOR from any other node; GROUP_ID_NOT_FOUND for no such
//     group).
//   - An empty group loses any of its offsets; a stable consumer-protocol
//     group, and a KIP-848 consumer group in any state, keeps the offsets of
//     topics a member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC per
//     partition) and loses the others; any other group with members answers
//     NON_EMPTY_GROUP.
//   - Deleted offsets are tombstoned in __consumer_offsets. Partitions
//     without an offset succeed.
//
// Skipped:
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 47, min: 0, max: 0, handle: handleOffsetDelete}) }

func handleOffsetDelete(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.OffsetDeleteRequest)
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	g := c.coordinators.group
	var tps []groupTP
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			tps = append(tps, groupTP{topic: rt.Topic, partition: rp.Partition})
		}
	}
	st, err := g.shardFor(r.node.id, req.Group)
	if err != nil {
		resp.ErrorCode = err.Code
		return resp, nil
	}
	groupErr, errs := g.deleteOffsets(st, req.Group, tps, time.Now())
	if groupErr != nil {
		resp.ErrorCode = groupErr.Code
		return resp, nil
	}
	i := 0
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetDeleteResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetDeleteResponseTopicPartition()
			sp.Partition = rp.Partition
			if errs[i] != nil {
				sp.ErrorCode = errs[i].Code
			}
			i++
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
