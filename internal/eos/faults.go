package eos

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/wire"
)

// fault is one kind of fault and how often it may still fire. fire
// reports whether it fired; one that cannot now is tried again at its next
// turn, without counting.
type fault struct {
	left int
	fire func() bool
}

// injectFaults fires the enabled faults in turn, one every Interval, each at
// most its bound, until ctx ends.
func injectFaults(ctx context.Context, cfg Config, cl *kgo.Client, pool *workerPool) {
	stats := pool.stats
	var faults []*fault
	var early []*fault // requested before the first commit; taken after it
	add := func(times int, fire func()) {
		faults = append(faults, &fault{left: times, fire: func() bool { fire(); return true }})
	}
	max := cfg.Faults.MaxPerKind
	if cfg.Faults.KillWorker {
		add(max, func() { pool.kill.Store(true) })
		early = append(early, faults[len(faults)-1])
	}
	if cfg.Faults.SlowWorker {
		add(max, func() { pool.slow.Store(true) })
	}
	if cfg.Faults.Zombie {
		faults = append(faults, &fault{left: max, fire: func() bool {
			s := pool.zombieTarget()
			if s == nil {
				return false
			}
			stats.fault(faultZombie)
			cfg.Logger.Info("fault "+faultZombie+": starting a second instance with the same transactional id", "worker", s.index)
			pool.start(ctx, s)
			return true
		}})
	}
	if cfg.Ledger != "" {
		if cfg.Faults.KillAfterCommit {
			add(max, func() { pool.killAfter.Store(true) })
		}
		if cfg.Faults.DropSession {
			add(max, func() { pool.drop.Store(true) })
		}
		if cfg.Faults.PausePastLock {
			add(max, func() { pool.pause[0].Store(true) }) // before the claims
			early = append(early, faults[len(faults)-1])
			add(max, func() { pool.pause[1].Store(true) }) // after them
			early = append(early, faults[len(faults)-1])
		}
	}
	if cfg.Faults.CoordinatorMoves {
		add(10*max, func() {
			for _, topic := range []string{wire.TransactionStateTopic, wire.ShareGroupStateTopic} {
				if moveRandomPartition(ctx, cl, topic, cfg) {
					stats.fault(faultCoordMoves)
				}
			}
		})
	}
	if len(faults) == 0 {
		return
	}
	// Faults start once the pipeline has committed a transaction: until
	// it has shown that it works at all, a fault would only hide why it
	// does not (a cluster without KIP-1289 fails the first commit, and
	// that must stop the run at once). The first round then fires at
	// once, so that every fault lands while the pipeline runs, however
	// fast it is. The first kill and the first pauses are requested
	// before that: the first transaction to reach its commit (or its
	// claims) after one committed takes them (instance.beforeCommit,
	// instance.pauseAt), so they do not depend on this loop seeing the
	// commit before the pipeline has run its last transaction.
	for _, f := range early {
		if f.left > 0 {
			f.left--
			f.fire() // these requests always fire
		}
	}
	for stats.committed.Load() == 0 {
		if !sleep(ctx, 10*time.Millisecond) {
			return
		}
	}
	ticker := time.NewTicker(cfg.Faults.Interval)
	defer ticker.Stop()
	for i := 0; ; i++ {
		f := faults[i%len(faults)]
		if i < len(faults) && slices.Contains(early, f) {
			continue // its first turn was taken before the first commit
		}
		if f.left > 0 && f.fire() {
			f.left--
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// moveRandomPartition reassigns one partition of topic to another node, the
// way an operator moves a coordinator. It reports whether it did.
func moveRandomPartition(ctx context.Context, cl *kgo.Client, topic string, cfg Config) bool {
	adm := kadm.NewClient(cl)
	md, err := adm.Metadata(ctx, topic)
	if err != nil || len(md.Brokers) < 2 {
		return false
	}
	td, ok := md.Topics[topic]
	if !ok || len(td.Partitions) == 0 {
		return false
	}
	parts := td.Partitions.Sorted()
	p := parts[rand.IntN(len(parts))]
	var to int32 = -1
	for _, b := range md.Brokers {
		if b.NodeID != p.Leader && (to < 0 || rand.IntN(2) == 0) {
			to = b.NodeID
		}
	}
	req := kadm.AlterPartitionAssignmentsReq{}
	req.Assign(topic, p.Partition, []int32{to})
	resp, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn("moving a coordinator partition (fault "+faultCoordMoves+") failed", "topic", topic, "err", err)
		}
		return false
	}
	ok = true
	resp.Each(func(r kadm.AlterPartitionAssignmentsResponse) {
		if r.Err != nil {
			ok = false
		}
	})
	if ok {
		cfg.Logger.Info("fault "+faultCoordMoves+": moved a coordinator partition", "topic", topic, "partition", p.Partition, "from", p.Leader, "to", to)
	}
	return ok
}
