package errs

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare"
)

// typed stands for a package's error type with data (shareconsumer's
// *AckError, say): reclassifying an error must keep it reachable.
type typed struct{ n int }

func (t *typed) Error() string { return fmt.Sprintf("typed %d", t.n) }

func TestNewKeepsOneClass(t *testing.T) {
	inner := Abortable("produce", fmt.Errorf("at node 1: %w", kerr.MessageTooLarge))
	require.Equal(t, []error{kshare.ErrAbortable}, ClassesOf(inner))

	// The same class: the chain keeps it once.
	same := New(kshare.ErrAbortable, "commit", fmt.Errorf("flush: %w", inner))
	require.Equal(t, []error{kshare.ErrAbortable}, ClassesOf(same))

	// Another class: the inner one goes, the message and causes stay.
	other := Fatal("commit", fmt.Errorf("flush: %w; then: %w", inner, &typed{7}))
	require.Equal(t, []error{kshare.ErrFatal}, ClassesOf(other))
	require.ErrorIs(t, other, kerr.MessageTooLarge)
	var ke *kerr.Error
	require.ErrorAs(t, other, &ke)
	require.Equal(t, kerr.MessageTooLarge, ke)
	var ty *typed
	require.ErrorAs(t, other, &ty)
	require.Equal(t, 7, ty.n)
	require.Equal(t, "kshare: commit: fatal error: flush: kshare: produce: abortable error: at node 1: "+kerr.MessageTooLarge.Error()+"; then: typed 7", other.Error())
	var e *Error
	require.ErrorAs(t, other, &e)
	require.Same(t, other, e, "errors.As finds the outer classified error, not a declassified one")

	// A sentinel of another class stays reachable as itself.
	lock := Sentinel(kshare.ErrAbortable, "lock expired")
	usage := Usage("stage", fmt.Errorf("record 3: %w", lock))
	require.Equal(t, []error{kshare.ErrUsage}, ClassesOf(usage))
	require.ErrorIs(t, usage, lock)

	// Joined causes of several classes.
	joined := New(kshare.ErrInDoubt, "commit", errors.Join(Abortable("a", nil), Fatal("b", context.Canceled), Usage("c", nil)))
	require.Equal(t, []error{kshare.ErrInDoubt}, ClassesOf(joined))
	require.ErrorIs(t, joined, context.Canceled)
}

func TestSentinelsAndClasses(t *testing.T) {
	s := Sentinel(kshare.ErrUsage, "not held")
	require.Equal(t, "not held", s.Error())
	require.Equal(t, []error{kshare.ErrUsage}, ClassesOf(s))
	require.Equal(t, kshare.ErrUsage, ClassOf(fmt.Errorf("x: %w", s)))
	require.Nil(t, ClassOf(errors.New("plain")))
	require.False(t, Is(context.Canceled))
	for _, c := range Classes {
		require.Equal(t, []error{c}, ClassesOf(c), "the classes are disjoint")
	}
	require.Panics(t, func() { New(errors.New("no class"), "op", nil) })
	require.Panics(t, func() { Sentinel(context.Canceled, "x") })
	require.Equal(t, "kshare: close: client closed", Closed("close", nil).Error())
	require.Equal(t, context.Canceled, Cause(Abortable("poll", context.Canceled)))
	require.Equal(t, context.Canceled, Cause(context.Canceled))
}
