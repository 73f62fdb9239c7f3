package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
)

// TestCheckpointCommitWhoseContextEndsWhileWaiting lets a CommitCheckpoint
// wait for a CommitAcknowledgements in progress (its EndTxn held at the
// broker) until its own context ends. The package doc: a failed
// checkpoint is dropped (ErrAbortable) and its records come back to the
// group at once. So: the error is ErrAbortable, Staged no longer lists the
// checkpoint, and another member gets the checkpoint's records while the
// first member keeps running; the first commit still commits its own.
//
// Regression test (lifecycle review, high: exactly-once under the
// documented recovery). CommitCheckpoint used to return enter's
// ErrAbortable before taking its checkpoint: Staged still listed it, the
// consumer kept renewing its record, and the next CommitCheckpoint(2)
// committed it, so an application that redid the work "from the
// redelivered records" had that input acknowledged while the work it fed
// was dropped.
func TestCheckpointCommitWhoseContextEndsWhileWaiting(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.ShareLockDuration(time.Second))
	e.Topic(ctx, t, "in", 1)
	e.Input(ctx, t, "in", "a", "b")
	cons := e.consumer(t, "g", "in")
	recs := appenv.PollN(ctx, t, cons, 2)
	a := e.Acknowledger(ctx, t, "ack")
	require.NoError(t, a.Stage(1, cons.Acks(recs[1:], kshare.AckAccept), cons.GroupMetadata()))

	held, release := e.HoldCommits(t)
	first := make(chan error, 1)
	go func() {
		first <- a.CommitAcknowledgements(ctx, cons.Acks(recs[:1], kshare.AckAccept), cons.GroupMetadata())
	}()
	<-held
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := a.CommitCheckpoint(cctx, 1)
	cancel()
	t.Logf("checkpoint commit that waited: %v; staged now %v", err, a.Staged())
	release()
	require.NoError(t, <-first, "the first commit")
	require.ErrorIs(t, err, kshare.ErrAbortable)
	assert.Empty(t, a.Staged(), "a failed checkpoint is dropped")

	other := e.consumer(t, "g", "in")
	got := appenv.PollSome(ctx, other, 5*time.Second)
	assert.Equal(t, 1, got, "the failed checkpoint's record did not come back to the group")

	// The application, told that checkpoint 1 failed, redoes its work
	// from the redelivered records (none came) and commits its next
	// checkpoint with nothing staged. That must not acknowledge checkpoint
	// 1's record: the application dropped the work that record fed.
	require.NoError(t, a.CommitCheckpoint(ctx, 2))
	require.NoError(t, cons.Close(ctx))
	if got == 0 {
		got = appenv.PollSome(ctx, e.consumer(t, "g", "in"), 3*time.Second)
		assert.Equal(t, 1, got, "checkpoint 1 failed (ErrAbortable), yet checkpoint 2's commit acknowledged its record: an input acknowledged whose work the application dropped")
	}
}

// TestCheckpointCommitWithEndedContextIsDroppedEveryTime calls
// CommitCheckpoint with a context that has already ended, no other call
// in progress, twenty times (each on a fresh checkpoint). Every call fails
// (ErrAbortable), so by the package doc every one of them drops its
// checkpoint. The acknowledger's enter used to select between taking the
// transaction slot and ctx.Done, both ready, so Go picked one at random
// and about half of the calls left their checkpoint staged; twenty calls
// all dropping theirs under that bug had a chance of 2^-20.
//
// Regression test (lifecycle review, same root cause as above).
func TestCheckpointCommitWithEndedContextIsDroppedEveryTime(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.ShareLockDuration(30*time.Second))
	e.Topic(ctx, t, "in", 1)
	const n = 20
	var values []string
	for i := range n {
		values = append(values, string(rune('a'+i)))
	}
	e.Input(ctx, t, "in", values...)
	cons := e.consumer(t, "g", "in")
	recs := appenv.PollN(ctx, t, cons, n)
	a := e.Acknowledger(ctx, t, "ack")
	ended, cancel := context.WithCancel(ctx)
	cancel()
	kept := 0
	for i, r := range recs {
		id := int64(i + 1)
		require.NoError(t, a.Stage(id, cons.Acks([]*kgo.Record{r}, kshare.AckAccept), cons.GroupMetadata()))
		err := a.CommitCheckpoint(ended, id)
		require.ErrorIs(t, err, kshare.ErrAbortable, "checkpoint %d", id)
		if len(a.Staged()) > 0 {
			kept++
			require.NoError(t, a.AbortCheckpoint(id)) // keep the next round clean
		}
	}
	require.Zero(t, kept, "%d of %d failed CommitCheckpoint calls left their checkpoint staged", kept, n)
}
