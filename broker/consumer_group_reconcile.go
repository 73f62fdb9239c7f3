package broker

// How a consumer group moves from one assignment to the next: the target
// assignment the group's server assignor computes when the group epoch
// moves, each member's reconciliation towards its target (KIP-848's
// current-assignment state machine), and the member-epoch checks of offset
// commits and fetches.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// updateTarget computes the target assignment of every member at the
// group epoch with the group's preferred assignor; members whose target
// changed are marked in ch.
func (c *Cluster) updateTarget(grp *classicGroup, ch *cgChanges) {
	cg := grp.consumer
	specs := make([]assignorMember, 0, len(cg.members))
	for _, m := range cg.orderedMembers() {
		subs := make(map[[16]byte]bool)
		for _, name := range c.subscribedTopics(m) {
			if t := c.topics[name]; t != nil {
				subs[t.id] = true
			}
		}
		specs = append(specs, assignorMember{id: m.id, instanceID: m.instanceID, topics: subs, current: cg.target[m.id]})
	}
	topics := make(map[[16]byte]int32)
	for _, s := range specs {
		for id := range s.topics {
			if t := c.topicsByID[id]; t != nil {
				topics[id] = int32(len(t.partitions))
			}
		}
	}
	name := cg.preferredAssignor()
	next := consumerAssignors[name](specs, topics)
	for _, s := range specs {
		if !samePartitions(next[s.id], cg.target[s.id]) {
			ch.touch(s.id)
		}
		cg.target[s.id] = next[s.id]
	}
	cg.assignmentEpoch = cg.epoch
	c.logger.Debug("consumer group target assignment computed", "group", grp.name, "epoch", cg.epoch, "assignor", name, "members", len(specs))
}

// ownedPartitions is what a heartbeat says the member owns; nil when the
// request did not say (unchanged since the last one).
func ownedPartitions(topics []kmsg.ConsumerGroupHeartbeatRequestTopic) map[cgTP]bool {
	if topics == nil {
		return nil
	}
	out := make(map[cgTP]bool)
	for _, t := range topics {
		for _, p := range t.Partitions {
			out[cgTP{t.TopicID, p}] = true
		}
	}
	return out
}

// ownsAny reports whether the member may still own one of the partitions:
// true when the request did not list what it owns.
func ownsAny(owned map[cgTP]bool, parts cgPartitions) bool {
	if owned == nil {
		return true
	}
	for tp := range parts {
		if owned[tp] {
			return true
		}
	}
	return false
}

// isSubset reports whether every owned partition is in parts.
func isSubset(owned map[cgTP]bool, parts cgPartitions) bool {
	for tp := range owned {
		if _, ok := parts[tp]; !ok {
			return false
		}
	}
	return true
}

// reconcile moves m towards its target assignment, as far as the
// partitions it still owns and those other members still hold allow. It
// reports whether m changed.
func (cg *consumerGroup) reconcile(m *consumerMember, owned map[cgTP]bool, now time.Time) bool {
	switch m.state {
	case cgStable:
		if m.epoch == cg.assignmentEpoch {
			return false
		}
		return cg.nextAssignment(m, m.epoch, owned, now)
	case cgUnrevoked:
		if ownsAny(owned, m.revoking) {
			return false
		}
		return cg.nextAssignment(m, m.epoch+1, owned, now)
	default:
		return cg.nextAssignment(m, m.epoch, owned, now)
	}
}

// nextAssignment computes m's next state: it keeps what its target still
// holds; partitions no longer in its target must be revoked first (the
// member stays at epoch); otherwise it takes the target epoch and every
// target partition no other member holds.
func (cg *consumerGroup) nextAssignment(m *consumerMember, revokeEpoch int32, owned map[cgTP]bool, now time.Time) bool {
	target := cg.target[m.id]
	keep := make(cgPartitions)
	revoke := make(cgPartitions)
	for tp, e := range m.assigned {
		if _, ok := target[tp]; ok {
			keep[tp] = e
		} else {
			revoke[tp] = e
		}
	}
	add := make(cgPartitions)
	unreleased := false
	for tp := range target {
		if _, ok := keep[tp]; ok {
			continue
		}
		if owner, held := cg.owners[tp]; held && owner != m.id {
			unreleased = true
			continue
		}
		add[tp] = cg.assignmentEpoch
	}
	before := *m
	if len(revoke) > 0 && ownsAny(owned, revoke) {
		m.state = cgUnrevoked
		m.setEpoch(revokeEpoch)
		m.assigned, m.revoking = keep, revoke
		m.revokeBy = now.Add(m.rebalanceTimeout)
	} else {
		for tp, e := range add {
			keep[tp] = e
		}
		m.state = cgStable
		if unreleased {
			m.state = cgUnreleased
		}
		m.setEpoch(cg.assignmentEpoch)
		m.assigned, m.revoking = keep, cgPartitions{}
		m.revokeBy = time.Time{}
	}
	cg.setOwner(m, before.assigned, before.revoking)
	return before.state != m.state || before.epoch != m.epoch || !samePartitions(before.assigned, m.assigned) ||
		!samePartitions(before.revoking, m.revoking)
}

// setEpoch moves the member to epoch, remembering the one it had: a
// heartbeat at that previous epoch is still accepted.
func (m *consumerMember) setEpoch(epoch int32) {
	m.prevEpoch, m.epoch = m.epoch, epoch
}

// setOwner updates the partition owners after m's holdings changed from
// (oldAssigned, oldRevoking) to its current ones.
func (cg *consumerGroup) setOwner(m *consumerMember, oldAssigned, oldRevoking cgPartitions) {
	for _, old := range []cgPartitions{oldAssigned, oldRevoking} {
		for tp := range old {
			if cg.owners[tp] == m.id {
				delete(cg.owners, tp)
			}
		}
	}
	for _, now := range []cgPartitions{m.assigned, m.revoking} {
		for tp := range now {
			cg.owners[tp] = m.id
		}
	}
}

// checkCommitter applies Kafka's group-level checks to an offset commit
// into a consumer group: a commit without member (epoch < 0) only while
// the group has no members, except a transactional one, which need not
// say who commits; otherwise the member must exist (UNKNOWN_MEMBER_ID), a
// plain commit must be OffsetCommit v9+ (UNSUPPORTED_VERSION), and the
// epoch must not be ahead of the member's (STALE_MEMBER_EPOCH, which a
// transactional commit reads as ILLEGAL_GENERATION, as Kafka maps it). An
// older epoch is checked per partition (checkCommitPartition).
func (cg *consumerGroup) checkCommitter(who offsetCommitter) *kerr.Error {
	switch {
	case who.generation < 0 && len(cg.members) == 0:
		return nil
	case who.transactional && who.generation < 0 && who.memberID == "" && who.instanceID == nil:
		return nil
	}
	m := cg.members[who.memberID]
	switch {
	case m == nil:
		return kerr.UnknownMemberID
	case !who.transactional && who.version < 9:
		return kerr.UnsupportedVersion
	case who.generation > m.epoch:
		return staleEpoch(who)
	}
	return nil
}

// staleEpoch is the error of a commit at an epoch the member cannot
// commit at.
func staleEpoch(who offsetCommitter) *kerr.Error {
	if who.transactional {
		return kerr.IllegalGeneration
	}
	return kerr.StaleMemberEpoch
}

// checkCommitPartition is KIP-1251's check of a commit at an epoch older
// than the member's: the partition must be the member's, assigned to it at
// that epoch or before (assignmentEpoch <= commit epoch <= member epoch),
// else STALE_MEMBER_EPOCH (ILLEGAL_GENERATION when transactional). A
// commit at the member's epoch, or without a member, passes.
func (c *Cluster) checkCommitPartition(cg *consumerGroup, who offsetCommitter, tp groupTP) *kerr.Error {
	m := cg.members[who.memberID]
	if m == nil || who.generation == m.epoch {
		return nil
	}
	t := c.topics[tp.topic]
	if t == nil {
		return staleEpoch(who)
	}
	key := cgTP{t.id, tp.partition}
	e, ok := m.assigned[key]
	if !ok {
		e, ok = m.revoking[key]
	}
	if !ok || e > who.generation {
		return staleEpoch(who)
	}
	return nil
}

// checkFetcher applies OffsetFetch v9's member checks to a consumer group:
// no member id and a negative epoch (an admin, or an older client) pass;
// otherwise the member must exist (UNKNOWN_MEMBER_ID) and the epoch be its
// current one (STALE_MEMBER_EPOCH).
func (cg *consumerGroup) checkFetcher(memberID *string, epoch int32) *kerr.Error {
	if memberID == nil && epoch < 0 {
		return nil
	}
	id := ""
	if memberID != nil {
		id = *memberID
	}
	m := cg.members[id]
	switch {
	case m == nil:
		return kerr.UnknownMemberID
	case m.epoch != epoch:
		return kerr.StaleMemberEpoch
	}
	return nil
}
