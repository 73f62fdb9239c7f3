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
// wraps both the context error and the last error op returned.
func Do[T any](ctx context.Context, op func(ctx context.Context) (T, error)) (T, error) {
	var last error
	res, err := backoff.RetryWithData(func() (T, error) {
		if err := ctx.Err(); err != nil {
			var zero T
			return zero, Permanent(GaveUp(err, last))
		}
		res, err := op(ctx)
		if err != nil {
			last = err
		}
		return res, err
	}, WithContext(ctx))
	if err != nil && IsContextErr(err) && last != nil && !IsContextErr(last) {
		err = GaveUp(err, last)
	}
	return res, err
}

// GaveUp describes a retry loop that ran out of time: the context error,
// and the last error it retried, both reachable with errors.Is/As.
func GaveUp(ctxErr, last error) error {
	if last == nil {
		return ctxErr
	}
	if errors.Is(last, ctxErr) {
		return last
	}
	return fmt.Errorf("%w (last error: %w)", ctxErr, last)
}

// IsContextErr reports whether err is a context cancellation or deadline.
func IsContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
