package lifecycle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
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
// Regression test (lifecycle review, high: exactly-once under the documented recovery).
// What happens: CommitCheckpoint returns ErrAbortable ("waiting for the
// transaction call in progress: context deadline exceeded"), Staged still
// lists checkpoint 1, the consumer keeps renewing its record, and the next
// CommitCheckpoint(2) commits checkpoint 1's acknowledgement. An
// application that did what the doc says (redo the work "from the
// redelivered records", e.g. restore the previous checkpoint's state)
// loses that record's effect: its input is acknowledged while the work it
// fed was dropped.
// Cause: CommitCheckpoint returns enter's error (acknowledger.go, enter:
// select on txnSem or ctx.Done) before take(), so nothing is dropped.
// Fix: when enter fails with ErrAbortable, take and drop the checkpoints up
// to checkpointID (as a failed commit does), unless a CommitCheckpoint in
// progress is committing them (then ErrUsage-like, as AbortCheckpoint);
// or document that a CommitCheckpoint that failed before starting keeps
// its checkpoint, with an error class that says so.
func TestCheckpointCommitWhoseContextEndsWhileWaiting(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.ShareLockDuration(time.Second))
	e.Topic(ctx, t, "in", 1)
	e.Input(ctx, t, "in", "a", "b")
	cons := e.consumer(t, "g", "in")
	recs := appenv.PollN(ctx, t, cons, 2)
	a, err := acknowledger.New(acknowledger.SeedBrokers(e.Seeds...), acknowledger.TransactionalID("ack"),
		acknowledger.KgoOpts(kgo.ClientID("lc-ack")))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	require.NoError(t, a.InitTransactions(ctx))
	require.NoError(t, a.Stage(1, cons.Acks(recs[1:], kshare.AckAccept), cons.GroupMetadata()))

	held := make(chan struct{})
	release := make(chan struct{})
	var once atomic.Bool
	stop := e.C.InjectFaults(func(_ int32, client string, req kmsg.Request) broker.FaultAction {
		if client == "lc-ack" && req.Key() == kmsg.EndTxn.Int16() && once.CompareAndSwap(false, true) {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return broker.FaultAction{}
	})
	defer stop()
	first := make(chan error, 1)
	go func() {
		first <- a.CommitAcknowledgements(ctx, cons.Acks(recs[:1], kshare.AckAccept), cons.GroupMetadata())
	}()
	<-held
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = a.CommitCheckpoint(cctx, 1)
	cancel()
	t.Logf("checkpoint commit that waited: %v; staged now %v", err, a.Staged())
	close(release)
	require.NoError(t, <-first, "the first commit")
	require.ErrorIs(t, err, kshare.ErrAbortable)
	assert.Empty(t, a.Staged(), "a failed checkpoint is dropped")

	other := e.consumer(t, "g", "in")
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	got := 0
	for got == 0 {
		rs, err := other.Poll(pctx)
		if err != nil {
			break
		}
		got += len(rs)
	}
	assert.Equal(t, 1, got, "the failed checkpoint's record did not come back to the group")

	// The application, told that checkpoint 1 failed, redoes its work
	// from the redelivered records (none came) and commits its next
	// checkpoint with nothing staged. That must not acknowledge checkpoint
	// 1's record: the application dropped the work that record fed.
	require.NoError(t, a.CommitCheckpoint(ctx, 2))
	require.NoError(t, cons.Close(ctx))
	if got == 0 {
		fresh := e.consumer(t, "g", "in")
		fctx, fcancel := context.WithTimeout(ctx, 3*time.Second)
		defer fcancel()
		for got == 0 {
			rs, err := fresh.Poll(fctx)
			if err != nil {
				break
			}
			got += len(rs)
		}
		assert.Equal(t, 1, got, "checkpoint 1 failed (ErrAbortable), yet checkpoint 2's commit acknowledged its record: an input acknowledged whose work the application dropped")
	}
}

// TestCheckpointCommitWithEndedContextIsDroppedEveryTime calls
// CommitCheckpoint with a context that has already ended, no other call
// in progress, twenty times (each on a fresh checkpoint). Every call fails
// (ErrAbortable), so by the package doc every one of them drops its
// checkpoint. The acknowledger's enter selects between taking the
// transaction slot and ctx.Done, both ready, so Go picks one at random:
// about half of the calls return before taking the checkpoint and leave it
// staged. The chance that twenty calls all drop with the bug present is
// 2^-20.
//
// Regression test (lifecycle review, same root cause as above; nondeterministic behaviour).
// Fix: check ctx.Err() before the select (or prefer the slot), and drop the
// checkpoint whenever CommitCheckpoint fails before starting.
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
	a, err := acknowledger.New(acknowledger.SeedBrokers(e.Seeds...), acknowledger.TransactionalID("ack"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	require.NoError(t, a.InitTransactions(ctx))
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
