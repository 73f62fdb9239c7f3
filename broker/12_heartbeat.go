package broker

// Heartbeat (key 12).
//
// Versions: 0-4. v3 brings group.instance.id.
//
// Behaviour:
//   - Keeps a member's session alive at the group's coordinator
//     (NOT_COORDINATOR from any other node).
//   - REBALANCE_IN_PROGRESS tells the member to rejoin; UNKNOWN_MEMBER_ID
//     (including a group that does not exist or an expired member),
//     ILLEGAL_GENERATION and FENCED_INSTANCE_ID (v3+) as Kafka answers them.
//   - A member whose session timeout passes without a heartbeat, join or
//     sync is removed when the group's timer fires (group_expiry.go), which
//     starts a rebalance.
//
// Skipped:
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 12, min: 0, max: 4, handle: handleHeartbeat}) }

func handleHeartbeat(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.HeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	g := c.coordinators.group
	st, err := g.shardFor(r.node.id, req.Group)
	if err == nil {
		err = g.heartbeat(st, req, time.Now())
	}
	if err != nil {
		resp.ErrorCode = err.Code
	}
	return resp, nil
}
