package eos

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRunScopeMaxDurationCancels: MaxDuration ends the run by
// cancellation, not by a deadline. kgo logs a dial that a deadline cut
// short at WARN ("unable to open connection to broker ... i/o timeout")
// and says nothing of one that a cancellation cut short, and a run that
// -max-duration stops is an expected end: WARN is for the unexpected.
func TestRunScopeMaxDurationCancels(t *testing.T) {
	s := newRunScope(context.Background(), time.Millisecond)
	_, hasDeadline := s.ctx.Deadline()
	require.False(t, hasDeadline, "a deadline on the run's context reaches every dial")
	<-s.ctx.Done() // the hang guard is the test's timeout
	require.ErrorIs(t, s.run.Err(), context.Canceled)
	require.ErrorIs(t, s.ctx.Err(), context.Canceled)
	require.EqualError(t, context.Cause(s.run), "max duration 1ms")
	_, stoppedBy, err := s.end(s.ctx.Err())
	require.NoError(t, err)
	require.Equal(t, "max duration 1ms", stoppedBy)
}

// TestRunScopeStoppedInSetup: a setup cut short by the caller's context
// or by MaxDuration is an incomplete run with nothing processed, which
// still reports; a setup that failed on its own is the run's error.
func TestRunScopeStoppedInSetup(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	s := newRunScope(parent, time.Hour)
	cancel(errors.New("Ctrl-C (SIGINT)"))
	r, stopped := s.stoppedInSetup(500, errors.Join(errors.New("input producer"), context.Canceled))
	require.True(t, stopped)
	require.Equal(t, VerdictIncomplete, r.Verdict)
	require.Equal(t, ExitIncomplete, r.ExitCode())
	require.Equal(t, 500, r.Inputs)
	require.Zero(t, r.Processed)
	require.Contains(t, r.Line(), "exactly-once: INCOMPLETE (stopped by Ctrl-C (SIGINT) while setting up after ")
	require.Contains(t, r.Line(), "0 of 500 inputs processed")

	s = newRunScope(context.Background(), time.Millisecond)
	<-s.run.Done()
	r, stopped = s.stoppedInSetup(7, context.Canceled)
	require.True(t, stopped)
	require.Contains(t, r.Line(), "stopped by max duration 1ms while setting up")

	// Not stopped: the setup's own failure is the error.
	s = newRunScope(context.Background(), time.Hour)
	_, stopped = s.stoppedInSetup(7, errors.New("create topic: TOPIC_AUTHORIZATION_FAILED"))
	require.False(t, stopped)
	require.ErrorIs(t, s.run.Err(), context.Canceled, "the scope is released either way")
	// Stopped, but the setup failed for another reason.
	parent, cancel = context.WithCancelCause(context.Background())
	s = newRunScope(parent, time.Hour)
	cancel(nil)
	_, stopped = s.stoppedInSetup(7, errors.New("group configs: INVALID_CONFIG"))
	require.False(t, stopped)
}
