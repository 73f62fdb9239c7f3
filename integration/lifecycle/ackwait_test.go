package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
	"github.com/kshare-go/kshare/shareconsumer"
)

// TestCommitAcknowledgementsWhoseContextEndsWhileWaiting lets a
// CommitAcknowledgements wait for another one in progress (its EndTxn held
// at the broker) until its context ends. It fails with ErrAbortable, and
// the doc of CommitAcknowledgements says: "When it fails, it aborts the
// transaction before returning, so the acknowledgements take effect
// nowhere: ... the consumer releases the others at once." So another
// member gets the record within a few lock durations.
//
// Regression test (lifecycle review, low: liveness, no exactly-once
// violation). CommitAcknowledgements used to return enter's ErrAbortable
// before staging anything, so the consumer was never told and, with
// RenewHeldLocks(true) (the Benthos input's setting), renewed the record
// until it closed.
func TestCommitAcknowledgementsWhoseContextEndsWhileWaiting(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.ShareLockDuration(time.Second))
	e.Topic(ctx, t, "in", 1)
	e.Input(ctx, t, "in", "a", "b")
	cons := e.consumer(t, "g", "in", shareconsumer.RenewHeldLocks(true))
	recs := appenv.PollN(ctx, t, cons, 2)
	a := e.Acknowledger(ctx, t, "ack")

	held, release := e.HoldCommits(t)
	first := make(chan error, 1)
	go func() {
		first <- a.CommitAcknowledgements(ctx, cons.Acks(recs[:1], kshare.AckAccept), cons.GroupMetadata())
	}()
	<-held
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := a.CommitAcknowledgements(cctx, cons.Acks(recs[1:], kshare.AckAccept), cons.GroupMetadata())
	cancel()
	release()
	require.NoError(t, <-first, "the first commit")
	require.ErrorIs(t, err, kshare.ErrAbortable)

	other := e.consumer(t, "g", "in", shareconsumer.KgoOpts(kgo.ClientID("lc-other")))
	got := appenv.PollSome(ctx, other, 5*time.Second) // five lock durations
	require.Equal(t, 1, got, "the failed commit's record was not released: its holder renews it until Close")
}
