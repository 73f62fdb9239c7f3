package eos

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// The names of the checkpoint faults, as the reports count them and the
// logs name them.
const (
	faultSlowSnapshot   = "slow_snapshot"
	faultFailCheckpoint = "failed_checkpoint"
)

// The checkpoint coordinator works like a stream processor's: every
// Interval it triggers a checkpoint on every reader (a barrier); each
// reader snapshots its state, staging the acknowledgements of what it
// processed since its last snapshot, and answers. Once every reader has
// answered (and, for a long checkpoint, once the checkpoint has taken
// longer than the lock duration) the checkpoint is complete, unless a
// reader declined or it is failed on purpose; the readers are then told
// to commit it (notifyCheckpointComplete) or to abort it. Checkpoints are
// decided strictly in order, and several may be in flight at once, so
// records keep flowing while a slow checkpoint completes.

// readerMsgKind is what the coordinator tells a reader.
type readerMsgKind int8

const (
	msgBarrier  readerMsgKind = iota // snapshot now
	msgComplete                      // the checkpoint is complete: commit
	msgAbort                         // the checkpoint failed: abort
)

// readerMsg is one message from the coordinator to a reader.
type readerMsg struct {
	kind readerMsgKind
	id   int64
	// stall asks the reader to stall past its locks before snapshotting
	// (a fault: its staging then fails and it declines).
	stall bool
	// onPurpose marks an abort of a checkpoint failed on purpose (a
	// fault), not declined by a reader.
	onPurpose bool
}

// snapshotResult is a reader's answer to a barrier.
type snapshotResult struct {
	reader   int
	id       int64
	records  int   // records in the snapshot
	declined error // why the reader could not snapshot, nil if it did
	// stalled says whether the reader took the barrier's slow snapshot
	// (only one with records to snapshot does).
	stalled bool
}

// mailbox is a reader's unbounded inbox, so that the coordinator never
// waits for a busy reader.
type mailbox struct {
	mu     sync.Mutex
	msgs   []readerMsg
	signal chan struct{} // one token: something arrived
}

func newMailbox() *mailbox { return &mailbox{signal: make(chan struct{}, 1)} }

func (b *mailbox) push(m readerMsg) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m)
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// drain takes every message, oldest first.
func (b *mailbox) drain() []readerMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.msgs
	b.msgs = nil
	return out
}

// inFlight is one triggered checkpoint that is not decided yet.
type inFlight struct {
	id        int64
	triggered time.Time
	due       time.Time // not decided before this
	answers   int
	records   int
	declined  error
	stalled   bool // a reader stalled past its locks before snapshotting it
	// seq numbers the checkpoints that hold records and were not
	// declined, from 1, in order; it is 0 for the others. scheduled says
	// whether seq (and due, for a long checkpoint) is set: once every
	// reader has answered.
	seq       int
	scheduled bool
}

// checkpointCoordinator triggers and decides checkpoints. The faults are
// scheduled on checkpoints that hold records, so that they land however
// fast the readers are: the first such checkpoint that is not declined
// fails on purpose (then every FailEvery-th), the second takes longer
// than the lock (then every LongEvery-th), and once one is decided every
// barrier offers a slow snapshot to all readers until one that has
// records takes it. The records of the checkpoint that failed on purpose
// come back, so a later barrier finds a reader with records even when
// the first checkpoint held the whole input.
type checkpointCoordinator struct {
	cfg     CheckpointConfig
	readers []*readerTask
	stats   *checkpointStats
	results <-chan snapshotResult

	seq            int   // checkpoints with records, not declined, scheduled so far
	stallsFired    int   // slow snapshots that happened
	stallOffer     int64 // the barrier that offers a slow snapshot and is not fully answered, or 0
	nextStallAfter int   // seq to reach before offering again
}

// stallSpacing is how many checkpoints with records pass between two
// slow snapshots.
const stallSpacing = 3

// run triggers a checkpoint every Interval and decides them until ctx
// ends.
func (c *checkpointCoordinator) run(ctx context.Context) {
	ticker := time.NewTicker(c.cfg.Interval)
	defer ticker.Stop()
	decide := time.NewTimer(time.Hour)
	defer decide.Stop()
	var queue []*inFlight
	next := int64(1)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			// A tick while the last barrier is still unanswered is
			// skipped, as a stream processor skips a checkpoint while
			// one is pending: with an Interval shorter than the
			// readers' snapshots, barriers would otherwise pile up in
			// their mailboxes faster than they are handled and no
			// reader would get to poll.
			if n := len(queue); n > 0 && queue[n-1].answers < len(c.readers) {
				continue
			}
			queue = append(queue, c.trigger(next, now))
			next++
		case res := <-c.results:
			c.answer(queue, res)
		case <-decide.C:
		}
		queue = c.decideReady(queue, time.Now())
		if len(queue) > 0 && queue[0].scheduled {
			decide.Reset(time.Until(queue[0].due))
		}
	}
}

// trigger sends barrier id to every reader, offering a slow snapshot when
// one is due.
func (c *checkpointCoordinator) trigger(id int64, now time.Time) *inFlight {
	// Stalls start once a checkpoint with records was decided or a
	// reader committed: until the pipeline has shown that it works at
	// all, a stall would only delay learning why it does not (a cluster
	// without KIP-1289 fails the first commit or release).
	started := c.seq > 0 || c.stats.committed.Load() > 0
	offer := started && c.stallsFired < c.cfg.SlowSnapshots && c.stallOffer == 0 && c.seq >= c.nextStallAfter
	if offer {
		c.stallOffer = id
		c.stats.stallClaim.Store(false)
	}
	for _, r := range c.readers {
		r.box.push(readerMsg{kind: msgBarrier, id: id, stall: offer})
	}
	return &inFlight{id: id, triggered: now, due: now}
}

// answer counts a reader's answer to a barrier.
func (c *checkpointCoordinator) answer(queue []*inFlight, res snapshotResult) {
	if res.stalled {
		c.stallsFired++
		c.nextStallAfter = c.seq + stallSpacing
	}
	for _, f := range queue {
		if f.id == res.id {
			f.answers++
			f.records += res.records
			f.stalled = f.stalled || res.stalled
			if res.declined != nil && f.declined == nil {
				f.declined = res.declined
			}
			if f.id == c.stallOffer && f.answers == len(c.readers) {
				c.stallOffer = 0 // taken, or no reader had records: offer again
			}
		}
	}
}

// decideReady decides, in order, the checkpoints every reader has answered
// and whose due time has come, and returns the rest.
func (c *checkpointCoordinator) decideReady(queue []*inFlight, now time.Time) []*inFlight {
	for len(queue) > 0 {
		f := queue[0]
		if f.answers < len(c.readers) {
			break
		}
		if !f.scheduled {
			f.scheduled = true
			if f.declined == nil && f.records > 0 {
				c.seq++
				f.seq = c.seq
				if c.cfg.LongEvery > 0 && f.seq >= 2 && (f.seq-2)%c.cfg.LongEvery == 0 {
					f.due = f.triggered.Add(c.cfg.LockDuration * 3 / 2)
					c.stats.waits.add(fmt.Sprintf("checkpoint %d, held past the lock duration on purpose", f.id), f.records, f.due)
				}
			}
		}
		if now.Before(f.due) {
			break
		}
		queue = queue[1:]
		if f.stalled {
			c.stats.stalling.Add(-1)
		}
		kind, onPurpose := msgComplete, false
		switch {
		case f.declined != nil:
			kind = msgAbort
			c.stats.declined.Add(1)
			c.cfg.Logger.Info("checkpoint declined by a reader", "checkpoint", f.id, "err", f.declined)
		case f.seq > 0 && c.cfg.FailEvery > 0 && (f.seq-1)%c.cfg.FailEvery == 0:
			kind, onPurpose = msgAbort, true
			c.stats.failedOnPurpose.Add(1)
			c.stats.fault(faultFailCheckpoint)
			c.cfg.Logger.Info("fault "+faultFailCheckpoint+": failing a checkpoint on purpose", "checkpoint", f.id, "records", f.records)
		default:
			c.stats.completed.Add(1)
			if f.records > 0 {
				c.stats.completedWithRecords.Add(1)
				if now.Sub(f.triggered) > c.cfg.LockDuration {
					c.stats.longCompleted.Add(1)
				}
			}
		}
		for _, r := range c.readers {
			r.box.push(readerMsg{kind: kind, id: f.id, onPurpose: onPurpose})
		}
	}
	return queue
}
