package broker

// FindCoordinator: versions 0-6.
//
// Key types 0 (group), 1 (transaction) and 2 (share: "group:topicId:partition")
// in the single-key form (v0-3) and the batched form (v4+). The answer is
// the node that leads the key's internal-topic partition, placed by Java's
// String.hashCode as Kafka places it; any node answers for any key. An
// unknown key type gets INVALID_REQUEST, an empty transactional id
// INVALID_REQUEST as well. Skipped: COORDINATOR_LOAD_IN_PROGRESS (loading is
// instant here).

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 10, min: 0, max: 6, handle: handleFindCoordinator}) }

func handleFindCoordinator(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	for _, key := range keys {
		rc := kmsg.NewFindCoordinatorResponseCoordinator()
		rc.Key = key
		rc.NodeID, rc.Port = -1, -1
		switch {
		case req.CoordinatorType < 0 || req.CoordinatorType > coordinatorShare:
			rc.ErrorCode = kerr.InvalidRequest.Code
		case key == "" && req.CoordinatorType != coordinatorGroup:
			rc.ErrorCode = kerr.InvalidRequest.Code
		default:
			n := c.nodes[c.coordinatorPartitionFor(req.CoordinatorType, key).leader]
			rc.NodeID, rc.Host, rc.Port = n.id, n.host, n.port
		}
		resp.Coordinators = append(resp.Coordinators, rc)
	}
	if req.Version < 4 {
		rc := resp.Coordinators[0]
		resp.Coordinators = nil
		resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = rc.ErrorCode, rc.NodeID, rc.Host, rc.Port
	}
	return resp, nil
}
