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

// isFatal reports whether a classified err leaves the producer unable to
// go on.
func isFatal(err error) bool { return errors.Is(err, kshare.ErrFatal) }

// permanent marks err as not worth retrying.
func permanent(err error) error { return retry.Permanent(err) }

// isContextErr reports whether err is a context cancellation or deadline.
func isContextErr(err error) bool { return retry.IsContextErr(err) }

// withDeadline bounds ctx by deadline when deadline is set.
func withDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline)
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
