package acknowledger

import (
	"context"
	"fmt"
	"sort"

	"github.com/kshare-go/kshare/txnclient"
	"github.com/kshare-go/kshare/wire"
)

// Stage keeps acks, the acknowledgements of records that member meta
// holds, until the checkpoint checkpointID (or a later one) completes; it
// sends nothing. Its tracker (the share consumer, when acks came from
// Consumer.Acks) is told at once, so that the consumer checks the locks now
// and renews them until the checkpoint commits or fails: a checkpoint
// interval longer than the lock duration redelivers nothing.
//
// It fails with ErrAbortable wrapping the tracker's refusal (a lock already
// expired: shareconsumer.ErrLockExpired) and ErrUsage for nil or invalid
// acknowledgements or a checkpoint id not above the last committed one.
// Do not modify acks afterwards.
func (a *Acknowledger) Stage(checkpointID int64, acks *wire.ShareAcks, meta wire.ShareGroupMetadata) error {
	const op = "stage checkpoint acknowledgements"
	if err := txnclient.ValidateShareAcks(acks, meta); err != nil {
		return txnclient.Usage(op, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errClosed(op)
	}
	if a.anyCommit && checkpointID <= a.committed {
		return txnclient.Usage(op, fmt.Errorf("checkpoint %d is not above the last committed checkpoint %d", checkpointID, a.committed))
	}
	if acks.Len() == 0 {
		return nil
	}
	if acks.Tracker != nil {
		if err := acks.Tracker.Stage(acks); err != nil {
			return txnclient.Abortable(op, fmt.Errorf("checkpoint %d: %w", checkpointID, err))
		}
	}
	i := sort.Search(len(a.staged), func(i int) bool { return a.staged[i].id > checkpointID })
	a.staged = append(a.staged, checkpoint{})
	copy(a.staged[i+1:], a.staged[i:])
	a.staged[i] = checkpoint{id: checkpointID, acks: acks, meta: meta}
	return nil
}

// Staged returns the ids of the checkpoints staged and not yet committed or
// aborted, in order, once per Stage call.
func (a *Acknowledger) Staged() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]int64, len(a.staged))
	for i, cp := range a.staged {
		out[i] = cp.id
	}
	return out
}

// take removes and returns the checkpoints staged with an id up to
// checkpointID; it fails once Close has dropped them all.
func (a *Acknowledger) take(op string, checkpointID int64) ([]checkpoint, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errClosed(op)
	}
	n := sort.Search(len(a.staged), func(i int) bool { return a.staged[i].id > checkpointID })
	out := append([]checkpoint(nil), a.staged[:n]...)
	a.staged = append(a.staged[:0], a.staged[n:]...)
	return out, nil
}

// CommitCheckpoint commits, in one transaction, every acknowledgement
// staged with a checkpoint id up to checkpointID. With nothing staged it
// only records checkpointID as committed.
//
// A failed checkpoint is dropped: the transaction is aborted before
// CommitCheckpoint returns its error, and the staged acknowledgements take
// effect nowhere. Their records come back to the group: those whose
// acknowledgement had reached their leader are available again at once
// (the abort releases them, delivery count unchanged), the others when
// their locks run out, since the consumer stops renewing them. Redo the
// work of the checkpoint from the redelivered records; repeated failures
// count toward the group's delivery limit only through redeliveries.
func (a *Acknowledger) CommitCheckpoint(ctx context.Context, checkpointID int64) error {
	const op = "commit checkpoint"
	leave, err := a.enter(ctx, op)
	if err != nil {
		return err
	}
	defer leave()
	cps, err := a.take(op, checkpointID)
	if err != nil {
		return err
	}
	if len(cps) > 0 {
		items := groupByMember(cps, func(t wire.AckType) wire.AckType { return t })
		if err := a.runTxn(ctx, op, items); err != nil {
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
// So that the records come back at once rather than when their locks run
// out, it releases them in a transaction of RELEASE acknowledgements (the
// broker makes them available again, delivery count unchanged). If that
// transaction fails (a lock ran out meanwhile, say), the records still come
// back when their locks run out and the error says why; the checkpoint is
// dropped either way.
func (a *Acknowledger) AbortCheckpoint(ctx context.Context, checkpointID int64) error {
	const op = "abort checkpoint"
	leave, err := a.enter(ctx, op)
	if err != nil {
		return err
	}
	defer leave()
	cps, err := a.take(op, checkpointID)
	if err != nil || len(cps) == 0 {
		return err
	}
	items := groupByMember(cps, func(wire.AckType) wire.AckType { return wire.AckRelease })
	if err := a.runTxn(ctx, op, items); err != nil {
		return fmt.Errorf("checkpoint %d dropped, but releasing its records failed (they return when their locks run out): %w", checkpointID, err)
	}
	return nil
}
