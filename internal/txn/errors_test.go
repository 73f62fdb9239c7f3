package txn

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
)

func TestClassify(t *testing.T) {
	for _, ke := range []*kerr.Error{kerr.ProducerFenced, kerr.TransactionalIDAuthorizationFailed,
		kerr.InvalidTxnState, kerr.UnsupportedVersion, kerr.InvalidTransactionTimeout} {
		err := Classify("op", fmt.Errorf("at node 1: %w", ke))
		require.Equal(t, []error{kshare.ErrFatal}, errs.ClassesOf(err), "%v", ke)
		var got *kerr.Error
		require.True(t, errors.As(err, &got))
		require.Equal(t, ke, got)
	}
	for _, cause := range []error{kerr.InvalidRecordState, kerr.InvalidProducerEpoch, kerr.MessageTooLarge,
		context.DeadlineExceeded, errors.New("connection reset")} {
		err := Classify("op", cause)
		require.Equal(t, []error{kshare.ErrAbortable}, errs.ClassesOf(err), "%v", cause)
		require.ErrorIs(t, err, cause)
	}
	classified := Classify("first", kerr.MessageTooLarge)
	require.Same(t, classified, Classify("second", classified), "already classified errors pass through")
	require.NoError(t, Classify("op", nil))
	require.Equal(t, "kshare: produce: abortable error: MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept",
		Classify("produce", kerr.MessageTooLarge).Error())
}

// A commit whose outcome cannot be learned is in doubt; if the reason is
// that the producer was fenced, it is fatal instead, and says the outcome
// is unknown.
func TestInDoubtErr(t *testing.T) {
	err := inDoubtErr("commit transaction", context.DeadlineExceeded)
	require.Equal(t, []error{kshare.ErrInDoubt}, errs.ClassesOf(err))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	fenced := inDoubtErr("commit transaction", kerr.ProducerFenced)
	require.Equal(t, []error{kshare.ErrFatal}, errs.ClassesOf(fenced))
	require.Contains(t, fenced.Error(), "outcome is unknown")
	require.ErrorIs(t, fenced, kerr.ProducerFenced)
}
