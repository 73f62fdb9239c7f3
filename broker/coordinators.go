package broker

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// coordinatorSet holds the coordinators, built by newCoordinators.
type coordinatorSet struct {
	txn   *txnCoordinator
	share *shareCoordinator
	group *groupCoordinator
}

// newCoordinators builds the coordinators once the internal topics exist:
// the group coordinator, then the share coordinator, then the transaction
// coordinator. Each loads its internal topic's partitions and registers
// listeners, and listeners of one event run in the order they were
// registered: after a leader move the group coordinator's shards follow
// it first, then the share coordinator's (and its live state of a data
// partition is dropped), then the transaction coordinator's. Every
// listener works on its own coordinator's state and timers, so the order
// decides little; it is fixed here, not by file names, so that runs replay
// the same way. No coordinator reaches another while it is built (only
// handlers do, later), so each is stored once it is complete.
func (c *Cluster) newCoordinators() {
	c.coordinators.group = newGroupCoordinator(c)
	c.coordinators.share = newShareCoordinator(c)
	c.coordinators.txn = newTxnCoordinator(c)
}

// shards is one coordinator's state for the internal-topic partitions that
// nodes have loaded. A node serves a partition's coordinator only while it
// leads that partition at the leader epoch it loaded it in (KAFKA-21181):
// every answer, cached or not, goes through lookup. A new leader loads the
// partition by replaying its log.
type shards[T any] struct {
	c      *Cluster
	topic  string
	hooks  shardHooks[T]
	loaded map[shardKey]*shard[T]
}

// shardHooks is what a coordinator does as its shards come and go.
type shardHooks[T any] struct {
	// load builds node's state of p by replaying p's log.
	load func(p *partition, node int32) T
	// afterLoad, if set, runs once a shard is loaded, when the cluster
	// starts and after every leader move: the coordinator arms the
	// shard's timers.
	afterLoad func(sh *shard[T])
	// unload, if set, releases what a shard that stops serving holds
	// outside itself (its timers).
	unload func(sh *shard[T])
}

type shardKey struct{ node, partition int32 }

// shard is one node's loaded copy of one partition's coordinator state.
type shard[T any] struct {
	node      int32
	partition *partition
	epoch     int32 // the partition's leader epoch when it was loaded
	state     T
	// staleUntil is set under the LegacyStaleCoordinator debug switch: the
	// node lost leadership but answers from this cache until then.
	staleUntil time.Time
}

// newShards creates the registry of topic's coordinator shards and loads
// every partition at its current leader.
func newShards[T any](c *Cluster, topicName string, hooks shardHooks[T]) *shards[T] {
	s := &shards[T]{c: c, topic: topicName, hooks: hooks, loaded: make(map[shardKey]*shard[T])}
	for _, p := range c.topics[topicName].partitions {
		s.loadAt(p)
	}
	c.onLeaderChange(func(p *partition, oldLeader int32) {
		if p.topic.name != topicName {
			return
		}
		s.resign(p, oldLeader)
		s.loadAt(p)
	})
	return s
}

func (s *shards[T]) loadAt(p *partition) {
	key := shardKey{p.leader, p.index}
	if old := s.loaded[key]; old != nil {
		s.drop(key, old)
	}
	sh := &shard[T]{
		node:      p.leader,
		partition: p,
		epoch:     p.leaderEpoch,
		state:     s.hooks.load(p, p.leader),
	}
	s.loaded[key] = sh
	if s.hooks.afterLoad != nil {
		s.hooks.afterLoad(sh)
	}
}

// drop forgets a loaded shard.
func (s *shards[T]) drop(key shardKey, sh *shard[T]) {
	delete(s.loaded, key)
	if s.hooks.unload != nil {
		s.hooks.unload(sh)
	}
}

// resign drops the old leader's shard at once, or, under the
// LegacyStaleCoordinator switch, after the configured window during which it
// keeps answering from its cache.
func (s *shards[T]) resign(p *partition, oldLeader int32) {
	key := shardKey{oldLeader, p.index}
	old := s.loaded[key]
	if old == nil {
		return
	}
	window := s.c.cfg.legacyStaleCoordinator
	if window <= 0 {
		s.drop(key, old)
		return
	}
	old.staleUntil = time.Now().Add(window)
	s.c.after(window, func() {
		if s.loaded[key] == old {
			s.drop(key, old)
			s.c.logger.Info("stale coordinator resigned", "topic", s.topic, "partition", p.index, "node", oldLeader)
		}
	})
}

// lookup returns node's shard of partition if node may answer for it:
// NOT_COORDINATOR otherwise. A stale shard answers only inside the legacy
// window.
func (s *shards[T]) lookup(node int32, partition int32) (*shard[T], *kerr.Error) {
	sh := s.loaded[shardKey{node, partition}]
	if sh == nil {
		return nil, kerr.NotCoordinator
	}
	if sh.current() {
		return sh, nil
	}
	if !sh.staleUntil.IsZero() && time.Now().Before(sh.staleUntil) {
		return sh, nil
	}
	return nil, kerr.NotCoordinator
}

// current reports whether the shard's node still leads its partition at the
// epoch it loaded it in.
func (sh *shard[T]) current() bool {
	return !sh.partition.deleted && sh.partition.leader == sh.node && sh.partition.leaderEpoch == sh.epoch
}

// append writes coordinator records to the shard's partition. A node that no
// longer leads it cannot write (Kafka's acks=-1 append fails with
// NOT_LEADER_OR_FOLLOWER), which a coordinator answers as NOT_COORDINATOR.
// pid >= 0 makes a transactional write.
func (sh *shard[T]) append(recs []kv, pid int64, epoch int16, now time.Time) (int64, *kerr.Error) {
	if !sh.current() {
		return 0, kerr.NotCoordinator
	}
	return sh.partition.appendInternal(recs, pid, epoch, now)
}
