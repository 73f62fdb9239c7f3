package shareconsumer

import (
	"errors"
	"fmt"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
)

var (
	// ErrLockExpired means a record's acquisition lock is gone: its
	// deadline passed, or the lock was lost with the share session, a
	// leader move or the member being fenced. The broker hands such a
	// record to another delivery, so it must not be acknowledged by this
	// one. It matches kshare.ErrAbortable: a transaction that meets it
	// must abort, and the work may be redone with the redelivered record.
	ErrLockExpired = errs.Sentinel(kshare.ErrAbortable, "acquisition lock of the record expired or was lost")

	// ErrNotHeld means the consumer does not hold the record: it was not
	// returned by this consumer's Poll, or it was already acknowledged,
	// staged in another transaction or forgotten. It matches
	// kshare.ErrUsage: the calling code acknowledges records it should
	// not.
	ErrNotHeld = errs.Sentinel(kshare.ErrUsage, "record is not held by this consumer")
)

// errLockLost is the failure of a renewal of records whose lock the
// consumer knows to be gone.
var errLockLost = fmt.Errorf("lock lost (share session reset, leader moved or member fenced): %w", ErrLockExpired)

// errConsumerClosing is the cause of acknowledgements that the consumer
// could not send because it closed; it is unclassified, so that the
// *AckError around it keeps one class.
var errConsumerClosing = errors.New("the share consumer closed before the acknowledgement was sent")

// errClosed is what every call of op gets once Close has begun.
func errClosed(op string) error {
	return errs.Closed(op, errors.New("share consumer is closed"))
}

// errWrongMode is what a call of op gets outside its acknowledgement mode.
func errWrongMode(op string, mode AckMode) error {
	return errs.Usage(op, fmt.Errorf("not valid in %s mode", mode))
}

// errNilContext is what a call of op gets when given a nil context.
func errNilContext(op string) error { return errs.Usage(op, errors.New("nil context")) }
