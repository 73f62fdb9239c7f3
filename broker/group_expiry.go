package broker

// The deadlines of classic and consumer groups, offset retention, and what
// the group coordinator keeps through a compaction of __consumer_offsets.
//
// Each group has one timer, armed at its earliest deadline: a member's
// session (unless it waits for a JoinGroup or SyncGroup answer, which the
// rebalance timeout bounds), a member id handed out with MEMBER_ID_REQUIRED,
// the end of the join or sync phase, a consumer group member's session or
// revocation deadline, and the expiry of its offsets. When it
// fires, the group is swept and the timer re-armed; deadlines that move
// later (a heartbeat) need no re-arming, a fire that finds nothing due
// just re-arms. A group with nothing due costs nothing.
//
// Offsets expire as in Kafka (OffsetsRetention, offsets.retention.minutes):
// an Empty group's offsets the retention after it became empty, a group
// without a protocol type (offsets committed from outside any membership)
// each offset the retention after its commit, a Stable consumer-protocol
// classic group and a KIP-848 consumer group the offsets of topics their
// members do not subscribe to, each after its commit; never an offset
// whose transactional commit awaits its marker. An Empty group left with no
// offsets and no open transaction is deleted (tombstones for its offsets and
// its group record), after emptyGroupDelay if it never had offsets: Kafka
// deletes those at its next cleanup, every offsets.retention.check.interval.ms.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// emptyGroupDelay is how long an Empty group without offsets lingers
// (Kafka's offsets.retention.check.interval.ms default).
const emptyGroupDelay = 10 * time.Minute

// persistGroup writes the group's record and remembers it for compaction.
func (g *groupCoordinator) persistGroup(st *groupShard, grp *classicGroup, now time.Time) *kerr.Error {
	rec := groupRecord(grp.name, grp)
	off, err := g.appendRecords(st, []kv{rec}, -1, -1, now)
	if err != nil {
		return err
	}
	grp.record, grp.recordOffset = rec.value, off
	return nil
}

// armBy makes sure the group's timer fires no later than at.
func (g *groupCoordinator) armBy(st *groupShard, grp *classicGroup, at time.Time) {
	if grp.timer == nil {
		grp.timer = newTimer(func(now time.Time) { g.groupDue(st, grp, now) })
	}
	g.c.armBy(grp.timer, at)
}

// reschedule arms the group's timer at its earliest deadline after its
// state changed (join, sync, leave, load).
func (g *groupCoordinator) reschedule(st *groupShard, name string, now time.Time) {
	if grp := st.groups[name]; grp != nil {
		if at, ok := g.nextDue(st, grp, now); ok {
			g.armBy(st, grp, at)
		}
	}
}

// scheduleAll arms the timers of every group of a shard that starts
// serving.
func (g *groupCoordinator) scheduleAll(st *groupShard) {
	now := time.Now()
	for name := range st.groups {
		g.reschedule(st, name, now)
	}
}

// forget drops a deleted group and its timer.
func (g *groupCoordinator) forget(st *groupShard, grp *classicGroup) {
	if grp.timer != nil {
		g.c.disarm(grp.timer)
	}
	if st.groups[grp.name] == grp {
		delete(st.groups, grp.name)
	}
}

// consumerShape is what of a consumer group a heartbeat may change beyond
// the heartbeating member's own deadlines.
type consumerShape struct {
	epoch   int32
	members int
}

func consumerShapeOf(st *groupShard, name string) consumerShape {
	if grp := st.groups[name]; grp != nil && grp.consumer != nil {
		return consumerShape{grp.consumer.epoch, len(grp.consumer.members)}
	}
	return consumerShape{-1, -1}
}

// afterConsumerHeartbeat arms the group's timer for what a heartbeat
// changed: the member's session and revocation deadline, cheaply, or, when
// the group's epoch or members changed, every deadline.
func (g *groupCoordinator) afterConsumerHeartbeat(st *groupShard, name, member string, before consumerShape, now time.Time) {
	grp := st.groups[name]
	if grp == nil || grp.consumer == nil {
		return
	}
	if consumerShapeOf(st, name) != before {
		g.reschedule(st, name, now)
		return
	}
	if m := grp.consumer.members[member]; m != nil {
		g.armBy(st, grp, m.lastSeen.Add(g.c.consumerSessionTimeout(name)+time.Nanosecond))
		if m.state == cgUnrevoked {
			g.armBy(st, grp, m.revokeBy.Add(time.Nanosecond))
		}
	}
}

// groupDue runs when a group's timer fires.
func (g *groupCoordinator) groupDue(st *groupShard, grp *classicGroup, now time.Time) {
	sh, err := g.shards.lookup(st.node, st.partition)
	if err != nil || sh.state != st || st.groups[grp.name] != grp {
		return
	}
	if grp.consumer != nil {
		g.sweepConsumerGroup(st, grp, now)
	} else {
		g.sweepGroup(st, grp, now)
	}
	if g.expireOffsets(st, grp, now) {
		return
	}
	if at, ok := g.nextDue(st, grp, now); ok {
		g.c.arm(grp.timer, at)
	}
}

// nextDue returns the group's earliest deadline.
func (g *groupCoordinator) nextDue(st *groupShard, grp *classicGroup, now time.Time) (time.Time, bool) {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, deadline := range grp.pendingMembers {
		consider(deadline)
	}
	for _, m := range grp.members {
		if m.join == nil && m.sync == nil {
			consider(m.sessionDeadline)
		}
	}
	switch grp.state {
	case groupPreparingRebalance:
		consider(grp.joinDeadline)
	case groupCompletingRebalance:
		consider(grp.syncDeadline)
	}
	if cg := grp.consumer; cg != nil {
		// The sweep's checks are strict: a nanosecond after the deadline.
		timeout := g.c.consumerSessionTimeout(grp.name) + time.Nanosecond
		for _, m := range cg.members {
			consider(m.lastSeen.Add(timeout))
			if m.state == cgUnrevoked {
				consider(m.revokeBy.Add(time.Nanosecond))
			}
		}
	}
	// Offsets awaiting a transaction's marker neither expire nor let
	// their group go; the marker reschedules the group (onMarker).
	if base, ok := g.retentionBase(grp); ok && !st.hasOpenTxn(grp.name) {
		for tp, o := range grp.offsets {
			if since := base(tp, o); !since.IsZero() {
				consider(since.Add(g.c.cfg.offsetsRetention))
			}
		}
		if len(grp.offsets) == 0 && grp.empty() {
			consider(grp.stateSince.Add(emptyGroupDelay))
		}
	}
	return next, !next.IsZero()
}

// retentionBase returns, for a group whose offsets may expire, when each
// offset's retention starts (zero for an offset that does not expire).
func (g *groupCoordinator) retentionBase(grp *classicGroup) (func(groupTP, committedOffset) time.Time, bool) {
	commit := func(_ groupTP, o committedOffset) time.Time { return time.UnixMilli(o.commitMs) }
	unsubscribed := func(subscribed map[string]bool) func(groupTP, committedOffset) time.Time {
		return func(tp groupTP, o committedOffset) time.Time {
			if subscribed[tp.topic] {
				return time.Time{}
			}
			return time.UnixMilli(o.commitMs)
		}
	}
	switch {
	case grp.consumer != nil:
		return unsubscribed(g.c.consumerSubscribedTopics(grp.consumer)), true
	case grp.protocolType == "":
		return commit, true
	case grp.state == groupEmpty:
		if grp.stateSince.IsZero() {
			return commit, true
		}
		return func(groupTP, committedOffset) time.Time { return grp.stateSince }, true
	case grp.protocolType == "consumer" && grp.state == groupStable:
		subscribed, ok := grp.subscribedTopics()
		if !ok {
			return nil, false
		}
		return unsubscribed(subscribed), true
	}
	return nil, false
}

// expireOffsets deletes the group's expired offsets, and the group itself
// when it is Empty with nothing left; it reports whether the group is gone.
func (g *groupCoordinator) expireOffsets(st *groupShard, grp *classicGroup, now time.Time) bool {
	base, ok := g.retentionBase(grp)
	if !ok {
		return false
	}
	var expired []groupTP
	for tp, o := range grp.offsets {
		since := base(tp, o)
		if !since.IsZero() && !now.Before(since.Add(g.c.cfg.offsetsRetention)) && !st.hasPendingTxn(grp.name, tp) {
			expired = append(expired, tp)
		}
	}
	deleteGroup := grp.empty() && len(expired) == len(grp.offsets) && !st.hasOpenTxn(grp.name) &&
		(len(grp.offsets) > 0 || !now.Before(grp.stateSince.Add(emptyGroupDelay)))
	if len(expired) == 0 && !deleteGroup {
		return false
	}
	if _, err := g.appendRecords(st, tombstones(grp, expired, deleteGroup), -1, -1, now); err != nil {
		g.c.logger.Warn("expired offsets not deleted", "group", grp.name, "err", err)
		return false
	}
	for _, tp := range expired {
		delete(grp.offsets, tp)
	}
	g.c.logger.Debug("offsets expired", "group", grp.name, "offsets", len(expired), "group_deleted", deleteGroup)
	if deleteGroup {
		g.forget(st, grp)
	}
	return deleteGroup
}

// hasOpenTxn reports whether a transactional offset commit of the group
// awaits its marker.
func (st *groupShard) hasOpenTxn(group string) bool {
	for _, byGroup := range st.pendingTxn {
		if _, ok := byGroup[group]; ok {
			return true
		}
	}
	return false
}

// liveRecords lists the records that rebuild the groups of p's serving
// shard, for compaction: each group's last group record, its committed
// offsets, and the transactional commits awaiting their marker, in their
// log order (a transactional commit replaces a committed offset only if
// written after it); then each consumer group's members and epochs, as
// its heartbeats last wrote them.
func (g *groupCoordinator) liveRecords(p *partition) ([]keptRecord, func(), bool) {
	sh, err := g.shards.lookup(p.leader, p.index)
	if err != nil || !sh.current() {
		return nil, nil, false
	}
	st := sh.state
	var kept []keptRecord
	for name, grp := range st.groups {
		if grp.record != nil {
			key := groupRecord(name, nil).key
			kept = append(kept, keptRecord{order: grp.recordOffset, rec: kv{key: key, value: grp.record}, pid: -1, epoch: -1,
				moved: func(off int64) { grp.recordOffset = off }})
		}
		for tp, o := range grp.offsets {
			kept = append(kept, keptRecord{order: o.logOffset, rec: offsetRecord(name, tp, &o), pid: -1, epoch: -1,
				moved: func(off int64) {
					o.logOffset = off
					grp.offsets[tp] = o
				}})
		}
	}
	// Consumer group records come after the others: they touch neither
	// offsets nor classic membership, only what their own records said.
	after := p.next
	for name, grp := range st.groups {
		cg := grp.consumer
		if cg == nil {
			continue
		}
		for _, m := range cg.orderedMembers() {
			kept = append(kept, keptRecord{order: after, rec: consumerMemberRecord(name, m.id, m, cg.target[m.id]), pid: -1, epoch: -1})
			after++
		}
		kept = append(kept, keptRecord{order: after, rec: consumerGroupRecord(name, cg), pid: -1, epoch: -1})
		after++
	}
	for pid, byGroup := range st.pendingTxn {
		ps := p.producers[pid]
		if ps == nil {
			return nil, nil, false
		}
		for name, offsets := range byGroup {
			for tp, o := range offsets {
				kept = append(kept, keptRecord{order: o.logOffset, rec: offsetRecord(name, tp, &o), pid: pid, epoch: ps.epoch,
					moved: func(off int64) {
						o.logOffset = off
						offsets[tp] = o
					}})
			}
		}
	}
	return kept, nil, true
}
