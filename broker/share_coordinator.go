package broker

// The share side of the cluster: share groups (share_group.go), share
// sessions and long polls (share_session.go), the live share-partitions at
// the data partitions' leaders (share_partition.go) and the share
// coordinator that persists them in __share_group_state (share_state.go).
//
// Everything is owned by the run loop. The live state of a share-partition
// belongs to the node leading its data partition at one leader epoch; when
// leadership moves it is dropped, and the new leader rebuilds it from the
// share coordinator that leads the share-partition's __share_group_state
// partition, exactly as a Kafka share-partition leader reads its state
// from the share coordinator.
//
// Nothing here is swept: acquisition locks, member sessions and parked
// ShareFetches each have a timer (timers.go) armed at their deadline, and a
// parked ShareFetch re-checks only when a partition it reads changes
// (watch.go). An empty share group, like Kafka's, is kept until it is
// deleted, and costs nothing meanwhile.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare/wire"
)

// shareCoordinator holds all share-group state of the cluster.
type shareCoordinator struct {
	c      *Cluster
	states *shards[*shareStateShard]

	groups       map[string]*shareGroup
	groupConfigs map[string]map[string]string
	live         map[shareKey]*sharePartition
	// liveByGroup and liveByPartition index live: a member leaving, a
	// group deleted, a leadership move touch only their own.
	liveByGroup     map[string]map[shareKey]*sharePartition
	liveByPartition map[*partition]map[shareKey]*sharePartition
	// connSessions is, for each client connection, the last share
	// session it opened, while that session lives: the connection's close
	// releases it (share_session.go).
	connSessions map[*clientConn]*shareSession
	// releasing and releaseQueue are the releases of ended sessions still
	// running, a slice per turn (shareRelease).
	releasing    map[shareSessionKey]*shareRelease
	releaseQueue []*shareRelease
	releaseArmed bool
	// initJobs are the groups whose assigned share-partitions are being
	// initialized a slice per turn (initAssigned).
	initJobs map[string]*shareInitJob
}

// newShareCoordinator loads every __share_group_state partition at its
// leader and registers the coordinator's listeners: state shards follow
// leader moves, and a data partition that moves or is deleted drops its
// live share-partitions; markers resolve staged transactional
// acknowledgements; compaction keeps the live records.
func newShareCoordinator(c *Cluster) *shareCoordinator {
	sc := &shareCoordinator{
		c:               c,
		groups:          make(map[string]*shareGroup),
		groupConfigs:    make(map[string]map[string]string),
		live:            make(map[shareKey]*sharePartition),
		liveByGroup:     make(map[string]map[shareKey]*sharePartition),
		liveByPartition: make(map[*partition]map[shareKey]*sharePartition),
		connSessions:    make(map[*clientConn]*shareSession),
		releasing:       make(map[shareSessionKey]*shareRelease),
		initJobs:        make(map[string]*shareInitJob),
	}
	sc.states = newShards(c, wire.ShareGroupStateTopic, shardHooks[*shareStateShard]{load: sc.loadShareState})
	c.onLeaderChange(sc.leaderChanged)
	c.onTopicDeleted(sc.topicDeleted)
	c.onMarker(wire.ShareGroupStateTopic, sc.markerWritten)
	c.onCompact(wire.ShareGroupStateTopic, sc.liveRecords)
	return sc
}

// stateShard returns the share coordinator serving key: the loaded shard of
// the node that leads key's __share_group_state partition.
func (sc *shareCoordinator) stateShard(key shareKey) (*shard[*shareStateShard], *kerr.Error) {
	p := sc.statePartition(key)
	if p == nil {
		return nil, kerr.CoordinatorNotAvailable
	}
	return sc.states.lookup(p.leader, p.index)
}

// statePartition returns the __share_group_state partition of key. Live
// state keeps it: naming it takes the key's string form and Java's hash,
// and the share path asks at every write.
func (sc *shareCoordinator) statePartition(key shareKey) *partition {
	if sp := sc.live[key]; sp != nil && sp.statePart != nil {
		return sp.statePart
	}
	return sc.c.coordinatorPartitionFor(coordinatorShare, key.String())
}

// persisted returns the persisted state of key, or nil if it was never
// initialized.
func (sc *shareCoordinator) persisted(key shareKey) *sharePersisted {
	sh, err := sc.stateShard(key)
	if err != nil {
		return nil
	}
	return sh.state.parts[key]
}

// writeState appends one record for key to its __share_group_state
// partition and applies it to the coordinator's state, as replay will.
// pid >= 0 writes it in that producer's transaction.
func (sc *shareCoordinator) writeState(key shareKey, v *shareStateValue, pid int64, epoch int16, now time.Time) *kerr.Error {
	sh, err := sc.stateShard(key)
	if err != nil {
		return err
	}
	if ps := sh.state.parts[key]; v != nil && v.Kind != shareKindSnapshot && (ps == nil || ps.stateEpoch != v.StateEpoch) {
		return kerr.InvalidRecordState // the group was deleted under the live state
	}
	if _, err := sh.append([]kv{{key: encodeShareStateKey(key), value: encodeShareStateValue(v)}}, pid, epoch, now); err != nil {
		return err
	}
	if aerr := sh.state.apply(key, v, pid, epoch); aerr != nil {
		sc.c.logger.Error("share state record not applied", "key", key.String(), "err", aerr)
		return kerr.UnknownServerError
	}
	if ps := sh.state.parts[key]; v != nil && v.Kind == shareKindUpdate && ps != nil && ps.updates >= shareSnapshotEvery {
		snap := &shareStateValue{Kind: shareKindSnapshot, StateEpoch: ps.stateEpoch, StartOffset: ps.start, Batches: ps.batches()}
		return sc.writeState(key, snap, -1, -1, now)
	}
	return nil
}

// initState initializes key's persisted state if it has none: the start
// offset is where share.auto.offset.reset says (share_offset_reset.go).
func (sc *shareCoordinator) initState(key shareKey, p *partition, now time.Time) *kerr.Error {
	sh, err := sc.stateShard(key)
	if err != nil {
		return err
	}
	if sh.state.parts[key] != nil {
		return nil
	}
	start, err := sc.autoOffsetReset(key.group).startOffset(p, now)
	if err != nil {
		return err
	}
	v := &shareStateValue{Kind: shareKindSnapshot, StateEpoch: sh.state.epochs[key] + 1, StartOffset: start}
	return sc.writeState(key, v, -1, -1, now)
}

// livePartition returns the live state of key at node, loading it from the
// share coordinator when node has none at the partition's current leader
// epoch. It fails with the leader error when node does not lead p.
func (sc *shareCoordinator) livePartition(key shareKey, p *partition, node int32, now time.Time) (*sharePartition, *kerr.Error) {
	if err := p.checkLeader(node, -1); err != nil {
		return nil, err
	}
	if sp := sc.live[key]; sp != nil && sp.current() {
		return sp, nil
	}
	sc.dropLive(key)
	if err := sc.initState(key, p, now); err != nil {
		return nil, err
	}
	sh, err := sc.stateShard(key)
	if err != nil {
		return nil, err
	}
	sp := newLiveSharePartition(key, p, sh.state.parts[key], sh.state.pendingFor(key), sc.deliveryLimit(key.group))
	sp.statePart = sc.c.coordinatorPartitionFor(coordinatorShare, key.String())
	sc.addLive(sp)
	sc.flush(sp, now)
	sc.c.logger.Debug("share-partition loaded", "key", key.String(), "node", node, "start", sp.start, "end", sp.end())
	return sp, nil
}

// flush writes sp's changes since its last write, arms its lock timer,
// and lets parked share fetches of its partition look again (records may
// have become available).
func (sc *shareCoordinator) flush(sp *sharePartition, now time.Time) {
	sc.c.changed(sp.p)
	sc.deadLetters(sp, now)
	if v := sp.takeUpdate(); v != nil {
		if err := sc.writeState(sp.key, v, -1, -1, now); err != nil {
			// The share coordinator always sits at the state partition's
			// leader, so this only happens when that partition or its
			// state is gone (a deleted group); the live state then goes too.
			sc.c.logger.Warn("share state write failed; dropping live state", "key", sp.key.String(), "err", err)
			sc.dropLive(sp.key)
			return
		}
	}
	if sp.acquired > 0 && sc.live[sp.key] == sp {
		if sp.locks == nil {
			sp.locks = newTimer(func(now time.Time) { sc.locksDue(sp, now) })
		}
		sc.c.armBy(sp.locks, sp.nextDeadline)
	}
}

// locksDue releases the records of sp whose acquisition lock expired.
func (sc *shareCoordinator) locksDue(sp *sharePartition, now time.Time) {
	if sc.live[sp.key] != sp {
		return
	}
	if !sp.current() {
		sc.dropLive(sp.key)
		return
	}
	if n := sp.expire(now, sc.deliveryLimit(sp.key.group)); n > 0 {
		sc.c.logger.Debug("acquisition locks expired", "key", sp.key.String(), "records", n)
	}
	sc.flush(sp, now)
}

// addLive installs live state.
func (sc *shareCoordinator) addLive(sp *sharePartition) {
	sc.dropLive(sp.key)
	sc.live[sp.key] = sp
	if sc.liveByGroup[sp.key.group] == nil {
		sc.liveByGroup[sp.key.group] = make(map[shareKey]*sharePartition)
	}
	sc.liveByGroup[sp.key.group][sp.key] = sp
	if sc.liveByPartition[sp.p] == nil {
		sc.liveByPartition[sp.p] = make(map[shareKey]*sharePartition)
	}
	sc.liveByPartition[sp.p][sp.key] = sp
}

// dropLive forgets the live state of key, if any.
func (sc *shareCoordinator) dropLive(key shareKey) {
	sp := sc.live[key]
	if sp == nil {
		return
	}
	delete(sc.live, key)
	if byGroup := sc.liveByGroup[key.group]; byGroup != nil {
		delete(byGroup, key)
		if len(byGroup) == 0 {
			delete(sc.liveByGroup, key.group)
		}
	}
	if byPart := sc.liveByPartition[sp.p]; byPart != nil {
		delete(byPart, key)
		if len(byPart) == 0 {
			delete(sc.liveByPartition, sp.p)
		}
	}
	if sp.locks != nil {
		sc.c.disarm(sp.locks)
	}
}

// leaderChanged drops the live state of a data partition whose leadership
// moved: the new leader loads it from the share coordinator. The share
// coordinator's own shards move by themselves (shards.loadAt).
func (sc *shareCoordinator) leaderChanged(p *partition, _ int32) {
	if p.topic.internal {
		return
	}
	for key := range sc.liveByPartition[p] {
		sc.dropLive(key)
	}
}

// topicDeleted drops the live state of a deleted topic's partitions.
func (sc *shareCoordinator) topicDeleted(t *topic) {
	for _, p := range t.partitions {
		for key := range sc.liveByPartition[p] {
			sc.dropLive(key)
		}
	}
}

// markerWritten resolves the staged acknowledgements of a transaction when
// its marker is written to a __share_group_state partition (the
// transaction coordinator's markers, checked there by the KIP-1228 rules).
func (sc *shareCoordinator) markerWritten(p *partition, m controlMarker) {
	sh, err := sc.states.lookup(p.leader, p.index)
	if err != nil {
		sc.c.logger.Error("marker on a share state partition with no coordinator", "partition", p.index, "err", err)
		return
	}
	now := time.Now()
	for _, key := range sh.state.resolve(m.pid, m.commit) {
		sp := sc.live[key]
		if sp == nil || !sp.current() {
			continue
		}
		n := sp.resolve(m.pid, m.commit, sc.deliveryLimit(key.group))
		sc.flush(sp, now)
		sc.c.logger.Debug("staged share acknowledgements resolved", "key", key.String(), "producer_id", m.pid, "commit", m.commit, "records", n)
	}
}
