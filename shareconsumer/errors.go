package shareconsumer

import "errors"

var (
	// ErrClosed is returned by every call made after Close began.
	ErrClosed = errors.New("share consumer is closed")

	// ErrLockExpired means a record's acquisition lock is gone: its
	// deadline passed, or the lock was lost with the share session, a
	// leader move or the member being fenced. The broker hands such a
	// record to another delivery, so it must not be acknowledged by this
	// one. A transaction that meets it must abort (the producer and the
	// acknowledger report it as ErrAbortable); the work may be redone
	// with the redelivered record.
	ErrLockExpired = errors.New("acquisition lock of the record expired or was lost")

	// ErrNotHeld means the consumer does not hold the record: it was not
	// returned by Poll, or it was already acknowledged, staged in another
	// transaction or forgotten.
	ErrNotHeld = errors.New("record is not held by this consumer")

	// ErrWrongMode means the call does not belong to the consumer's
	// acknowledgement mode (Ack outside Explicit mode, staging a
	// transaction outside Transactional mode).
	ErrWrongMode = errors.New("call not valid in this acknowledgement mode")

	// ErrInvalidAckType means an acknowledgement type the call cannot
	// take (for example GAP or RENEW given to Ack).
	ErrInvalidAckType = errors.New("invalid acknowledgement type")
)

// errNilContext is what Poll and Commit return when given a nil context.
var errNilContext = errors.New("shareconsumer: nil context")
