package misuse_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/producer"
)

// F1: CommitTransaction and AbortTransaction after Close, given a context
// that has already ended, return ErrClosed every time ("Every call after
// it returns ErrClosed"). They used to return ErrAbortable ("context
// canceled") about one time in three: the transaction manager selected
// among the free semaphore, the ended context and the closed operations
// context, and Go picks among ready cases at random.
func TestCallsAfterCloseWithEndedContextAreClosed(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	p := e.Producer(ctx, t, "closed")
	require.NoError(t, p.Close(ctx))
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for i := range 30 {
		requireClass(t, kshare.ErrClosed, p.CommitTransaction(ended), "CommitTransaction #%d after Close, ctx ended", i)
		requireClass(t, kshare.ErrClosed, p.AbortTransaction(ended), "AbortTransaction #%d after Close, ctx ended", i)
	}
}

// F7: every call after Close returns ErrClosed, its arguments
// notwithstanding (docs/api.md: "Every call after it returns ErrClosed").
// Producer.Flush after Close used to return nil, and the acknowledger
// checked its arguments before checking that it was closed
// (CommitAcknowledgements(nil acks) and Stage with invalid
// acknowledgements returned ErrUsage).
func TestEveryCallAfterCloseIsClosed(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	p := e.Producer(ctx, t, "closed")
	require.NoError(t, p.Close(ctx))
	checkClass(t, kshare.ErrClosed, p.Flush(ctx), "Producer.Flush after Close")

	a := e.Acknowledger(ctx, t, "closed-ack")
	require.NoError(t, a.Close(ctx))
	checkClass(t, kshare.ErrClosed, a.CommitAcknowledgements(ctx, nil, kshare.ShareGroupMetadata{}),
		"Acknowledger.CommitAcknowledgements(nil) after Close")
	checkClass(t, kshare.ErrClosed, a.Stage(1, new(kshare.ShareAcks), kshare.ShareGroupMetadata{}),
		"Acknowledger.Stage after Close")
}

// F2 (hang): Close ends the wait of a Produce that is still looking up
// the metadata of a topic that does not exist: the record is refused
// (ErrClosed) before Close returns, and Close returns nil, since nothing
// of the transaction reached a broker. Close used to wait for that
// Produce until its own context ended, then report ErrAbortable ("the
// transaction is left to the coordinator"), and the Produce outlived
// Close, its promise firing when the transaction timeout ended.
func TestCloseDoesNotWaitForProduceBlockedOnMetadata(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	asked := make(chan struct{})
	var once sync.Once
	stop := e.C.ObserveRequests(func(_ int32, req kmsg.Request) {
		if m, ok := req.(*kmsg.MetadataRequest); ok {
			for _, rt := range m.Topics {
				if rt.Topic != nil && *rt.Topic == "missing" {
					once.Do(func() { close(asked) })
				}
			}
		}
	})
	defer stop()
	// A short transaction timeout bounds the Produce below, so that the
	// test does not leak it whatever Close does.
	p := e.Producer(ctx, t, "missing-topic", producer.TransactionTimeout(8*time.Second))
	require.NoError(t, p.BeginTransaction())
	promised := make(chan error, 1)
	go p.Produce(context.Background(), &kgo.Record{Topic: "missing", Value: []byte("x")},
		func(_ *kgo.Record, err error) { promised <- err })
	<-asked

	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := p.Close(cctx)
	cancel()
	var early error
	select {
	case early = <-promised:
	default:
	}
	late := early
	if early == nil {
		late = <-promised // let the Produce end before the test does
	}
	require.NoError(t, err, "Close: nothing of the transaction reached a broker, so nothing is left open")
	require.Error(t, early, "the record's promise must have heard its fate when Close returned (it got %v later)", late)
}

// F10: an acknowledger commit that a concurrent Close left in doubt
// returns ErrInDoubt (or nil had it learned that the commit was applied),
// never ErrClosed ("the call came after Close began. Nothing changed."):
// here CommitCheckpoint's EndTxn(COMMIT) is held at the broker, Close
// (500ms) cuts the commit short and says ErrInDoubt, and the held EndTxn
// is then applied. The commit's error used to take the class of its
// failed abort (ErrClosed).
func TestAcknowledgerCommitLeftInDoubtByCloseIsNotClosed(t *testing.T) {
	ctx := testCtx(t)
	f := newCheckpointFixture(ctx, t)
	held, release := f.e.HoldCommits(t)
	res := make(chan error, 1)
	go func() { res <- f.a.CommitCheckpoint(ctx, 1) }()
	<-held
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	cerr := f.a.Close(cctx)
	cancel()
	requireClass(t, kshare.ErrInDoubt, cerr, "Close with the commit's answer outstanding")
	release()
	err := <-res

	// The held EndTxn(COMMIT) was applied once released.
	for f.e.startOffset(ctx, t, "g", "in") != 2 {
		require.NoError(t, ctx.Err(), "the commit was not applied: the test's premise failed")
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		require.False(t, errors.Is(err, kshare.ErrClosed), "CommitCheckpoint says nothing changed, but it committed: %v", err)
		requireClass(t, kshare.ErrInDoubt, err, "CommitCheckpoint left in doubt by Close")
	}
}
