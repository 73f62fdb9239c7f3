package txn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// enter waits, within ctx, until no other state-changing operation runs,
// and returns the context op runs in (ctx, also ended when Close gives up
// waiting for op) and the function that ends op. Once Close has begun,
// operations fail with kshare.ErrClosed at once, whether or not ctx has
// ended (a select among ready cases would pick one at random). If ctx
// ends first, the error is ctx's, classified.
func (m *Manager) enter(ctx context.Context, op string) (context.Context, func(), error) {
	m.mu.Lock()
	closing := m.closing
	m.unlock()
	if closing {
		return nil, nil, errClosed(op)
	}
	if ctx == nil {
		return nil, nil, errs.Usage(op, errNilContext)
	}
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, Classify(op, ctx.Err())
	case <-m.opsCtx.Done():
		return nil, nil, errClosed(op)
	}
	m.mu.Lock()
	closing = m.closing
	m.unlock()
	if closing {
		<-m.sem
		return nil, nil, errClosed(op)
	}
	opCtx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(m.opsCtx, cancel)
	return opCtx, func() {
		stop()
		cancel()
		<-m.sem
	}, nil
}

// enterDooming is enter for an operation whose failure to start dooms the
// transaction: SendOffsets and StageShareAcks (what they carry did not
// join it, so it must not commit) and Commit (an abortable answer promises
// that the transaction will not commit).
func (m *Manager) enterDooming(ctx context.Context, op string) (context.Context, func(), error) {
	opCtx, leave, err := m.enter(ctx, op)
	if err != nil && errors.Is(err, kshare.ErrAbortable) { // ctx ended
		return nil, nil, m.Fail(op, err)
	}
	return opCtx, leave, err
}

// InitProducerID gets a producer id and epoch from the transaction
// coordinator, fencing any older producer with the same transactional id,
// and detects whether the coordinator runs TV2. Called again in Ready it
// bumps the epoch (passing the current id and epoch, KIP-360).
//
// Called after an abortable error or an in-doubt commit, it recovers the
// way the Java client does: it first ends the open transaction exactly as
// Abort does (drain, then EndTxn(ABORT); an in-doubt commit's outcome is
// learned and settled, committed or not), and then bumps the epoch with
// InitProducerId carrying the current id and epoch. Its own recovery never
// makes the Manager fatal; only a newer producer (PRODUCER_FENCED) or a
// configuration error does. If ctx or the transaction timeout ends first,
// the Manager stays as it was and InitProducerID may be called again.
func (m *Manager) InitProducerID(ctx context.Context, drain func(context.Context) error) error {
	const op = "init producer id"
	ctx, leave, err := m.enter(ctx, op)
	if err != nil {
		return err
	}
	defer leave()
	ctx, cancel := m.withTimeout(ctx)
	defer cancel()
	m.mu.Lock()
	st := m.state
	m.unlock()
	switch st {
	case StateUninitialized, StateReady:
	case StateAbortableError, StateInDoubt:
		// Learning that an in-doubt commit committed is a success here:
		// the transaction is over and the epoch fresh once Ready.
		err := m.abortLocked(ctx, op, drain, true)
		if err != nil && (!errors.Is(err, kshare.ErrCommitted) || m.State() != StateReady) {
			return err
		}
		return nil
	default:
		m.mu.Lock()
		defer m.unlock()
		return m.stateErr(op)
	}
	if err := m.initProducerIDLocked(ctx); err != nil {
		m.mu.Lock()
		defer m.unlock()
		if isFatal(err) {
			m.toFatalLocked(err)
		}
		return err
	}
	m.mu.Lock()
	defer m.unlock()
	m.readyLocked()
	return nil
}

// initProducerIDLocked sends InitProducerId (with the current id and epoch
// when there is one) and stores the answer. The error is classified.
// Called by the operation in progress.
func (m *Manager) initProducerIDLocked(ctx context.Context) error {
	const op = "init producer id"
	pid, epoch := m.ProducerID()
	resp, err := m.coords.callCoordinator(ctx, coordinatorCall{
		op:  "InitProducerId",
		typ: TransactionCoordinator,
		key: m.txnID,
		build: func() kmsg.Request {
			req := kmsg.NewPtrInitProducerIDRequest()
			req.TransactionalID = &m.txnID
			req.TransactionTimeoutMillis = int32(m.timeout / time.Millisecond)
			req.ProducerID, req.ProducerEpoch = pid, epoch
			return req
		},
		code: func(r kmsg.Response) (int16, *string) {
			return r.(*kmsg.InitProducerIDResponse).ErrorCode, nil
		},
	})
	if err != nil {
		return m.classify(op, err)
	}
	r := resp.(*kmsg.InitProducerIDResponse)
	tv2 := false
	if node, ok := m.coords.Cached(TransactionCoordinator, m.txnID); ok {
		caps, err := m.caps.Of(ctx, node)
		if err != nil {
			return m.classify(op, err)
		}
		tv2 = m.caps.tv2(caps)
	}
	m.mu.Lock()
	m.setIDsLocked(r.ProducerID, r.ProducerEpoch)
	m.tv2 = tv2
	m.unlock()
	m.logger.Debug("producer id initialized", "producer_id", r.ProducerID, "epoch", r.ProducerEpoch, "tv2", tv2)
	return nil
}

// Close ends the Manager for good, within ctx. It first waits for the
// operation in progress in another goroutine (a Commit finishes, and so
// never commits part of a transaction: everything it flushed was written);
// if ctx ends first, that operation's context is cancelled, which makes a
// Commit that has not sent EndTxn(COMMIT) fail without sending it, and
// Close waits only for it to notice. Then, in the states that have a
// transaction (InTransaction, AbortableError, InDoubt), it ends it as
// Abort does, drain first; an in-doubt commit's outcome is learned there.
//
// Close returns nil when no transaction is left open or unknown because
// none was in progress or it aborted it, and an error matching
// kshare.ErrCommitted (not a failure) when it learned that an in-doubt
// commit had committed. It returns the error (kshare.ErrAbortable, or
// kshare.ErrInDoubt when a commit's outcome could not be learned) when it
// could not end the transaction; the coordinator then aborts it when the transaction
// timeout passes, or when the next producer with this transactional id
// initializes. Either way every staged acknowledgement has been resolved
// once when Close returns (as not committed unless the commit is known to
// have committed), every later call fails with kshare.ErrClosed, and
// calling Close again returns nil at once. A nil ctx is taken as context.Background().
func (m *Manager) Close(ctx context.Context, drain func(context.Context) error) error {
	const op = "close"
	if ctx == nil {
		ctx = context.Background()
	}
	m.mu.Lock()
	if m.closing {
		m.unlock()
		return nil
	}
	m.closing = true
	m.unlock()
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		m.stopOps()
		m.sem <- struct{}{}
	}
	defer func() { <-m.sem }()
	m.mu.Lock()
	st := m.state
	m.unlock()
	var err error
	switch st {
	case StateInTransaction, StateAbortableError, StateInDoubt:
		ctx, cancel := m.withTimeout(ctx)
		defer cancel()
		switch aerr := m.abortLocked(ctx, op, drain, false); {
		case aerr == nil:
		case errors.Is(aerr, kshare.ErrCommitted):
			// Not a failure, but the caller must be able to tell it from
			// an abort: the transaction's output and acknowledgements
			// took effect.
			err = aerr
		case errors.Is(aerr, kshare.ErrInDoubt):
			err = fmt.Errorf("%w (the commit's outcome is left to the coordinator: it completes the commit if it was applied, and otherwise aborts the transaction when its timeout passes or when the next producer with this transactional id initializes)", aerr)
		default:
			err = fmt.Errorf("%w (the transaction is left to the coordinator, which aborts it when its timeout passes or when the next producer with this transactional id initializes)", aerr)
		}
	}
	m.mu.Lock()
	defer m.unlock()
	m.resolveStagedLocked(false)
	m.setState(StateClosed)
	m.deadline = time.Time{}
	m.stopOps()
	return err
}
