package shareconsumer

import (
	"context"
	"errors"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

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

// isContextErr reports whether err is a context cancellation or deadline.
func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// slogAdapter makes a *slog.Logger a kgo.Logger, so kgo's lines reach the
// consumer's logger.
type slogAdapter struct{ l *slog.Logger }

func (s slogAdapter) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case s.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case s.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelInfo
	case s.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	case s.l.Enabled(ctx, slog.LevelError):
		return kgo.LogLevelError
	}
	return kgo.LogLevelNone
}

func (s slogAdapter) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lvl = slog.LevelError
	case kgo.LogLevelWarn:
		lvl = slog.LevelWarn
	case kgo.LogLevelInfo:
		lvl = slog.LevelInfo
	}
	s.l.Log(context.Background(), lvl, msg, append(keyvals, "component", "kgo")...)
}
