package txnclient

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestClassify(t *testing.T) {
	for _, ke := range []*kerr.Error{kerr.ProducerFenced, kerr.TransactionalIDAuthorizationFailed,
		kerr.InvalidTxnState, kerr.UnsupportedVersion, kerr.InvalidTransactionTimeout} {
		err := Classify("op", fmt.Errorf("at node 1: %w", ke))
		require.ErrorIs(t, err, ErrFatal, "%v", ke)
		require.NotErrorIs(t, err, ErrAbortable)
		var got *kerr.Error
		require.True(t, errors.As(err, &got))
		require.Equal(t, ke, got)
	}
	for _, cause := range []error{kerr.InvalidRecordState, kerr.InvalidProducerEpoch, kerr.MessageTooLarge,
		context.DeadlineExceeded, errors.New("connection reset")} {
		err := Classify("op", cause)
		require.ErrorIs(t, err, ErrAbortable, "%v", cause)
		require.NotErrorIs(t, err, ErrFatal)
		require.ErrorIs(t, err, cause)
	}
	classified := Classify("first", kerr.MessageTooLarge)
	require.Same(t, classified, Classify("second", classified), "already classified errors pass through")
	require.NoError(t, Classify("op", nil))
}

func TestShareAcksUnsupportedIsFatal(t *testing.T) {
	err := newError([]error{ErrShareAcksUnsupported, ErrFatal}, "op", errors.New("broker 1 lacks key 96"))
	require.ErrorIs(t, err, ErrShareAcksUnsupported)
	require.ErrorIs(t, err, ErrFatal)
	require.NotErrorIs(t, err, ErrAbortable)
	require.Contains(t, err.Error(), "broker 1 lacks key 96")
}

// A retry loop that runs out of time returns the context error and keeps
// the last error it retried reachable.
func TestRetryGivesUpWithLastError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	attempts := 0
	_, err := Retry(ctx, func(context.Context) (int, error) {
		attempts++
		if attempts == 3 {
			cancel()
		}
		return 0, fmt.Errorf("attempt %d: %w", attempts, kerr.CoordinatorLoadInProgress)
	})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, kerr.CoordinatorLoadInProgress)
	require.Equal(t, 3, attempts)
	require.ErrorIs(t, Classify("op", err), ErrAbortable)

	attempts = 0
	_, err = Retry(context.Background(), func(context.Context) (int, error) {
		attempts++
		return 0, permanent(kerr.ProducerFenced)
	})
	require.Equal(t, 1, attempts, "permanent errors stop the loop")
	require.ErrorIs(t, err, kerr.ProducerFenced)
}
