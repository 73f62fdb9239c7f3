package txn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
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
// "deliver everything and report any failure") and the sending of the
// staged share acknowledgements (TxnShareAcknowledge to each partition
// leader, which adds the share state partitions to the transaction) run
// at the same time, then, once both succeeded, EndTxn
// with the stale-answer defense. The two are independent until EndTxn decides the transaction
// (acknowledgements staged before their transaction's records are written
// only take effect if it commits), so the commit costs one round trip less
// than doing them in turn; a failure of either dooms the transaction, the
// flush's error first. A transaction that carries anything, even
// only share acknowledgements, ends with EndTxn; one that sent nothing at
// all commits locally. Every step is bounded by ctx and the transaction
// deadline. A lost EndTxn answer (a broken connection) is retried until
// the coordinator answers: the retry of an applied commit is answered as
// the commit.
//
// On success the Manager is Ready again, with the epoch EndTxn v5 returned
// on TV2 brokers, and staged acknowledgements resolve as committed. On
// failure before EndTxn(COMMIT) was sent, the Manager is in AbortableError
// (call Abort) or FatalError; the error says which. If EndTxn(COMMIT) was
// sent and ctx or the deadline ended before an answer came, the error
// matches kshare.ErrInDoubt and the Manager is InDoubt: nothing is resolved until
// Commit (which retries the commit), Abort or InitProducerID learns the
// outcome from the coordinator, or Close tries to. drain is the produce
// path's drain, run before the EndTxn(ABORT) with which a commit that
// failed on an epoch error finds out whether the producer was fenced.
//
// If ctx has ended before Commit could start, the transaction is doomed
// too (kshare.ErrAbortable). If Close gives up waiting for Commit, Commit's
// context ends: a commit that had not sent EndTxn(COMMIT) fails without
// sending it.
func (m *Manager) Commit(ctx context.Context, flush, drain func(context.Context) error) error {
	const op = "commit transaction"
	ctx, leave, err := m.enterDooming(ctx, op)
	if err != nil {
		return err
	}
	defer leave()
	m.mu.Lock()
	switch m.state {
	case StateInTransaction:
	case StateInDoubt:
		m.setState(StateCommitting)
		m.unlock()
		ctx, cancel := m.withTimeout(ctx)
		defer cancel()
		return m.endCommit(ctx, op, drain)
	default:
		probe := m.state == StateAbortableError && m.probeWantedLocked()
		err := m.stateErr(op)
		m.unlock()
		if probe {
			ctx, cancel := m.withTimeout(ctx)
			defer cancel()
			return m.probeFenced(ctx, op, drain)
		}
		return err
	}
	m.setState(StateCommitting)
	deadline := m.deadline
	m.unlock()

	ctx, cancel := m.withDeadline(ctx, deadline)
	defer cancel()

	m.mu.Lock()
	staged := m.kip1289StagedLocked() // no more can join: the state is Committing
	ledger := m.ledgerStagedLocked()
	m.unlock()
	// A failed flush stops the staging: the transaction is doomed.
	stageCtx, stopStaging := context.WithCancel(ctx)
	defer stopStaging()
	flushed := make(chan error, 1)
	doFlush := func() {
		err := error(nil)
		if flush != nil {
			err = flush(ctx)
		}
		if err != nil {
			stopStaging()
		}
		flushed <- err
	}
	if staged {
		go doFlush() // its result is received below on every path
	} else {
		doFlush()
	}
	var stageErr error
	if staged {
		stageErr = m.sendStagedShareAcks(stageCtx)
	}
	if err := <-flushed; err != nil {
		return m.commitFailed(ctx, op, err, drain)
	}
	m.mu.Lock()
	if m.state != StateCommitting { // a produce failed while flushing
		err := m.err
		m.unlock()
		return m.commitFailed(ctx, op, err, drain)
	}
	m.unlock()
	if stageErr != nil {
		return m.commitFailed(ctx, op, stageErr, drain)
	}
	if ledger {
		if h := faultHooks.Load(); h != nil && h.BeforeRenew != nil {
			h.BeforeRenew(ctx)
		}
		// The claims are durable now (acks=all, flushed): only a lock
		// renewed after that proves that no other member was handed the
		// records before the claims could be seen.
		if err := m.renewLedgerAcks(ctx); err != nil {
			return m.commitFailed(ctx, op, err, drain)
		}
	}

	m.mu.Lock()
	if !m.needsEndTxnLocked() {
		defer m.unlock()
		m.settleLocked(true)
		m.readyLocked()
		return nil
	}
	m.unlock()
	if !deadline.IsZero() && time.Now().After(deadline) {
		return m.commitFailed(ctx, op, errors.New("transaction timeout elapsed before EndTxn"), drain)
	}
	return m.endCommit(ctx, op, drain)
}

// endCommit sends EndTxn(COMMIT) and settles what its answer, or its
// absence, says.
func (m *Manager) endCommit(ctx context.Context, op string, drain func(context.Context) error) error {
	err := m.endTxn(ctx, true)
	if h := faultHooks.Load(); err == nil && h != nil && h.Committed != nil {
		m.mu.Lock()
		ledger := m.ledgerStagedLocked()
		m.unlock()
		if ledger {
			h.Committed(ctx)
		}
	}
	m.mu.Lock()
	if err == nil {
		defer m.unlock()
		m.settleLocked(true)
		m.readyLocked()
		return nil
	}
	if !m.txn.inDoubt { // every attempt was answered: none was applied
		m.unlock()
		return m.commitFailed(ctx, op, err, drain)
	}
	defer m.unlock()
	var ke *kerr.Error
	if errors.As(err, &ke) && ke.Code == kerr.InvalidTxnState.Code {
		// Confirmed by the current coordinator: it holds no commit of
		// this transaction, so the earlier attempt was not applied.
		m.txn.inDoubt = false
		cerr := errs.Fatal(op, err)
		m.toFatalLocked(cerr)
		return cerr
	}
	cerr := inDoubtErr(op, m.dials.Explain(err))
	if isFatal(cerr) {
		m.toFatalLocked(cerr)
		return cerr
	}
	m.logger.Warn("commit outcome unknown: EndTxn(COMMIT) was sent and no answer came", "err", err)
	m.setState(StateInDoubt)
	m.err = cerr
	return cerr
}

// probeWantedLocked reports whether a failed transaction should be probed
// for fencing: a leader answered with an epoch error, and nothing has
// ended the transaction or may have committed it.
func (m *Manager) probeWantedLocked() bool {
	return m.txn.suspectFenced && !m.txn.aborted && !m.txn.inDoubt && !m.txn.over
}

// commitFailed classifies a commit failure and moves the Manager to the
// matching error state. When a leader answered with an epoch error, the
// producer may have been fenced: an EndTxn(ABORT) tells, and a fenced
// producer gets its fatal error now rather than at its next call.
func (m *Manager) commitFailed(ctx context.Context, op string, err error, drain func(context.Context) error) error {
	cerr := m.classify(op, err)
	m.mu.Lock()
	m.failLocked(cerr)
	probe := m.state == StateAbortableError && m.probeWantedLocked()
	m.unlock()
	if !probe {
		return m.Err()
	}
	return m.probeFenced(ctx, op, drain)
}

// probeFenced finds out, for a transaction that failed with an epoch error
// at a partition leader, whether the producer was fenced: once nothing of
// the transaction is travelling (drain), it aborts the transaction with
// EndTxn, which the coordinator answers PRODUCER_FENCED if a newer producer
// took over (the Manager becomes fatal) and otherwise performs (the
// transaction is aborted; Abort then only settles it). If the drain cannot
// finish within ctx, it does not probe. It returns the Manager's error.
func (m *Manager) probeFenced(ctx context.Context, op string, drain func(context.Context) error) error {
	if drain != nil {
		if err := drain(ctx); err != nil {
			return m.Err()
		}
	}
	if perr := m.endTxn(ctx, false); perr != nil {
		var ke *kerr.Error
		if errors.As(perr, &ke) && ke.Code == kerr.ProducerFenced.Code {
			m.mu.Lock()
			m.toFatalLocked(errs.Fatal(op, perr))
			m.unlock()
		}
		return m.Err()
	}
	m.mu.Lock()
	m.txn.aborted = true
	m.unlock()
	return m.Err()
}

// Abort aborts the current transaction (in progress, failed, or with a
// commit in doubt). drain, the produce path's "fail what is buffered and
// wait for what is in flight", runs first, so that no produce request of
// this transaction is still travelling when EndTxn(ABORT) goes out. If
// EndTxn cannot abort (the coordinator lost the producer id mapping, or
// the epoch is stale), the Manager re-initializes with its current id and
// epoch, which aborts the transaction on the coordinator. On TV1 brokers,
// if sequence numbers may have gaps, it bumps the epoch the same way.
//
// After an in-doubt commit, the EndTxn(ABORT) learns the outcome: it
// aborts the transaction if the commit was not applied, and is answered
// INVALID_TXN_STATE if it was; Abort then fetches the epoch the commit
// moved to and returns an error matching kshare.ErrCommitted (the metrics and the
// staged acknowledgements say committed too).
//
// On success the Manager is Ready and staged acknowledgements resolve as
// not committed. If ctx ends first, the Manager stays in AbortableError (or
// InDoubt) and Abort may be called again; a fenced producer becomes fatal.
func (m *Manager) Abort(ctx context.Context, drain func(context.Context) error) error {
	const op = "abort transaction"
	ctx, leave, err := m.enter(ctx, op)
	if err != nil {
		return err
	}
	defer leave()
	m.mu.Lock()
	switch m.state {
	case StateInTransaction, StateAbortableError, StateInDoubt:
	case StateReady:
		m.unlock()
		return errs.Usage(op, errors.New("no transaction in progress"))
	default:
		err := m.stateErr(op)
		m.unlock()
		return err
	}
	m.unlock()
	ctx, cancel := m.withTimeout(ctx)
	defer cancel()
	return m.abortLocked(ctx, op, drain, false)
}

// abortLocked ends the current transaction as Abort describes and, with
// bump (InitProducerID's recovery) or when the epoch must be refreshed,
// sends InitProducerId with the current id and epoch. The outcome is
// settled (counted, acknowledgements resolved) as soon as it is known, so
// that a retry after a failed epoch refresh does not count it again.
// Called by the operation in progress.
func (m *Manager) abortLocked(ctx context.Context, op string, drain func(context.Context) error, bump bool) error {
	m.mu.Lock()
	prev, prevErr := m.state, m.err
	inDoubt, over := m.txn.inDoubt, m.txn.over
	m.setState(StateAborting)
	m.unlock()

	fail := func(err error) error {
		err = m.dials.Explain(err)
		cerr := Classify(op, err)
		m.mu.Lock()
		defer m.unlock()
		if m.txn.inDoubt {
			cerr = inDoubtErr(op, err)
		}
		switch {
		case isFatal(cerr):
			m.toFatalLocked(cerr)
		case m.txn.inDoubt:
			m.setState(StateInDoubt)
			m.err = cerr
		default:
			m.setState(StateAbortableError)
			if prev == StateAbortableError && prevErr != nil && !over {
				m.err = fmt.Errorf("%w; abort failed: %w", prevErr, err)
			} else {
				m.err = cerr
			}
		}
		return cerr
	}

	var outcome error // what to report once the epoch is fresh
	reinit := bump || over
	if !over {
		if drain != nil && !inDoubt {
			if err := drain(ctx); err != nil {
				return fail(err)
			}
		}
		m.mu.Lock()
		needEnd := (m.needsEndTxnLocked() && !m.txn.aborted) || inDoubt
		reinit = reinit || (!m.tv2 && m.txn.needBump)
		m.unlock()
		committed := false
		if needEnd {
			err := m.endTxn(ctx, false)
			var ke *kerr.Error
			known := errors.As(err, &ke)
			switch {
			case err == nil:
			case inDoubt && known && ke.Code == kerr.InvalidTxnState.Code:
				// The coordinator has this transaction committing or
				// committed: the EndTxn(COMMIT) whose answer was lost had
				// been applied. Its answer carries no epoch; fetch it.
				committed, reinit = true, true
				outcome = errs.Committed(op, fmt.Errorf("its EndTxn(COMMIT) had been applied and the answer was lost: %w", err))
			case inDoubt && known && (ke.Code == kerr.InvalidProducerIDMapping.Code || ke.Code == kerr.UnknownProducerID.Code):
				// The coordinator no longer knows the producer: the
				// outcome cannot be learned any more.
				reinit = true
				outcome = errs.InDoubt(op, fmt.Errorf("the coordinator no longer knows the producer, so the outcome cannot be learned: %w", err))
			case !inDoubt && known && recoverableByReinit(ke.Code):
				m.logger.Info("EndTxn(ABORT) refused; re-initializing the producer id to abort", "err", err)
				reinit = true
			default:
				return fail(err)
			}
		}
		m.mu.Lock()
		if errors.Is(outcome, kshare.ErrInDoubt) {
			m.resolveStagedLocked(false)
			m.txn = txnScope{over: true}
		} else {
			m.settleLocked(committed)
		}
		m.unlock()
	}
	if reinit {
		if err := m.initProducerIDLocked(ctx); err != nil {
			cerr := fail(err)
			if outcome != nil {
				// The outcome is what the caller must hear (a commit
				// learned late is still a commit); the state keeps the
				// refresh's failure for the next call.
				return errs.New(errs.ClassOf(outcome), op, fmt.Errorf("%w; then refreshing the epoch failed: %w", errs.Cause(outcome), errs.Cause(cerr)))
			}
			return cerr
		}
	}
	m.mu.Lock()
	defer m.unlock()
	m.readyLocked()
	return outcome
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
// unclassified. Once an attempt of a COMMIT was handed to the transport
// and its answer never came, the transaction is in doubt until a caller
// learns its outcome (an answered attempt, even an error, was not applied;
// a lost one may have been, whatever later attempts are answered).
func (m *Manager) endTxn(ctx context.Context, commit bool) error {
	pid, epoch := m.ProducerID()
	tv2 := m.TV2()
	resp, err := m.coords.callCoordinator(ctx, coordinatorCall{
		op:  "EndTxn",
		typ: TransactionCoordinator,
		key: m.txnID,
		lost: func() {
			if commit {
				m.mu.Lock()
				m.txn.inDoubt = true
				m.unlock()
			}
		},
		build: func() kmsg.Request {
			req := kmsg.NewPtrEndTxnRequest()
			req.TransactionalID = m.txnID
			req.ProducerID, req.ProducerEpoch = pid, epoch
			req.Commit = commit
			if !tv2 {
				// EndTxn v5 bumps the epoch (transaction version 2):
				// a version 1 producer, whose client may allow v5 while
				// it cannot send Produce v12, must not lose its epoch.
				return versionCapped{req, 4}
			}
			return req
		},
		code: func(r kmsg.Response) (int16, *string) { return r.(*kmsg.EndTxnResponse).ErrorCode, nil },
	})
	if err != nil {
		return err
	}
	r := resp.(*kmsg.EndTxnResponse)
	m.mu.Lock()
	defer m.unlock()
	if m.tv2 {
		if r.Version < 5 {
			return fmt.Errorf("EndTxn: transaction version 2 needs EndTxn v5, the broker answered v%d: %w", r.Version, kerr.UnsupportedVersion)
		}
		m.setIDsLocked(r.ProducerID, r.ProducerEpoch)
	}
	m.sent.Store(false)
	return nil
}
