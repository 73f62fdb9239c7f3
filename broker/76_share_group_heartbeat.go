package broker

// ShareGroupHeartbeat (key 76, KIP-932).
//
// Versions: 1 (version 0 was Kafka 4.0's early access and is gone).
//
// Behaviour:
//   - Served by the group coordinator (NOT_COORDINATOR elsewhere).
//   - Epoch 0 joins (creating the group; SubscribedTopicNames required) or,
//     for a member the group has, rejoins keeping its epoch unless the
//     subscription changed; -1 leaves (the answer echoes the member id);
//     any other epoch must be the member's current one or the one before
//     it (accepted, as Kafka accepts a client that lost the answer raising
//     it; FENCED_MEMBER_EPOCH otherwise).
//   - A non-zero epoch to a group that does not exist is GROUP_ID_NOT_FOUND,
//     to a member the group does not have UNKNOWN_MEMBER_ID.
//   - Every member is assigned every partition of the topics it subscribes
//     to; the assignment is sent on joining, on a heartbeat that carries the
//     subscription and whenever it changes, and the share state of newly
//     assigned partitions is initialized from then on: 250 share-partitions
//     per turn of the loop, the rest in later turns (Kafka initializes them
//     asynchronously too); a ShareFetch that comes first initializes its
//     own partition.
//   - Members that miss share.session.timeout.ms are fenced.
//   - As on Kafka 4.4, whose group coordinator does not tell the
//     share-partition leaders, leaving or being fenced releases nothing
//     and ends no share session: the member keeps its records, and its
//     sessions serve it, until a session closes (epoch -1), its
//     connection closes, or the locks expire (share_session.go). A session
//     of a departed member that no connection would release any more ends,
//     keeping its records until their locks expire (Kafka keeps such a
//     session until its member closes it).
//
// Cost:
//   - O(P) per heartbeat for a member assigned P partitions (the assignment
//     is built and compared), plus at most 250 state records written in
//     its turn.
//
// Skipped:
//   - GROUP_MAX_SIZE_REACHED;
//   - rack-aware assignment (and any division of partitions among
//     members: each gets them all);
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 76, min: 1, max: 1, handle: handleShareGroupHeartbeat}) }

func handleShareGroupHeartbeat(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ShareGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
	fail := func(err *kerr.Error, msg string) (kmsg.Response, error) {
		setError(&resp.ErrorCode, &resp.ErrorMessage, err, msg)
		return resp, nil
	}
	switch {
	case req.GroupID == "":
		return fail(kerr.InvalidRequest, "GroupID is empty")
	case req.MemberID == "":
		return fail(kerr.InvalidRequest, "MemberID is empty: share group members choose their own id")
	}
	if err := c.groupCoordinatorError(r.node.id, req.GroupID); err != nil {
		return fail(err, "")
	}
	if err, msg := c.coordinators.share.heartbeat(r, req, resp, time.Now()); err != nil {
		return fail(err, msg)
	}
	return resp, nil
}
