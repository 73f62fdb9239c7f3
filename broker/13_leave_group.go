package broker

// LeaveGroup (key 13).
//
// Versions: 0-5. v0-2 name one member, v3+ a batch; v5 adds a Reason.
//
// Behaviour:
//   - Removes members at the group's coordinator (NOT_COORDINATOR from any
//     other node).
//   - v0-2: one member id, whose error is the top-level error. v3+: members
//     identified by member id and/or group.instance.id, each with its own
//     error (UNKNOWN_MEMBER_ID; FENCED_INSTANCE_ID when the instance id
//     belongs to another member id).
//   - A member id handed out with MEMBER_ID_REQUIRED and never used can
//     leave too.
//   - A waiting JoinGroup or SyncGroup of a removed member is answered
//     UNKNOWN_MEMBER_ID, and the group rebalances.
//   - A group that does not exist answers UNKNOWN_MEMBER_ID.
//   - The v5 Reason is only logged (debug level).
//
// Skipped:
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 13, min: 0, max: 5, handle: handleLeaveGroup}) }

func handleLeaveGroup(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.LeaveGroupRequest)
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	g := c.coordinators.group
	members := []leaveMember{{memberID: req.MemberID}}
	if req.Version >= 3 {
		members = members[:0]
		for _, m := range req.Members {
			members = append(members, leaveMember{memberID: m.MemberID, instanceID: m.InstanceID, reason: m.Reason})
		}
	}
	st, err := g.shardFor(r.node.id, req.Group)
	if err != nil {
		resp.ErrorCode = err.Code
		return resp, nil
	}
	now := time.Now()
	groupErr, errs := g.leave(st, req.Group, members, now)
	g.reschedule(st, req.Group, now)
	switch {
	case groupErr != nil:
		resp.ErrorCode = groupErr.Code
	case req.Version < 3:
		if errs[0] != nil {
			resp.ErrorCode = errs[0].Code
		}
	default:
		for i, m := range members {
			rm := kmsg.NewLeaveGroupResponseMember()
			rm.MemberID, rm.InstanceID = m.memberID, m.instanceID
			if errs[i] != nil {
				rm.ErrorCode = errs[i].Code
			}
			resp.Members = append(resp.Members, rm)
		}
	}
	return resp, nil
}
