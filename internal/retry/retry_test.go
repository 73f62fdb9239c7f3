package retry

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
)

// A loop that runs out of time returns the context error and keeps the
// last error it retried reachable; a permanent error stops it at once.
func TestDoGivesUpWithLastError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	attempts := 0
	_, err := Do(ctx, func(context.Context) (int, error) {
		attempts++
		if attempts == 3 {
			cancel()
		}
		return 0, fmt.Errorf("attempt %d: %w", attempts, kerr.CoordinatorLoadInProgress)
	})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, kerr.CoordinatorLoadInProgress)
	require.Equal(t, 3, attempts)

	attempts = 0
	_, err = Do(context.Background(), func(context.Context) (int, error) {
		attempts++
		return 0, Permanent(kerr.ProducerFenced)
	})
	require.Equal(t, 1, attempts, "permanent errors stop the loop")
	require.ErrorIs(t, err, kerr.ProducerFenced)

	got, err := Do(context.Background(), func(context.Context) (string, error) { return "done", nil })
	require.NoError(t, err)
	require.Equal(t, "done", got)

}

// A loop whose last attempt ends with the context's error still names the
// error it retried before, and the context's own cause.
func TestDoGivesUpWithCauseAndLastRetriedError(t *testing.T) {
	errTimeout := errors.New("transaction timeout elapsed")
	ctx, cancel := context.WithCancelCause(context.Background())
	attempts := 0
	_, err := Do(ctx, func(ctx context.Context) (int, error) {
		attempts++
		if attempts < 3 {
			return 0, fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
		}
		cancel(errTimeout)
		return 0, fmt.Errorf("attempt %d: %w", attempts, ctx.Err())
	})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "the last error retried is kept: %v", err)
	require.ErrorIs(t, err, errTimeout, "the context's cause is named: %v", err)
	require.Equal(t, "attempt 3: context canceled (transaction timeout elapsed) (last error: dial: connection refused)", err.Error())

	// Without a cause of its own and with nothing retried, the context's
	// error is all there is.
	ctx, stop := context.WithCancel(context.Background())
	stop()
	_, err = Do(ctx, func(context.Context) (int, error) { return 0, nil })
	require.Equal(t, context.Canceled, err)
	require.NoError(t, CtxErr(context.Background()))
	require.Equal(t, context.Canceled, CtxErr(ctx))
	ctx, cancel = context.WithCancelCause(context.Background())
	cancel(errTimeout)
	require.ErrorIs(t, CtxErr(ctx), errTimeout)
	require.ErrorIs(t, CtxErr(ctx), context.Canceled)
}

// The policy's waits start near Initial, double, and never pass Max, each
// jittered within ±Jitter.
func TestBackoffBounds(t *testing.T) {
	b := NewBackoff()
	want := Initial
	for i := range 40 {
		d := b.NextBackOff()
		require.NotEqual(t, backoff.Stop, d, "never stops on its own")
		lo := time.Duration(float64(want) * (1 - Jitter))
		hi := time.Duration(float64(want) * (1 + Jitter))
		require.True(t, d >= lo && d <= hi, "wait %d: %v not in [%v, %v]", i, d, lo, hi)
		want = min(2*want, Max)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Equal(t, backoff.Stop, WithContext(ctx).NextBackOff(), "a context bounds it")
	require.True(t, IsContextErr(fmt.Errorf("x: %w", context.DeadlineExceeded)))
	require.False(t, IsContextErr(errors.New("x")))
}
