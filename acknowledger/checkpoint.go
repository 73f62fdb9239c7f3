package acknowledger

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/txn"
)

// Stage keeps acks, the acknowledgements of records that member meta
// holds, until the checkpoint checkpointID (or a later one) completes; it
// sends nothing. The consumer that built acks (Consumer.Acks) is told at
// once: it checks the locks now and renews them until the checkpoint
// commits or fails, so a checkpoint interval longer than the lock
// duration redelivers nothing.
//
// It fails, keeping nothing, with the consumer's refusal
// (shareconsumer.ErrLockExpired, kshare.ErrAbortable: a lock already ran
// out; shareconsumer.ErrNotHeld or another kshare.ErrUsage error: records
// the consumer does not hold, another member's metadata), with
// kshare.ErrUsage for nil or invalid acknowledgements, acknowledgements
// already staged (in a checkpoint or a transaction that has not ended:
// stage each ShareAcks once) or a checkpoint id not above the last
// committed one, and with kshare.ErrClosed after Close. Empty acks are
// accepted and keep nothing.
func (a *Acknowledger) Stage(checkpointID int64, acks *kshare.ShareAcks, meta kshare.ShareGroupMetadata) error {
	const op = "stage checkpoint acknowledgements"
	if !a.made() {
		return errNotMade(op)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errClosed(op)
	}
	set := (*acktrack.Set)(acks)
	if err := txn.ValidateShareAcks(set, meta); err != nil {
		return errs.Usage(op, err)
	}
	if a.anyCommit && checkpointID <= a.committed {
		return errs.Usage(op, fmt.Errorf("checkpoint %d is not above the last committed checkpoint %d", checkpointID, a.committed))
	}
	if set.Len() == 0 {
		return nil
	}
	for _, cp := range a.staged {
		if cp.acks == set {
			return errs.Usage(op, fmt.Errorf("checkpoint %d: these acknowledgements are already staged in checkpoint %d; stage each ShareAcks once", checkpointID, cp.id))
		}
	}
	if t := set.Tracker(); t != nil {
		if err := t.Stage(set, acktrack.Staging{Group: meta.GroupID, Member: meta.MemberID, Ledger: a.ledger}); err != nil {
			class := errs.ClassOf(err)
			if class == nil {
				class = kshare.ErrAbortable
			}
			return errs.New(class, op, fmt.Errorf("checkpoint %d: %w", checkpointID, err))
		}
	}
	i := sort.Search(len(a.staged), func(i int) bool { return a.staged[i].id > checkpointID })
	a.staged = append(a.staged, checkpoint{})
	copy(a.staged[i+1:], a.staged[i:])
	a.staged[i] = checkpoint{id: checkpointID, acks: set, meta: meta}
	return nil
}

// Staged returns the ids of the checkpoints staged and not yet committed or
// aborted, in order, once per Stage call.
func (a *Acknowledger) Staged() []int64 {
	if !a.made() {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]int64, len(a.staged))
	for i, cp := range a.staged {
		out[i] = cp.id
	}
	return out
}

// take removes and returns the checkpoints staged with an id up to
// checkpointID; it fails once Close has dropped them all. With commit,
// the checkpoints taken are remembered as being committed until
// doneCommitting is called, so that AbortCheckpoint does not report them
// dropped. Without it (AbortCheckpoint), it fails with kshare.ErrUsage,
// taking nothing, if a commit in progress has taken a checkpoint up to
// checkpointID.
func (a *Acknowledger) take(op string, checkpointID int64, commit bool) ([]checkpoint, error) {
	if !a.made() {
		return nil, errNotMade(op)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errClosed(op)
	}
	if !commit && len(a.committing) > 0 && a.committing[0] <= checkpointID {
		return nil, errs.Usage(op, fmt.Errorf("checkpoint %d is being committed (CommitCheckpoint is in progress): it cannot be dropped, and its commit decides", a.committing[0]))
	}
	out := a.takeStagedLocked(checkpointID)
	if commit {
		a.committing = a.committing[:0]
		for _, cp := range out {
			a.committing = append(a.committing, cp.id)
		}
	}
	return out, nil
}

// dropStaged removes and returns the checkpoints still staged with an id
// up to checkpointID (none after Close, which dropped them all); those a
// commit in progress took are not staged any more.
func (a *Acknowledger) dropStaged(checkpointID int64) []checkpoint {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.takeStagedLocked(checkpointID)
}

func (a *Acknowledger) takeStagedLocked(checkpointID int64) []checkpoint {
	n := sort.Search(len(a.staged), func(i int) bool { return a.staged[i].id > checkpointID })
	out := append([]checkpoint(nil), a.staged[:n]...)
	a.staged = append(a.staged[:0], a.staged[n:]...)
	return out
}

// doneCommitting forgets the checkpoints that the commit in progress took.
func (a *Acknowledger) doneCommitting() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.committing = a.committing[:0]
}

// CommitCheckpoint commits, in one transaction, every acknowledgement
// staged with a checkpoint id up to checkpointID. With nothing staged it
// only records checkpointID as committed.
//
// A failed checkpoint is dropped: the transaction is aborted before
// CommitCheckpoint returns its error (kshare.ErrAbortable), and the staged
// acknowledgements take effect nowhere. Their records come back to the
// group at once: those whose acknowledgement had reached their leader are
// made available by the abort, and the consumer releases the others
// (delivery counts are not raised by either). Redo the work of the
// checkpoint from the redelivered records; repeated failures count toward
// the group's delivery limit only through redeliveries. An in-doubt
// commit is learned as CommitAcknowledgements learns it: nil if it had
// committed.
func (a *Acknowledger) CommitCheckpoint(ctx context.Context, checkpointID int64) error {
	const op = "commit checkpoint"
	leave, err := a.enter(ctx, op)
	if err != nil {
		if errors.Is(err, kshare.ErrAbortable) {
			// The checkpoint failed before its transaction began (ctx
			// ended, maybe while another call ran): it is dropped as
			// any failed checkpoint is, or a later CommitCheckpoint
			// would commit what the caller was told had failed.
			// Checkpoints a commit in progress took are that commit's.
			dropAll(a.dropStaged(checkpointID))
			a.logger.Info("checkpoint failed before its transaction began; its records come back to the group", "checkpoint", checkpointID, "err", err)
			return fmt.Errorf("checkpoint %d: %w", checkpointID, err)
		}
		return err
	}
	defer leave()
	cps, err := a.take(op, checkpointID, true)
	if err != nil {
		return err
	}
	defer a.doneCommitting()
	if len(cps) > 0 {
		if err := a.runTxn(ctx, op, groupByMember(cps)); err != nil {
			a.logger.Info("checkpoint failed; its records come back to the group", "checkpoint", checkpointID, "err", err)
			return fmt.Errorf("checkpoint %d: %w", checkpointID, err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.anyCommit || checkpointID > a.committed {
		a.committed, a.anyCommit = checkpointID, true
	}
	return nil
}

// AbortCheckpoint drops every acknowledgement staged with a checkpoint id
// up to checkpointID, for a checkpoint that failed before it could commit.
// It sends nothing itself: it tells the consumers, which stop renewing the
// records' locks and release them at once (ShareAcknowledge RELEASE,
// delivery count not raised), the same way they release the records of an
// aborted transaction. It fails with kshare.ErrClosed after Close (which
// dropped everything already), and with kshare.ErrUsage, dropping
// nothing, while a CommitCheckpoint in progress is committing a
// checkpoint up to checkpointID: that commit's result says whether those
// acknowledgements took effect.
func (a *Acknowledger) AbortCheckpoint(checkpointID int64) error {
	cps, err := a.take("abort checkpoint", checkpointID, false)
	if err != nil {
		return err
	}
	dropAll(cps)
	return nil
}
