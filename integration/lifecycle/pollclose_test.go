package lifecycle_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
	"github.com/kshare-go/kshare/shareconsumer"
)

// TestPollsBlockedWhileConsumerCloses blocks two Polls on an empty topic
// (the second waits for the first), then closes the consumer from a third
// goroutine. Both Polls must return ErrClosed without their contexts
// ending, and staging the acknowledgements of records polled earlier must
// fail with ErrClosed afterwards (the consumer's Close doc: every call,
// staging too).
func TestPollsBlockedWhileConsumerCloses(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	e.Topic(ctx, t, "in", 1)
	e.Input(ctx, t, "in", "a")
	cons := e.consumer(t, "g", "in")
	prod := e.producer(ctx, t, "tx")
	recs := appenv.PollN(ctx, t, cons, 1)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := cons.Poll(ctx)
			errs <- err
		}()
	}
	// Let the Polls block (not asserted on: a Poll that starts after Close
	// must fail with ErrClosed as well).
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, cons.Close(ctx))
	for range 2 {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, kshare.ErrClosed)
			require.NoError(t, ctx.Err(), "Poll returned only because its context ended")
		case <-ctx.Done():
			t.Fatal("a Poll is still blocked after Close")
		}
	}
	require.NoError(t, prod.BeginTransaction())
	err := prod.SendShareAcksToTransaction(ctx, cons.Acks(recs, kshare.AckAccept), cons.GroupMetadata())
	t.Logf("staging after consumer Close: %v", err)
	require.ErrorIs(t, err, kshare.ErrClosed)
	err = prod.CommitTransaction(ctx)
	require.Error(t, err, "a transaction whose staging failed must not commit")
	require.NoError(t, prod.AbortTransaction(ctx))
	_ = shareconsumer.Transactional
}
