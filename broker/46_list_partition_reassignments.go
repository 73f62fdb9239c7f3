package broker

// ListPartitionReassignments (key 46).
//
// Versions: 0.
//
// Behaviour:
//   - Reassignments complete at once, so none is ever ongoing: the answer
//     lists no partitions.
//   - Unknown topics or partitions asked for by name get
//     UNKNOWN_TOPIC_OR_PARTITION at the top level, as Kafka answers them.
//
// Skipped:
//   - authorization.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 46, min: 0, max: 0, handle: handleListPartitionReassignments}) }

func handleListPartitionReassignments(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ListPartitionReassignmentsRequest)
	resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	for _, rt := range req.Topics {
		for _, p := range rt.Partitions {
			if c.partitionOf(rt.Topic, p) == nil {
				resp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
		}
	}
	return resp, nil
}
