package txnclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// needsEndTxnLocked reports whether anything of the current transaction may
// have reached a broker, so that only EndTxn can end it. A transaction that
// sent nothing ends locally.
func (m *Manager) needsEndTxnLocked() bool {
	return m.sent.Load() || len(m.txn.addedParts) > 0 || len(m.txn.offsetGroups) > 0
}

// Commit commits the current transaction: flush (the produce path's
// "deliver everything and report any failure") runs first, then the staged
// share acknowledgements are sent (AddShareAcksToTxn to the transaction
// coordinator, TxnShareAcknowledge to each partition leader), then EndTxn
// with the stale-answer defense. A transaction that carries anything, even
// only share acknowledgements, ends with EndTxn; one that sent nothing at
// all commits locally. Every step is bounded by ctx and the transaction
// deadline.
//
// On success the Manager is Ready again, with the epoch EndTxn v5 returned
// on TV2 brokers, and staged acknowledgements resolve as committed. On
// failure the Manager is in AbortableError (call Abort) or FatalError; the
// error says which.
func (m *Manager) Commit(ctx context.Context, flush func(context.Context) error) error {
	const op = "commit transaction"
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	if m.state != StateInTransaction {
		probe := m.state == StateAbortableError && m.txn.suspectFenced && !m.txn.aborted && !m.txn.endTxnInDoubt
		err := m.stateErr(op)
		m.mu.Unlock()
		if probe {
			ctx, cancel := context.WithTimeout(ctx, m.timeout)
			defer cancel()
			return m.probeFenced(ctx, op)
		}
		return err
	}
	m.setState(StateCommitting)
	deadline := m.deadline
	m.mu.Unlock()

	ctx, cancel := withDeadline(ctx, deadline)
	defer cancel()

	if flush != nil {
		if err := flush(ctx); err != nil {
			return m.commitFailed(ctx, op, err)
		}
	}
	m.mu.Lock()
	if m.state != StateCommitting { // a produce failed while flushing
		err := m.err
		m.mu.Unlock()
		return m.commitFailed(ctx, op, err)
	}
	staged := len(m.txn.staged) > 0
	m.mu.Unlock()

	if staged {
		if err := m.sendStagedShareAcks(ctx); err != nil {
			return m.commitFailed(ctx, op, err)
		}
	}

	m.mu.Lock()
	needEnd := m.needsEndTxnLocked()
	m.mu.Unlock()
	if needEnd {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return m.commitFailed(ctx, op, errors.New("transaction timeout elapsed before EndTxn"))
		}
		if err := m.endTxn(ctx, true); err != nil {
			return m.commitFailed(ctx, op, err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resolveStagedLocked(true)
	m.stats.Committed++
	m.setState(StateReady)
	m.deadline = time.Time{}
	return nil
}

// commitFailed classifies a commit failure and moves the Manager to the
// matching error state. When a leader answered with an epoch error, the
// producer may have been fenced: an EndTxn(ABORT) tells, and a fenced
// producer gets its fatal error now rather than at its next call.
func (m *Manager) commitFailed(ctx context.Context, op string, err error) error {
	cerr := Classify(op, err)
	m.mu.Lock()
	m.failLocked(cerr)
	probe := m.state == StateAbortableError && m.txn.suspectFenced && !m.txn.aborted && !m.txn.endTxnInDoubt
	m.mu.Unlock()
	if !probe {
		return m.Err()
	}
	return m.probeFenced(ctx, op)
}

// probeFenced finds out, for a transaction that failed with an epoch error
// at a partition leader, whether the producer was fenced: it aborts the
// transaction with EndTxn, which the coordinator answers PRODUCER_FENCED if
// a newer producer took over (the Manager becomes fatal) and otherwise
// performs (the transaction is aborted; Abort then only resets). It returns
// the Manager's error.
func (m *Manager) probeFenced(ctx context.Context, op string) error {
	if perr := m.endTxn(ctx, false); perr != nil {
		var ke *kerr.Error
		if errors.As(perr, &ke) && ke.Code == kerr.ProducerFenced.Code {
			m.mu.Lock()
			m.toFatalLocked(Fatal(op, perr))
			m.mu.Unlock()
		}
		return m.Err()
	}
	m.mu.Lock()
	m.txn.aborted = true
	m.mu.Unlock()
	return m.Err()
}

// Abort aborts the current transaction (in progress or failed). drain, the
// produce path's "fail what is buffered and wait for what is in flight",
// runs first, so that no produce request of this transaction is still
// travelling when EndTxn(ABORT) goes out. If EndTxn cannot abort (the
// coordinator lost the producer id mapping, or the epoch is stale), the
// Manager re-initializes with its current id and epoch, which aborts the
// transaction on the coordinator. On TV1 brokers, if sequence numbers may
// have gaps, it bumps the epoch the same way.
//
// On success the Manager is Ready and staged acknowledgements resolve as
// aborted. If ctx ends first, the Manager stays in AbortableError and Abort
// may be called again.
func (m *Manager) Abort(ctx context.Context, drain func(context.Context) error) error {
	const op = "abort transaction"
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	switch m.state {
	case StateInTransaction, StateAbortableError:
	default:
		err := m.stateErr(op)
		if m.state == StateReady {
			err = Usage(op, errors.New("no transaction in progress"))
		}
		m.mu.Unlock()
		return err
	}
	prev, prevErr := m.state, m.err
	m.setState(StateAborting)
	m.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	restore := func(err error) error {
		cerr := Classify(op, err)
		m.mu.Lock()
		defer m.mu.Unlock()
		if errors.Is(cerr, ErrFatal) {
			m.toFatalLocked(cerr)
			return cerr
		}
		m.setState(StateAbortableError)
		if prev == StateAbortableError && prevErr != nil {
			m.err = fmt.Errorf("%w; abort failed: %w", prevErr, err)
		} else {
			m.err = cerr
		}
		return cerr
	}
	if drain != nil {
		if err := drain(ctx); err != nil {
			return restore(err)
		}
	}
	m.mu.Lock()
	needEnd := m.needsEndTxnLocked() && !m.txn.aborted
	inDoubt := m.txn.endTxnInDoubt
	tv2, needBump := m.tv2, m.txn.needBump
	m.mu.Unlock()

	reinit := !tv2 && needBump
	if needEnd {
		if err := m.endTxn(ctx, false); err != nil {
			var ke *kerr.Error
			switch {
			case errors.As(err, &ke) && ke.Code == kerr.InvalidTxnState.Code && inDoubt:
				// The commit whose answer was lost had been applied.
				m.mu.Lock()
				m.resolveStagedLocked(true)
				m.stats.Committed++
				m.toFatalLocked(Fatal(op, fmt.Errorf("the transaction had committed before the abort (its EndTxn answer was lost): %w", err)))
				err := m.err
				m.mu.Unlock()
				return err
			case errors.As(err, &ke) && recoverableByReinit(ke.Code):
				m.logger.Info("EndTxn(ABORT) refused; re-initializing the producer id to abort", "err", err)
				reinit = true
			default:
				return restore(err)
			}
		}
	}
	if reinit {
		if err := m.initProducerIDLocked(ctx); err != nil {
			return restore(err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resolveStagedLocked(false)
	m.stats.Aborted++
	m.setState(StateReady)
	m.err = nil
	m.deadline = time.Time{}
	return nil
}

// recoverableByReinit lists EndTxn(ABORT) answers after which an
// InitProducerId with the current id and epoch still aborts the
// transaction and keeps the producer: the id mapping expired, the epoch is
// behind, or the coordinator has no transaction to abort.
func recoverableByReinit(code int16) bool {
	switch code {
	case kerr.InvalidProducerIDMapping.Code, kerr.InvalidProducerEpoch.Code,
		kerr.UnknownProducerID.Code, kerr.InvalidTxnState.Code:
		return true
	}
	return false
}

// endTxn sends EndTxn to the transaction coordinator with the stale-answer
// defense and stores the id and epoch that EndTxn v5 returns. The error is
// unclassified. If a COMMIT may have been applied and its answer was lost
// (ctx ended after the request went out), the transaction is marked in
// doubt so that a later Abort can tell what happened.
func (m *Manager) endTxn(ctx context.Context, commit bool) error {
	pid, epoch := m.ProducerID()
	resp, err := m.coords.callCoordinator(ctx, coordinatorCall{
		op:  "EndTxn",
		typ: TransactionCoordinator,
		key: m.txnID,
		sent: func() {
			if commit {
				m.mu.Lock()
				m.txn.endTxnInDoubt = true
				m.mu.Unlock()
			}
		},
		build: func() kmsg.Request {
			req := kmsg.NewPtrEndTxnRequest()
			req.TransactionalID = m.txnID
			req.ProducerID, req.ProducerEpoch = pid, epoch
			req.Commit = commit
			return req
		},
		code: func(r kmsg.Response) (int16, *string) { return r.(*kmsg.EndTxnResponse).ErrorCode, nil },
	})
	if err != nil {
		if !isContextErr(err) {
			// A definite answer: the commit did not happen.
			m.mu.Lock()
			m.txn.endTxnInDoubt = false
			m.mu.Unlock()
		}
		return err
	}
	r := resp.(*kmsg.EndTxnResponse)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.txn.endTxnInDoubt = false
	if m.tv2 {
		if r.Version < 5 {
			return fmt.Errorf("EndTxn: transaction version 2 needs EndTxn v5, the broker answered v%d: %w", r.Version, kerr.UnsupportedVersion)
		}
		m.setIDsLocked(r.ProducerID, r.ProducerEpoch)
	}
	m.sent.Store(false)
	return nil
}
