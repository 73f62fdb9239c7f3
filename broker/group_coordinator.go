package broker

// The group coordinator of classic and KIP-848 consumer groups.
//
// Each node runs the coordinator of the __consumer_offsets partitions it
// leads; a group lives on partition CoordinatorPartition(0, group). The
// state of a partition (its groups, their members and committed offsets,
// and the transactional offset commits waiting for their marker) is built
// by replaying the partition's log, so a new leader serves exactly what the
// old one wrote. Every answer goes through shards.lookup first: a node that
// no longer leads the partition at the epoch it loaded it in answers
// NOT_COORDINATOR, and its deferred JoinGroup/SyncGroup answers are failed
// with NOT_COORDINATOR as soon as the shard stops serving.
//
// Timeouts (member sessions, the join and sync windows of a rebalance,
// member ids handed out with MEMBER_ID_REQUIRED) and offset retention are
// driven by one timer per group (group_expiry.go), which also expires
// offsets and empty groups as Kafka's offsets.retention.minutes rules say;
// the log is compacted to the live groups and offsets (compaction.go).
// KIP-848 consumer groups live in the same shards (consumer_group.go).
// Deliberately skipped: the initial rebalance delay of an empty group (a
// group completes its first join as soon as its members have joined), and
// the minimum session timeout of 6s (any
// positive timeout up to the maximum is accepted, so tests can expire
// sessions quickly).

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare/wire"
)

// groupCoordinator owns the classic groups of every node.
type groupCoordinator struct {
	c      *Cluster
	shards *shards[*groupShard]
}

// groupShard is one node's copy of one __consumer_offsets partition's
// groups.
type groupShard struct {
	node      int32
	partition int32
	groups    map[string]*classicGroup
	// pendingTxn holds transactional offset commits written to the log
	// whose transaction has not ended yet, by producer id.
	pendingTxn map[int64]map[string]map[groupTP]committedOffset
}

// groupTP names one partition of one topic inside a group's offsets.
type groupTP struct {
	topic     string
	partition int32
}

// committedOffset is one committed (or pending transactional) offset.
type committedOffset struct {
	offset      int64
	leaderEpoch int32
	metadata    string
	commitMs    int64
	// logOffset is where the commit record sits in __consumer_offsets; when
	// a transaction commits, its offsets replace a committed one only if
	// they were written after it, as Kafka's replay does.
	logOffset int64
}

// newGroupCoordinator loads every __consumer_offsets partition at its
// leader and registers the coordinator's listeners: shards follow leader
// moves, a loaded shard arms its groups' timers and a resigning one
// disarms them and answers its waiting joins and syncs; markers resolve
// transactional offset commits; compaction keeps the live records.
func newGroupCoordinator(c *Cluster) *groupCoordinator {
	g := &groupCoordinator{c: c}
	g.shards = newShards(c, wire.ConsumerOffsetsTopic, shardHooks[*groupShard]{
		load:      g.load,
		afterLoad: func(sh *shard[*groupShard]) { g.scheduleAll(sh.state) },
		unload:    func(sh *shard[*groupShard]) { g.resign(sh.state) },
	})
	c.onMarker(wire.ConsumerOffsetsTopic, g.onMarker)
	c.onCompact(wire.ConsumerOffsetsTopic, g.liveRecords)
	return g
}

// load builds node's state of p by replaying p's log.
func (g *groupCoordinator) load(p *partition, node int32) *groupShard {
	st := &groupShard{
		node:       node,
		partition:  p.index,
		groups:     make(map[string]*classicGroup),
		pendingTxn: make(map[int64]map[string]map[groupTP]committedOffset),
	}
	now := time.Now()
	for _, b := range p.batches {
		if err := st.replayBatch(b, now); err != nil {
			g.c.logger.Error("skipping unreadable group coordinator batch", "partition", p.index, "offset", b.base, "err", err)
		}
	}
	g.c.logger.Debug("group coordinator loaded", "node", node, "partition", p.index, "groups", len(st.groups))
	return st
}

// resign fails every deferred answer of a shard that stopped serving and
// stops its groups' timers.
func (g *groupCoordinator) resign(st *groupShard) {
	for _, grp := range st.groups {
		if grp.timer != nil {
			g.c.disarm(grp.timer)
		}
		for _, m := range grp.members {
			m.answerJoin(joinError(kerr.NotCoordinator))
			m.answerSync(syncError(kerr.NotCoordinator))
		}
	}
}

// shardFor returns the state that node serves for group, or the error to
// answer with: NOT_COORDINATOR unless node leads the group's partition.
func (g *groupCoordinator) shardFor(node int32, group string) (*groupShard, *kerr.Error) {
	sh, err := g.shards.lookup(node, g.c.CoordinatorPartition(coordinatorGroup, group))
	if err != nil {
		return nil, err
	}
	return sh.state, nil
}

// appendRecords writes records to the shard's partition through the shard
// (which refuses when the node no longer leads it) and returns the log
// offset of the first one.
func (g *groupCoordinator) appendRecords(st *groupShard, recs []kv, pid int64, epoch int16, now time.Time) (int64, *kerr.Error) {
	sh, err := g.shards.lookup(st.node, st.partition)
	if err != nil {
		return 0, err
	}
	if sh.state != st {
		return 0, kerr.NotCoordinator
	}
	return sh.append(recs, pid, epoch, now)
}

// onMarker applies or discards the pending transactional offsets of the
// marker's producer at the partition's serving shard. A shard loaded later
// sees the marker in the log instead.
func (g *groupCoordinator) onMarker(p *partition, m controlMarker) {
	sh, err := g.shards.lookup(p.leader, p.index)
	if err != nil {
		return
	}
	now := time.Now()
	for name := range sh.state.endTxn(m.pid, m.commit, now) {
		g.reschedule(sh.state, name, now)
	}
}

// endTxn moves a producer's pending offsets into the committed ones on
// commit, and drops them on abort. It returns the pending offsets by group.
func (st *groupShard) endTxn(pid int64, commit bool, now time.Time) map[string]map[groupTP]committedOffset {
	pending := st.pendingTxn[pid]
	delete(st.pendingTxn, pid)
	if !commit {
		return pending
	}
	for name, offsets := range pending {
		grp := st.ensureGroup(name, now)
		for tp, o := range offsets {
			if cur, ok := grp.offsets[tp]; ok && cur.logOffset > o.logOffset {
				continue
			}
			grp.offsets[tp] = o
		}
	}
	return pending
}

// hasPendingTxn reports whether a transactional commit of tp in group is
// waiting for its marker.
func (st *groupShard) hasPendingTxn(group string, tp groupTP) bool {
	for _, byGroup := range st.pendingTxn {
		if _, ok := byGroup[group][tp]; ok {
			return true
		}
	}
	return false
}

// ensureGroup returns the group, creating an empty one (a group used only
// to store offsets until members join) that is Empty since now.
func (st *groupShard) ensureGroup(name string, now time.Time) *classicGroup {
	grp := st.groups[name]
	if grp == nil {
		grp = newClassicGroup(name)
		grp.stateSince = now
		st.groups[name] = grp
	}
	return grp
}
