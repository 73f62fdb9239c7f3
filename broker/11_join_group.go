package broker

// JoinGroup (key 11).
//
// Versions: 0-9. v4 brings MEMBER_ID_REQUIRED (KIP-394), v5 static members.
//
// Behaviour:
//   - Classic group membership at the group's coordinator (NOT_COORDINATOR
//     from any other node).
//   - A new dynamic member without an id gets one: from v4 in a
//     MEMBER_ID_REQUIRED answer it must come back with, below v4 at once.
//   - A join starts a rebalance (or joins the one running); the answer is
//     deferred until every member has rejoined or the longest rebalance
//     timeout of the group has passed (members that did not rejoin are
//     removed). The generation then advances, the protocol most members
//     prefer among those all support is chosen, and the leader (kept if it
//     rejoined, else the earliest member) gets every member's metadata.
//   - A known member rejoining a stable group with unchanged protocols, or
//     one that missed the answer of the generation being synced, is answered
//     at once.
//   - Static members (group.instance.id, v5+): a restarted instance gets a
//     new member id, its old id is fenced (FENCED_INSTANCE_ID), and a
//     restarted follower of a stable group whose protocols did not change
//     keeps its assignment without a rebalance.
//   - Errors: INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT (not positive or
//     over the maximum), INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID.
//   - A KIP-848 consumer group without members becomes a classic group again
//     (keeping its offsets), as on Kafka; one with members answers
//     INCONSISTENT_GROUP_PROTOCOL (Kafka would take the classic member into
//     the consumer group: not implemented).
//   - v8's Reason is ignored.
//
// Skipped:
//   - the initial rebalance delay of an empty group;
//   - v9's SkipAssignment (always false: a restarted static leader triggers
//     a rebalance instead);
//   - the 6 s minimum session timeout.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 11, min: 0, max: 9, handle: handleJoinGroup}) }

func handleJoinGroup(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.JoinGroupRequest)
	g := c.coordinators.group
	st, err := g.shardFor(r.node.id, req.Group)
	if err != nil {
		return joinError(err), nil
	}
	now := time.Now()
	defer g.reschedule(st, req.Group, now)
	if resp := g.join(st, r, req, now); resp != nil {
		return resp, nil
	}
	return nil, nil // answered when the join phase completes
}
