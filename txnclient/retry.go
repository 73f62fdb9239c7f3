package txnclient

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Backoff bounds of every retry loop. The first retry waits about
// retryInitial; waits double up to retryMax; each is jittered by ±50% so
// that producers retrying the same coordinator spread out.
const (
	retryInitial = 20 * time.Millisecond
	retryMax     = time.Second
	retryJitter  = 0.5
)

// NewBackoff returns the exponential, jittered backoff used by every kshare
// retry loop, stopping when ctx ends. Other kshare packages use it so that
// all retries behave alike.
func NewBackoff(ctx context.Context) backoff.BackOff {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(retryInitial),
		backoff.WithMaxInterval(retryMax),
		backoff.WithRandomizationFactor(retryJitter),
		backoff.WithMultiplier(2),
		backoff.WithMaxElapsedTime(0), // bounded by ctx only
	)
	return backoff.WithContext(b, ctx)
}

// permanent marks err as not worth retrying.
func permanent(err error) error { return backoff.Permanent(err) }

// Retry runs op until it returns nil, returns an error wrapped with
// backoff.Permanent (which Retry unwraps and returns as is), or ctx ends.
// When ctx ends, the returned error wraps both the context error and the
// last error op returned. Callers bound ctx by the transaction deadline.
func Retry[T any](ctx context.Context, op func(ctx context.Context) (T, error)) (T, error) {
	var last error
	res, err := backoff.RetryWithData(func() (T, error) {
		if err := ctx.Err(); err != nil {
			var zero T
			return zero, permanent(gaveUp(err, last))
		}
		res, err := op(ctx)
		if err != nil {
			last = err
		}
		return res, err
	}, NewBackoff(ctx))
	if err != nil && isContextErr(err) && last != nil && !isContextErr(last) {
		err = gaveUp(err, last)
	}
	return res, err
}

// withDeadline bounds ctx by deadline when deadline is set.
func withDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline)
}
