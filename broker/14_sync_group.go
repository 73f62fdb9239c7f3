package broker

// SyncGroup (key 14).
//
// Versions: 0-5. v3 brings group.instance.id, v5 the protocol type and name.
//
// Behaviour:
//   - Hands out the leader's assignments at the group's coordinator
//     (NOT_COORDINATOR from any other node).
//   - While the group awaits the leader, every member's SyncGroup waits
//     (deferred answer); the leader's SyncGroup records the group
//     (generation, protocol, members, assignments) in __consumer_offsets,
//     makes the group Stable and answers everyone. A member of a stable
//     group gets its assignment at once.
//   - Errors: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID (v3+),
//     ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (a new rebalance began;
//     waiting SyncGroups get it too), INCONSISTENT_GROUP_PROTOCOL when v5's
//     protocol type or name differ from the group's.
//   - If the leader does not sync within the rebalance timeout, members that
//     did not sync are removed and the group rebalances.
//
// Skipped:
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 14, min: 0, max: 5, handle: handleSyncGroup}) }

func handleSyncGroup(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.SyncGroupRequest)
	g := c.coordinators.group
	st, err := g.shardFor(r.node.id, req.Group)
	if err != nil {
		return syncError(err), nil
	}
	now := time.Now()
	defer g.reschedule(st, req.Group, now)
	if resp := g.sync(st, r, req, now); resp != nil {
		return resp, nil
	}
	return nil, nil // answered when the leader's assignments arrive
}
