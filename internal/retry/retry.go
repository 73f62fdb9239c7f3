// Package retry is kshare's one retry policy: a jittered exponential
// backoff that every retry loop of every client package uses (transaction
// requests, produce batches, metadata, the share consumer's heartbeats and
// sessions), and Do, the loop around it.
//
// The first retry waits about 20ms, waits double up to 1s, and each is
// jittered by ±50%, so that clients retrying the same broker spread out.
// One policy serves both kinds of loop: the transaction path is bounded by
// the caller's context and the transaction timeout, where a short first
// wait keeps a commit fast after a coordinator move; the consumer's
// background loops are bounded by nothing, where the 1s cap keeps a down
// broker from being hammered.
package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// The policy's bounds.
const (
	Initial = 20 * time.Millisecond
	Max     = time.Second
	Jitter  = 0.5
)

// NewBackoff returns the policy's backoff, unbounded in time: a loop stops
// it itself (or with a context, see Do).
func NewBackoff() backoff.BackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(Initial),
		backoff.WithMaxInterval(Max),
		backoff.WithRandomizationFactor(Jitter),
		backoff.WithMultiplier(2),
		backoff.WithMaxElapsedTime(0),
	)
}

// WithContext returns the policy's backoff, stopping when ctx ends.
func WithContext(ctx context.Context) backoff.BackOff {
	return backoff.WithContext(NewBackoff(), ctx)
}

// Permanent marks err as not worth retrying: Do returns it at once.
func Permanent(err error) error { return backoff.Permanent(err) }

// Do runs op until it returns nil, returns an error marked Permanent
// (returned unwrapped), or ctx ends. When ctx ends, the returned error
// wraps the context's error, the context's own cause if it has one
// (context.WithDeadlineCause, say "transaction timeout elapsed"), and the
// last error op returned that was not a context error, so that a loop that
// ran out of time says what it was retrying. All are reachable with
// errors.Is and errors.As.
func Do[T any](ctx context.Context, op func(ctx context.Context) (T, error)) (T, error) {
	// final is op's last error, which says where it stopped; last is the
	// last one that was not the context's.
	var final, last error
	res, err := backoff.RetryWithData(func() (T, error) {
		if err := ctx.Err(); err != nil {
			var zero T
			return zero, Permanent(err)
		}
		res, err := op(ctx)
		if err != nil {
			final = err
			var perm *backoff.PermanentError
			if errors.As(err, &perm) {
				final = perm.Err
			}
			if !IsContextErr(final) {
				last = final
			}
		}
		return res, err
	}, WithContext(ctx))
	if err != nil && ctx.Err() != nil && IsContextErr(err) {
		if IsContextErr(final) {
			err = final
		}
		err = gaveUp(ctx, err, last)
	}
	return res, err
}

// gaveUp describes a retry loop that ran out of time: err, the context
// error it ended with, then the context's cause and the last error it
// retried, when err does not carry them already.
func gaveUp(ctx context.Context, err, last error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	if last != nil && !errors.Is(err, last) {
		err = fmt.Errorf("%w (last error: %w)", err, last)
	}
	return err
}

// CtxErr returns ctx's error with its own cause, when it has one that is
// not the error itself: "context deadline exceeded (transaction timeout
// elapsed)". It is nil while ctx has not ended.
func CtxErr(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("%w (%w)", err, cause)
	}
	return err
}

// IsContextErr reports whether err is a context cancellation or deadline.
func IsContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
