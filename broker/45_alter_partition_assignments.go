package broker

// AlterPartitionReassignments (key 45).
//
// Versions: 0-1.
//
// Behaviour:
//   - A reassignment of any partition, internal ones included, is an
//     immediate leadership move to the first listed replica (the only copy
//     moves with it): the leader epoch is bumped, and coordinators of
//     internal partitions resign on the old node and reload on the new one.
//   - A null replica list (cancel) is a no-op, since no reassignment is ever
//     in flight.
//   - Errors: more than one replica (INVALID_REPLICA_ASSIGNMENT: one copy
//     only), an unknown node (INVALID_REPLICA_ASSIGNMENT), an unknown
//     partition (UNKNOWN_TOPIC_OR_PARTITION).
//
// Skipped:
//   - replication (there is one copy);
//   - authorization.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 45, min: 0, max: 1, handle: handleAlterPartitionAssignments}) }

func handleAlterPartitionAssignments(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.AlterPartitionAssignmentsRequest)
	resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			sp.Partition = rp.Partition
			p := c.partitionOf(rt.Topic, rp.Partition)
			switch {
			case p == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.Replicas == nil:
			case len(rp.Replicas) != 1 || c.nodeByID(rp.Replicas[0]) == nil:
				sp.ErrorCode = kerr.InvalidReplicaAssignment.Code
				msg := "the bundled cluster keeps one copy: name exactly one existing node"
				sp.ErrorMessage = &msg
			default:
				c.moveLeader(p, rp.Replicas[0])
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
