package misuse_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// F3 (hang): a Poll that starts while another Poll runs returns when its
// own context ends (Poll waits "until records are available, ctx ends or
// the consumer closes"; only one Poll runs at a time). It used to wait on
// a mutex before looking at ctx, so it returned only when the other Poll
// did.
func TestPollHonoursItsContextWhileAnotherPollRuns(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	e.Topic(ctx, t, "in", 1) // stays empty: every Poll waits
	c := e.consumer(t, "g", "in", shareconsumer.Transactional)

	cancelable, stopFirst := context.WithCancel(ctx)
	firstCtx := &doneWatcher{Context: cancelable, twice: make(chan struct{})}
	first := make(chan error, 1)
	go func() {
		_, err := c.Poll(firstCtx)
		first <- err
	}()
	// The first Poll asks for its context's Done channel when it waits for
	// its turn and again when it waits for records: from the second time
	// on it holds the turn. (A sleep here would only make that likely.)
	select {
	case <-firstCtx.twice:
	case <-time.After(10 * time.Second):
		stopFirst()
		<-first
		t.Fatal("the first Poll never started waiting for records")
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() {
		_, err := c.Poll(short)
		second <- err
	}()
	select {
	case err := <-second:
		requireClass(t, kshare.ErrAbortable, err, "second Poll")
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		stopFirst()
		<-first
		<-second
		t.Fatal("the second Poll did not return when its context ended; it returned only after the first Poll did")
	}
	stopFirst()
	<-first
}

// doneWatcher is a context whose channel twice closes when its Done
// method is called for the second time.
type doneWatcher struct {
	context.Context
	calls atomic.Int32
	twice chan struct{}
}

func (w *doneWatcher) Done() <-chan struct{} {
	if w.calls.Add(1) == 2 {
		close(w.twice)
	}
	return w.Context.Done()
}

// F9 (diagnosability): against seed brokers that refuse every
// connection, InitTransactions (bounded by the transaction timeout) and a
// Poll whose context ends both name the connection error, reachable with
// errors.Is, every time. InitTransactions used to return "find
// transaction coordinator ...: context deadline exceeded", with the cause
// only when kgo's own retries happened to end first, and Poll the
// context's error only. (A Poll whose context never ends is told once,
// after 5s: shareconsumer's TestPollReportsAClusterNeverReached.)
func TestUnreachableSeedsSayWhy(t *testing.T) {
	addr := testkit.RefusedAddr(t)
	p, err := producer.New(producer.SeedBrokers(addr), producer.TransactionalID("x"), producer.TransactionTimeout(2*time.Second))
	require.NoError(t, err)
	err = p.InitTransactions(context.Background())
	requireClass(t, kshare.ErrAbortable, err, "InitTransactions against a refused seed")
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "refused"),
		"InitTransactions does not say that the connections were refused: %v", err)
	require.NoError(t, p.Close(context.Background()))

	c, err := shareconsumer.New(shareconsumer.SeedBrokers(addr), shareconsumer.Group("g"), shareconsumer.Topics("t"))
	require.NoError(t, err)
	pctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = c.Poll(pctx)
	cancel()
	requireClass(t, kshare.ErrAbortable, err, "Poll against a refused seed")
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "refused"),
		"Poll does not say that the connections were refused: %v", err)
	require.NoError(t, c.Close(context.Background()))
}

// F16 (liveness): records whose acknowledgements were staged in a
// transaction that can no longer commit (its timeout passed) come back to
// the group although the application stalls and never ends the
// transaction: at the transaction's deadline the consumer stops renewing
// their locks and releases them, as after an abort. It used to renew them
// until the transaction was resolved, so no other member got them, lock
// after lock.
func TestStagedRecordsComeBackAfterTheTransactionTimeout(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.ShareLockDuration(time.Second))
	e.Topic(ctx, t, "in", 1)
	e.Input(ctx, t, "in", "a", "b")
	c := e.consumer(t, "g", "in", shareconsumer.Transactional)
	recs := appenv.PollN(ctx, t, c, 2)
	p := e.Producer(ctx, t, "slow", producer.TransactionTimeout(2*time.Second))
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendShareAcksToTransaction(ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()))

	// The application stalls; another member polls until it has had both
	// records. They come back at the transaction timeout (2s); the bound
	// (20s, ten transaction timeouts) only turns the renewal forever it
	// replaces into a failure, and keeps a loaded machine from failing the
	// test. (It does not acknowledge them, so it may get them more than
	// once.)
	other := e.consumer(t, "g", "in", shareconsumer.Transactional)
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	seen := map[int64]bool{}
	for len(seen) < 2 {
		recs, err := other.Poll(pctx)
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			t.Fatalf("records of a transaction past its timeout are still locked by the stalled member: the other member had offsets %v", seen)
		}
		for _, r := range recs {
			seen[r.Offset] = true
		}
	}

	// The stalled application finds its transaction over.
	requireClass(t, kshare.ErrAbortable, p.CommitTransaction(ctx), "a commit past the transaction timeout")
	require.NoError(t, p.AbortTransaction(ctx))
}
