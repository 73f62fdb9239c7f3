package txnclient

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The error taxonomy. Every error a Manager (or the producer built on it)
// returns matches exactly one of ErrAbortable, ErrInDoubt, ErrCommitted,
// ErrFatal or ErrUsage with errors.Is, with two refinements: errors
// matching ErrShareAcksUnsupported also match ErrFatal, and a fatal error
// that leaves a commit's outcome unknown matches both ErrFatal and
// ErrInDoubt (act on ErrFatal: close). Each keeps its cause (a *kerr.Error,
// a context error, a connection error) reachable with errors.As /
// errors.Is.
//
// What to do: ErrAbortable, abort (the transaction did not commit and will
// not); ErrInDoubt, abort, which learns the outcome (or commit again,
// which finishes the commit); ErrCommitted, nothing (the abort found that
// the transaction had committed); ErrFatal, close; ErrUsage, fix the code.
var (
	// ErrAbortable means the current transaction cannot commit: abort it
	// (AbortTransaction) and, if you want, redo its work in a new one.
	// Retriable broker errors end up here once the caller's context or the
	// transaction timeout runs out.
	ErrAbortable = errors.New("abortable transaction error")

	// ErrFatal means the producer can do nothing more: it was fenced by a
	// newer producer with the same transactional id, is not authorized, or
	// the cluster lacks something it needs. Close it.
	ErrFatal = errors.New("fatal producer error")

	// ErrShareAcksUnsupported means a broker that would have to take part
	// in a transactional share acknowledgement does not advertise the
	// KIP-1289 APIs or the share.version feature level they need. Nothing
	// was sent and the transaction is unchanged. Such errors also match
	// ErrFatal: no retry can succeed on this cluster.
	ErrShareAcksUnsupported = errors.New("broker does not support transactional share acknowledgements (KIP-1289)")

	// ErrUsage means the call is not valid in the current state (for
	// example Produce outside a transaction) or its arguments are invalid.
	// Nothing changed; fix the calling code.
	ErrUsage = errors.New("invalid use")

	// ErrInDoubt means the transaction's commit was sent (EndTxn(COMMIT))
	// and its answer never came: it committed entirely or not at all, and
	// which is not known yet. CommitTransaction retries a lost answer until
	// the coordinator answers, within the caller's context and the
	// transaction timeout, and returns ErrInDoubt only when both ran out.
	// The next AbortTransaction, CommitTransaction, InitTransactions or
	// Close learns the outcome from the coordinator and reports it. A
	// fatal error that leaves a commit's outcome unknown (the producer was
	// fenced meanwhile) matches both ErrFatal and ErrInDoubt.
	ErrInDoubt = errors.New("transaction outcome in doubt")

	// ErrCommitted is AbortTransaction's answer when it finds that the
	// transaction it was asked to abort had committed: the commit whose
	// outcome was in doubt (ErrInDoubt) had been applied. Outputs and
	// acknowledgements took effect; nothing is to be redone, and the
	// producer is ready for the next transaction.
	ErrCommitted = errors.New("transaction had committed")
)

// Error is the concrete type of every error a Manager returns. Use
// errors.Is with the sentinels above to classify it and errors.As to reach
// its cause.
type Error struct {
	// Op names the operation that failed, e.g. "commit transaction".
	Op string
	// Err is the cause.
	Err error
	// kinds holds the sentinels this error matches.
	kinds []error
}

func newError(kinds []error, op string, cause error) *Error {
	return &Error{Op: op, Err: cause, kinds: kinds}
}

// Abortable wraps cause as an ErrAbortable error of operation op. The
// producer uses it for failures it detects itself.
func Abortable(op string, cause error) error { return newError([]error{ErrAbortable}, op, cause) }

// Fatal wraps cause as an ErrFatal error of operation op.
func Fatal(op string, cause error) error { return newError([]error{ErrFatal}, op, cause) }

// Usage wraps cause as an ErrUsage error of operation op.
func Usage(op string, cause error) error { return newError([]error{ErrUsage}, op, cause) }

// InDoubt wraps cause, the reason the outcome of a sent EndTxn(COMMIT)
// could not be learned, as an ErrInDoubt error of operation op. If cause
// is itself fatal (the producer was fenced before it could learn), the
// error matches ErrFatal too.
func InDoubt(op string, cause error) error {
	kinds := []error{ErrInDoubt}
	if errors.Is(Classify(op, cause), ErrFatal) {
		kinds = []error{ErrFatal, ErrInDoubt}
	}
	return newError(kinds, op, unclassified(cause))
}

// unclassified returns the cause inside a classified error, so that a
// reclassified error does not match its former class too.
func unclassified(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Err != nil {
		return e.Err
	}
	return err
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("kshare: ")
	b.WriteString(e.Op)
	b.WriteString(": ")
	for i, k := range e.kinds {
		if i > 0 {
			if e.kinds[0] == ErrShareAcksUnsupported {
				break // says enough: it implies ErrFatal
			}
			b.WriteString(", ")
		}
		b.WriteString(k.Error())
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the sentinels the error matches and its cause.
func (e *Error) Unwrap() []error {
	out := make([]error, 0, len(e.kinds)+1)
	out = append(out, e.kinds...)
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// isClassified reports whether err already carries a classification.
func isClassified(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

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
// *Error: errors that are already classified pass through; context
// cancellation and exhausted retries become ErrAbortable; broker errors are
// ErrFatal when they are in the fatal set and ErrAbortable otherwise.
func Classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if isClassified(err) {
		return err
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && fatalCodes[ke.Code] {
		return Fatal(op, err)
	}
	return Abortable(op, err)
}

// gaveUp describes a retry loop that ran out of time: the context error,
// and the last error it retried, both reachable with errors.Is/As.
func gaveUp(ctxErr, last error) error {
	if last == nil {
		return ctxErr
	}
	if errors.Is(last, ctxErr) {
		return last
	}
	return fmt.Errorf("%w (last error: %w)", ctxErr, last)
}

// isContextErr reports whether err is a context cancellation or deadline.
func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
