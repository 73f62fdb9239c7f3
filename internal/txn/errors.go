package txn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/retry"
)

// fatalCodes are broker errors after which the producer can do nothing
// more, wherever they come from. PRODUCER_FENCED and INVALID_TXN_STATE are
// only fatal once confirmed by the current coordinator (the stale-answer
// defense), which the callers ensure before classifying.
var fatalCodes = map[int16]bool{
	kerr.ProducerFenced.Code:                     true,
	kerr.TransactionalIDAuthorizationFailed.Code: true,
	kerr.ClusterAuthorizationFailed.Code:         true,
	kerr.UnsupportedVersion.Code:                 true,
	kerr.UnsupportedForMessageFormat.Code:        true,
	kerr.InvalidTransactionTimeout.Code:          true,
	kerr.InvalidTxnState.Code:                    true,
}

// Classify turns any error met during operation op into a classified
// error: errors that are already classified pass through; broker errors
// are ErrFatal when they are in the fatal set; everything else (context
// cancellation, exhausted retries, retriable broker errors, transport
// errors) is ErrAbortable.
func Classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if errs.Is(err) {
		return err
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && fatalCodes[ke.Code] {
		return errs.Fatal(op, err)
	}
	return errs.Abortable(op, err)
}

// classify is Classify for an error of one of m's operations: an error
// that a context ended while connection attempts kept failing names the
// connection error too.
func (m *Manager) classify(op string, err error) error {
	return Classify(op, m.dials.Explain(err))
}

// isFatal reports whether a classified err leaves the producer unable to
// go on.
func isFatal(err error) bool { return errors.Is(err, kshare.ErrFatal) }

// permanent marks err as not worth retrying.
func permanent(err error) error { return retry.Permanent(err) }

// isContextErr reports whether err is a context cancellation or deadline.
func isContextErr(err error) bool { return retry.IsContextErr(err) }

// ErrTransactionTimeout is the cause of a context that the transaction
// timeout ended: a call that gave up then says so, and not only "context
// deadline exceeded" as if the caller's context had ended.
var ErrTransactionTimeout = errors.New("transaction timeout elapsed")

// timeoutCause is the cause of a context that the transaction timeout
// ends.
func (m *Manager) timeoutCause() error {
	return fmt.Errorf("%w (%v)", ErrTransactionTimeout, m.timeout)
}

// withDeadline bounds ctx by the transaction deadline when it is set.
func (m *Manager) withDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadlineCause(ctx, deadline, m.timeoutCause())
}

// withTimeout bounds ctx by the transaction timeout, as every retry of a
// call outside a transaction's deadline is.
func (m *Manager) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, m.timeout, m.timeoutCause())
}

// inDoubtErr classifies err, the reason the outcome of a sent EndTxn(COMMIT)
// could not be learned: ErrInDoubt, or ErrFatal when err is itself fatal
// (the producer was fenced before it could learn; the newer producer's
// initialization settles the outcome), which the message then says.
func inDoubtErr(op string, err error) error {
	if cerr := Classify(op, err); isFatal(cerr) {
		return errs.Fatal(op, fmt.Errorf("the commit's outcome is unknown and this producer can no longer learn it: %w", err))
	}
	return errs.InDoubt(op, err)
}
