package broker

// OffsetForLeaderEpoch (key 23).
//
// Versions: 0-4.
//
// Behaviour:
//   - Answers the end offset of the largest leader epoch at or below the
//     asked one, from the epoch history every leadership move appends to,
//     after checking the client's current leader epoch.
//   - Consumers use it to detect truncation after a leader change; there
//     never is any here, since a partition's one log moves with its
//     leadership.
//
// Skipped:
//   - ReplicaID: a follower would be answered as a consumer is (there are no
//     followers);
//   - authorization.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 23, min: 0, max: 4, handle: handleOffsetForLeaderEpoch}) }

func handleOffsetForLeaderEpoch(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		t := c.topics[rt.Topic]
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LeaderEpoch, sp.EndOffset = -1, -1
			switch {
			case t == nil || rp.Partition < 0 || int(rp.Partition) >= len(t.partitions):
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			default:
				p := t.partitions[rp.Partition]
				if err := p.checkLeader(r.node.id, rp.CurrentLeaderEpoch); err != nil {
					sp.ErrorCode = err.Code
				} else {
					sp.LeaderEpoch, sp.EndOffset = p.offsetForEpoch(rp.LeaderEpoch)
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
