package broker

// ConsumerGroupHeartbeat at the group coordinator: members join, heartbeat
// and leave; static members (group.instance.id) leave for a while and are
// replaced by their next incarnation.

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cgHeartbeatError is a heartbeat's error code and message.
type cgHeartbeatError struct {
	err *kerr.Error
	msg string
}

func cgFail(err *kerr.Error, format string, args ...any) *cgHeartbeatError {
	return &cgHeartbeatError{err: err, msg: fmt.Sprintf(format, args...)}
}

// consumerHeartbeat serves a validated ConsumerGroupHeartbeat (see
// 68_consumer_group_heartbeat.go) at the group's shard.
func (g *groupCoordinator) consumerHeartbeat(st *groupShard, r *request, req *kmsg.ConsumerGroupHeartbeatRequest, re *subscriptionRegex, now time.Time) (*kmsg.ConsumerGroupHeartbeatResponse, *cgHeartbeatError) {
	if req.MemberEpoch == cgLeaveEpoch || req.MemberEpoch == cgStaticLeaveEpoch {
		return g.consumerLeave(st, req, now)
	}
	create := req.MemberEpoch == 0
	grp, err, msg := g.consumerGroupFor(st, req.Group, create)
	if err != nil {
		return nil, &cgHeartbeatError{err: err, msg: msg}
	}
	cg := grp.consumer
	ch := newCGChanges()
	owned := ownedPartitions(req.Topics)
	if create {
		owned = map[cgTP]bool{} // a (re)joining member owns nothing
	}
	m, ferr := g.consumerMemberFor(grp, req, owned, ch)
	if ferr != nil {
		return nil, ferr
	}
	bump := g.updateConsumerMember(m, r, req, re)
	if bump {
		ch.touch(m.id)
	}
	m.lastSeen = now
	// A subscription change and a change of the subscribed topics'
	// metadata each move the epoch, so a new group's first member starts
	// at epoch 2, as on Kafka.
	if bump {
		cg.epoch++
	}
	for _, other := range cg.members {
		g.c.resolveSubscription(other.re)
	}
	if md := g.c.consumerMetadata(cg); md != cg.metadata {
		cg.metadata = md
		cg.epoch++
	}
	if cg.epoch == 0 {
		cg.epoch++ // a member that subscribes to nothing that exists
	}
	if cg.epoch > cg.assignmentEpoch {
		g.c.updateTarget(grp, ch)
	}
	before := cloneAssigned(m)
	if cg.reconcile(m, owned, now) {
		ch.touch(m.id)
	}
	if len(ch.members) > 0 {
		if _, err := g.appendRecords(st, ch.records(grp), -1, -1, now); err != nil {
			return nil, &cgHeartbeatError{err: err}
		}
	}
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	resp.MemberID = kmsg.StringPtr(m.id)
	resp.MemberEpoch = m.epoch
	resp.HeartbeatIntervalMillis = int32(g.c.consumerHeartbeatInterval(grp.name).Milliseconds())
	full := create || req.RebalanceTimeoutMillis != -1 && (req.SubscribedTopicNames != nil || req.SubscribedTopicRegex != nil) && req.Topics != nil
	if full || !samePartitions(before, m.assigned) {
		resp.Assignment = heartbeatAssignment(m.assigned)
	}
	return resp, nil
}

func cloneAssigned(m *consumerMember) cgPartitions { return m.assigned.clone() }

// heartbeatAssignment renders assigned partitions by topic id.
func heartbeatAssignment(parts cgPartitions) *kmsg.ConsumerGroupHeartbeatResponseAssignment {
	a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
	a.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
	for _, tp := range parts.byTopic() {
		t := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
		t.TopicID, t.Partitions = tp.topicID, tp.partitions
		a.Topics = append(a.Topics, t)
	}
	return &a
}

// consumerMemberFor finds (or, joining, creates) the heartbeat's member and
// checks its epoch and instance id as Kafka does.
func (g *groupCoordinator) consumerMemberFor(grp *classicGroup, req *kmsg.ConsumerGroupHeartbeatRequest, owned map[cgTP]bool, ch *cgChanges) (*consumerMember, *cgHeartbeatError) {
	cg := grp.consumer
	if req.InstanceID != nil {
		return g.staticConsumerMember(grp, req, owned, ch)
	}
	m := cg.members[req.MemberID]
	if req.MemberEpoch == 0 {
		if m == nil {
			m = newConsumerMember(req.MemberID)
			cg.members[m.id] = m
			g.c.logger.Info("consumer group member joined", "group", grp.name, "member", m.id)
		}
		return m, nil
	}
	if m == nil {
		return nil, cgFail(kerr.UnknownMemberID, "Member %s is not a member of group %s.", req.MemberID, grp.name)
	}
	return m, checkMemberEpoch(m, req.MemberEpoch, owned)
}

func newConsumerMember(id string) *consumerMember {
	return &consumerMember{id: id, assigned: cgPartitions{}, revoking: cgPartitions{}}
}

// checkMemberEpoch accepts the member's epoch, or its previous epoch when
// what it owns is part of its assignment (the answer that raised the epoch
// was lost); anything else is FENCED_MEMBER_EPOCH.
func checkMemberEpoch(m *consumerMember, epoch int32, owned map[cgTP]bool) *cgHeartbeatError {
	switch {
	case epoch > m.epoch:
		return cgFail(kerr.FencedMemberEpoch, "The consumer group member has a greater member epoch (%d) than the one known by the group coordinator (%d). The member must abandon all its partitions and rejoin.", epoch, m.epoch)
	case epoch < m.epoch && (epoch != m.prevEpoch || owned == nil || !isSubset(owned, m.assigned)):
		return cgFail(kerr.FencedMemberEpoch, "The consumer group member has a smaller member epoch (%d) than the one known by the group coordinator (%d). The member must abandon all its partitions and rejoin.", epoch, m.epoch)
	}
	return nil
}

// staticConsumerMember is consumerMemberFor for a static member: joining,
// a new instance id is a new member, the same member id rejoins, and a
// member that left temporarily (epoch -2) is replaced by the joining one,
// which inherits its assignment; an instance id still held by another
// member is UNRELEASED_INSTANCE_ID. Otherwise the instance id must be
// known (UNKNOWN_MEMBER_ID) and held by this member id
// (FENCED_INSTANCE_ID).
func (g *groupCoordinator) staticConsumerMember(grp *classicGroup, req *kmsg.ConsumerGroupHeartbeatRequest, owned map[cgTP]bool, ch *cgChanges) (*consumerMember, *cgHeartbeatError) {
	cg := grp.consumer
	instance := *req.InstanceID
	holderID, held := cg.static[instance]
	holder := cg.members[holderID]
	if req.MemberEpoch != 0 {
		switch {
		case !held || holder == nil:
			return nil, cgFail(kerr.UnknownMemberID, "Instance id %s is unknown.", instance)
		case holderID != req.MemberID:
			return nil, cgFail(kerr.FencedInstanceID, "Static member %s with instance id %s was fenced by member %s.", req.MemberID, instance, holderID)
		}
		return holder, checkMemberEpoch(holder, req.MemberEpoch, owned)
	}
	switch {
	case !held || holder == nil:
		if m := cg.members[req.MemberID]; m != nil {
			return m, nil
		}
		m := newConsumerMember(req.MemberID)
		m.instanceID = &instance
		cg.members[m.id] = m
		cg.static[instance] = m.id
		g.c.logger.Info("static consumer group member joined", "group", grp.name, "member", m.id, "instance_id", instance)
		return m, nil
	case holderID == req.MemberID:
		return holder, nil
	case holder.epoch != cgStaticLeaveEpoch:
		return nil, cgFail(kerr.UnreleasedInstanceID, "Static member %s with instance id %s cannot join the group because the instance id is owned by %s member.", req.MemberID, instance, holderID)
	}
	// The new incarnation takes the place of the one that left: same
	// assignment and target, epoch 0 until it reconciles.
	m := newConsumerMember(req.MemberID)
	*m = *holder
	m.id = req.MemberID
	m.epoch, m.prevEpoch = 0, 0
	m.assigned, m.revoking = holder.assigned.clone(), cgPartitions{}
	delete(cg.members, holderID)
	cg.members[m.id] = m
	cg.target[m.id] = cg.target[holderID]
	delete(cg.target, holderID)
	cg.static[instance] = m.id
	for tp, owner := range cg.owners {
		if owner == holderID {
			delete(cg.owners, tp)
		}
	}
	cg.setOwner(m, nil, nil)
	ch.remove(holderID)
	ch.touch(m.id)
	g.c.logger.Info("static consumer group member replaced", "group", grp.name, "instance_id", instance, "old_member", holderID, "member", m.id)
	return m, nil
}

// updateConsumerMember applies what the heartbeat says about the member
// (fields left null are unchanged) and reports whether its subscription
// changed, which moves the group epoch. A new member's first subscription
// counts as a change.
func (g *groupCoordinator) updateConsumerMember(m *consumerMember, r *request, req *kmsg.ConsumerGroupHeartbeatRequest, re *subscriptionRegex) bool {
	changed := false
	if req.InstanceID != nil {
		m.instanceID = req.InstanceID
	}
	if req.RackID != nil {
		m.rackID = req.RackID
	}
	if req.RebalanceTimeoutMillis != -1 {
		m.rebalanceTimeout = time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	}
	if req.ServerAssignor != nil {
		m.assignor = *req.ServerAssignor
	}
	if req.SubscribedTopicNames != nil {
		topics := slices.Clone(req.SubscribedTopicNames)
		sort.Strings(topics)
		topics = slices.Compact(topics)
		if !slices.Equal(topics, m.topics) {
			changed = true
		}
		m.topics = topics
	}
	if req.SubscribedTopicRegex != nil {
		switch {
		case *req.SubscribedTopicRegex == "":
			changed = changed || m.regex != nil
			m.regex, m.re = nil, nil
		case m.regex == nil || *m.regex != *req.SubscribedTopicRegex:
			// Compiled by the handler (validateConsumerHeartbeat).
			expr := *req.SubscribedTopicRegex
			m.regex, m.re = &expr, re
			changed = true
		}
	}
	m.clientID = r.clientID
	m.clientHost = clientHost(r)
	return changed
}

// consumerLeave serves a heartbeat at epoch -1 (leave) or -2 (a static
// member leaving for a while: it keeps its partitions, which nobody else
// gets, until its session times out or its next incarnation replaces it).
func (g *groupCoordinator) consumerLeave(st *groupShard, req *kmsg.ConsumerGroupHeartbeatRequest, now time.Time) (*kmsg.ConsumerGroupHeartbeatResponse, *cgHeartbeatError) {
	grp, err, msg := g.consumerGroupFor(st, req.Group, false)
	if err != nil {
		return nil, &cgHeartbeatError{err: err, msg: msg}
	}
	cg := grp.consumer
	var m *consumerMember
	if req.InstanceID == nil {
		if m = cg.members[req.MemberID]; m == nil {
			return nil, cgFail(kerr.UnknownMemberID, "Member %s is not a member of group %s.", req.MemberID, grp.name)
		}
	} else {
		holderID, held := cg.static[*req.InstanceID]
		switch {
		case !held:
			return nil, cgFail(kerr.UnknownMemberID, "Instance id %s is unknown.", *req.InstanceID)
		case holderID != req.MemberID:
			return nil, cgFail(kerr.FencedInstanceID, "Static member %s with instance id %s was fenced by member %s.", req.MemberID, *req.InstanceID, holderID)
		}
		m = cg.members[holderID]
	}
	ch := newCGChanges()
	if req.MemberEpoch == cgStaticLeaveEpoch {
		revoking := m.revoking
		m.epoch, m.state = cgStaticLeaveEpoch, cgStable
		m.revoking, m.revokeBy = cgPartitions{}, time.Time{}
		cg.setOwner(m, m.assigned, revoking)
		ch.touch(m.id)
		g.c.logger.Info("static consumer group member left temporarily", "group", grp.name, "member", m.id, "instance_id", *m.instanceID)
	} else {
		g.removeConsumerMember(grp, m, "left", ch)
	}
	if _, err := g.appendRecords(st, ch.records(grp), -1, -1, now); err != nil {
		return nil, &cgHeartbeatError{err: err}
	}
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	resp.MemberID = kmsg.StringPtr(req.MemberID)
	resp.MemberEpoch = req.MemberEpoch
	return resp, nil
}
