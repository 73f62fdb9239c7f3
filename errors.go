package kshare

import "errors"

// The error classes. Every error that a kshare call returns (producer,
// shareconsumer, acknowledger, wire) matches exactly one of them with
// errors.Is, and each class says what the application does next. The
// error also keeps its cause reachable: errors.As finds the Kafka error
// (*kerr.Error) or the context error behind it, and errors.Is the
// package sentinels that refine a class (shareconsumer.ErrLockExpired,
// for one).
//
//	err := prod.CommitTransaction(ctx)
//	switch {
//	case err == nil:
//	case errors.Is(err, kshare.ErrAbortable):   // abort, redo the work
//	case errors.Is(err, kshare.ErrInDoubt):     // AbortTransaction learns the outcome
//	default:                                    // ErrFatal, ErrUnsupported, ErrUsage, ErrClosed: stop
//	}
//
//	var ke *kerr.Error
//	if errors.As(err, &ke) && ke == kerr.ProducerFenced { ... }
var (
	// ErrAbortable means the work did not take effect and will not: a
	// transaction that cannot commit (a record failed, a lock expired, an
	// acknowledgement was refused, a retriable error outlasted the
	// context or the transaction timeout), or acknowledgements that the
	// brokers did not apply. Abort the transaction (AbortTransaction);
	// its records come back to the group and the work may be redone with
	// them. The client stays usable.
	ErrAbortable = errors.New("abortable error")

	// ErrInDoubt means a commit was sent and its answer never came: the
	// transaction committed entirely or not at all, and which is not
	// known yet. Call AbortTransaction (or the acknowledger's
	// AbortAcknowledgements), which learns the outcome: nil means it had
	// not committed (redo the work), ErrCommitted that it had (the work
	// is done). CommitTransaction again finishes the commit instead.
	ErrInDoubt = errors.New("transaction outcome in doubt")

	// ErrCommitted is not a failure: it is how AbortTransaction (or
	// AbortAcknowledgements) reports that the transaction it was asked to
	// abort, whose commit was in doubt (ErrInDoubt), had committed, and
	// how Close reports that it learned the same while ending that
	// transaction. Its outputs and acknowledgements took effect; treat it
	// as a commit. After AbortTransaction the client is ready for the
	// next transaction.
	ErrCommitted = errors.New("transaction had committed")

	// ErrFatal means the client can do nothing more: its producer was
	// fenced by a newer one with the same transactional id, it is not
	// authorized, or the cluster refused its configuration. Close it; a
	// new instance (after a restart, say) takes over. A fatal error of a
	// commit whose outcome was in doubt says so in its message; the
	// outcome is then settled by the newer producer's InitTransactions.
	ErrFatal = errors.New("fatal error")

	// ErrUnsupported means the call needs something the cluster lacks:
	// the KIP-1289 APIs for transactional share acknowledgements, share
	// groups, or messages that decode as kshare's. Nothing was sent and
	// nothing changed; no retry can succeed on this cluster. Stop, or
	// take a path that does not need the feature.
	ErrUnsupported = errors.New("not supported by the cluster")

	// ErrUsage means the call was invalid: bad arguments or options, a
	// call in the wrong state (BeginTransaction twice, Ack outside
	// Explicit mode), records the consumer does not hold. Nothing
	// changed; fix the calling code. Poll also reports a subscribed topic
	// that does not exist this way.
	ErrUsage = errors.New("invalid use")

	// ErrClosed means the client was closed: the call came after Close
	// began. Nothing changed.
	ErrClosed = errors.New("client closed")
)
