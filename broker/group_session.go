package broker

// SyncGroup, Heartbeat and LeaveGroup of the classic protocol, the sweep of
// their timeouts, and restoring a group's membership from its record.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sync serves a SyncGroup. It returns the answer, or nil when the member
// waits for the leader's assignments.
func (g *groupCoordinator) sync(st *groupShard, r *request, req *kmsg.SyncGroupRequest, now time.Time) *kmsg.SyncGroupResponse {
	grp := st.groups[req.Group]
	if grp == nil {
		return syncError(kerr.UnknownMemberID)
	}
	if err := grp.checkMember(req.MemberID, req.InstanceID); err != nil {
		return syncError(err)
	}
	m := grp.members[req.MemberID]
	switch {
	case req.Generation != grp.generation:
		return syncError(kerr.IllegalGeneration)
	case req.ProtocolType != nil && *req.ProtocolType != grp.protocolType,
		req.Protocol != nil && *req.Protocol != grp.protocol:
		return syncError(kerr.InconsistentGroupProtocol)
	}
	switch grp.state {
	case groupPreparingRebalance:
		return syncError(kerr.RebalanceInProgress)
	case groupStable:
		m.sessionDeadline = now.Add(m.sessionTimeout)
		return grp.syncResponse(m)
	case groupCompletingRebalance:
	default:
		return syncError(kerr.UnknownMemberID)
	}
	m.sessionDeadline = now.Add(m.sessionTimeout)
	m.answerSync(syncError(kerr.RebalanceInProgress)) // superseded by this request
	m.sync = r
	if m.id != grp.leader {
		return nil
	}
	assigned := make(map[string][]byte, len(req.GroupAssignment))
	for _, a := range req.GroupAssignment {
		assigned[a.MemberID] = a.MemberAssignment
	}
	for id, o := range grp.members {
		o.assignment = assigned[id]
		if o.assignment == nil {
			o.assignment = []byte{}
		}
	}
	if err := g.persistGroup(st, grp, now); err != nil {
		for _, o := range grp.members {
			o.assignment = nil
			o.answerSync(syncError(err))
		}
		g.startRebalance(grp, now)
		return nil
	}
	grp.state = groupStable
	for _, o := range grp.members {
		o.answerSync(grp.syncResponse(o))
	}
	g.c.logger.Debug("group stable", "group", grp.name, "generation", grp.generation)
	return nil
}

func (grp *classicGroup) syncResponse(m *groupMember) *kmsg.SyncGroupResponse {
	resp := kmsg.NewPtrSyncGroupResponse()
	protocolType, protocol := grp.protocolType, grp.protocol
	resp.ProtocolType, resp.Protocol = &protocolType, &protocol
	resp.MemberAssignment = m.assignment
	if resp.MemberAssignment == nil {
		resp.MemberAssignment = []byte{}
	}
	return resp
}

// heartbeat serves a Heartbeat: it keeps the member's session alive and
// tells it, with REBALANCE_IN_PROGRESS, that it must rejoin.
func (g *groupCoordinator) heartbeat(st *groupShard, req *kmsg.HeartbeatRequest, now time.Time) *kerr.Error {
	grp := st.groups[req.Group]
	if grp == nil {
		return kerr.UnknownMemberID
	}
	if err := grp.checkMember(req.MemberID, req.InstanceID); err != nil {
		return err
	}
	if req.Generation != grp.generation {
		return kerr.IllegalGeneration
	}
	m := grp.members[req.MemberID]
	m.sessionDeadline = now.Add(m.sessionTimeout)
	g.armBy(st, grp, m.sessionDeadline)
	if grp.state == groupPreparingRebalance {
		return kerr.RebalanceInProgress
	}
	return nil
}

// leaveMember is one member a LeaveGroup removes: by member id, or by
// group.instance.id (then the member id, if given, must match).
type leaveMember struct {
	memberID   string
	instanceID *string
	reason     *string // v5; logged only
}

// leave serves a LeaveGroup: the group-level error, or one error per
// member. Removing members starts a rebalance.
func (g *groupCoordinator) leave(st *groupShard, group string, members []leaveMember, now time.Time) (*kerr.Error, []*kerr.Error) {
	grp := st.groups[group]
	if grp == nil {
		return kerr.UnknownMemberID, nil
	}
	errs := make([]*kerr.Error, len(members))
	removed, unclaimed := false, false
	for i, lm := range members {
		id := lm.memberID
		if lm.instanceID != nil {
			owner, ok := grp.staticMembers[*lm.instanceID]
			switch {
			case !ok:
				errs[i] = kerr.UnknownMemberID
				continue
			case id != "" && id != owner:
				errs[i] = kerr.FencedInstanceID
				continue
			}
			id = owner
		}
		if _, ok := grp.pendingMembers[id]; ok {
			delete(grp.pendingMembers, id)
			unclaimed = true
			continue
		}
		m := grp.members[id]
		if m == nil {
			errs[i] = kerr.UnknownMemberID
			continue
		}
		reason := ""
		if lm.reason != nil {
			reason = *lm.reason
		}
		g.c.logger.Debug("group member left", "group", group, "member", id, "reason", reason)
		grp.removeMember(m)
		removed = true
	}
	switch {
	case removed:
		g.membersGone(st, grp, now)
	case unclaimed:
		g.maybeCompleteJoin(st, grp, now)
	}
	return nil, errs
}

// sweepGroup expires sessions, unclaimed member ids and the join and sync
// windows. A member waiting for a JoinGroup or SyncGroup answer does not
// expire: the rebalance timeout bounds its wait instead.
func (g *groupCoordinator) sweepGroup(st *groupShard, grp *classicGroup, now time.Time) {
	for id, deadline := range grp.pendingMembers {
		if now.After(deadline) {
			delete(grp.pendingMembers, id)
		}
	}
	expired := false
	for _, m := range grp.members {
		if m.join == nil && m.sync == nil && now.After(m.sessionDeadline) {
			g.c.logger.Info("group member session expired", "group", grp.name, "member", m.id)
			grp.removeMember(m)
			expired = true
		}
	}
	switch {
	case grp.state == groupPreparingRebalance && !now.Before(grp.joinDeadline):
		g.completeJoin(st, grp, now)
	case grp.state == groupCompletingRebalance && !now.Before(grp.syncDeadline):
		for _, m := range grp.members {
			if m.sync == nil {
				g.c.logger.Info("group member did not sync in time", "group", grp.name, "member", m.id)
				grp.removeMember(m)
			}
		}
		g.membersGone(st, grp, now)
	case expired:
		g.membersGone(st, grp, now)
	default:
		g.maybeCompleteJoin(st, grp, now)
	}
}

// restore sets the group's membership from a group record (replay): a
// group with members is Stable and their sessions start now.
func (grp *classicGroup) restore(v groupRecordValue, now time.Time) {
	grp.protocolType, grp.generation, grp.protocol, grp.leader = v.ProtocolType, v.Generation, v.Protocol, v.Leader
	grp.members = make(map[string]*groupMember)
	grp.staticMembers = make(map[string]string)
	grp.pendingMembers = make(map[string]time.Time)
	grp.state = groupEmpty
	if v.CurrentStateTimestamp > 0 {
		grp.stateSince = time.UnixMilli(v.CurrentStateTimestamp)
	}
	for _, rm := range v.Members {
		m := &groupMember{
			id:               rm.MemberID,
			instanceID:       rm.InstanceID,
			clientID:         rm.ClientID,
			clientHost:       rm.ClientHost,
			sessionTimeout:   time.Duration(rm.SessionTimeoutMs) * time.Millisecond,
			rebalanceTimeout: time.Duration(rm.RebalanceTimeoutMs) * time.Millisecond,
			protocols:        []kmsg.JoinGroupRequestProtocol{{Name: v.Protocol, Metadata: rm.Metadata}},
			assignment:       rm.Assignment,
			joinSeq:          grp.nextJoinSeq,
		}
		grp.nextJoinSeq++
		m.sessionDeadline = now.Add(m.sessionTimeout)
		grp.members[m.id] = m
		if m.instanceID != nil {
			grp.staticMembers[*m.instanceID] = m.id
		}
		grp.state = groupStable
	}
}
