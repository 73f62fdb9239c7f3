package review_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// Finding (hang): a Poll that starts while another Poll runs ignores its
// own context: it waits on the consumer's poll mutex (sync.Mutex) before
// it looks at ctx, so it returns only when the other Poll does. Poll is
// documented to wait "until records are available, ctx ends or the
// consumer closes", and the Consumer to allow calls from several
// goroutines ("only one Poll runs at a time").
func TestPollHonoursItsContextWhileAnotherPollRuns(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	e.topic(ctx, t, "in", 1) // stays empty: every Poll waits
	c := e.consumer(t, "g", "in", shareconsumer.Transactional)

	firstCtx, stopFirst := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := c.Poll(firstCtx)
		first <- err
	}()
	time.Sleep(300 * time.Millisecond) // the first Poll is waiting for records

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

// refusedAddr returns a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// Finding (minor, diagnosability): against seeds that refuse every
// connection, InitTransactions retries until the transaction timeout (60s
// by default) and then returns "find transaction coordinator ...: context
// deadline exceeded", and Poll returns the context's error only: neither
// says, nor lets errors.Is find, that every connection was refused. The
// error vocabulary promises the cause stays reachable; the retries know
// their last error (the produce path does report "last error: ...").
func TestUnreachableSeedsSayWhy(t *testing.T) {
	addr := refusedAddr(t)
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

// Finding (liveness): records whose acknowledgements were staged in a
// transaction that can no longer commit (its transaction timeout passed)
// stay locked for as long as the application does not call the producer
// again: the consumer renews their locks until the transaction is resolved,
// and nothing resolves a transaction at its deadline. Here the
// acknowledgements never left the client (they are sent at commit), the
// producer's CommitTransaction would refuse the commit, and still no other
// member gets the records, lock after lock. The renewal should stop at the
// transaction deadline (the producer knows it; the tracker could be told
// at Stage), so that the records come back to the group.
func TestStagedRecordsComeBackAfterTheTransactionTimeout(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.ShareLockDuration(time.Second))
	e.topic(ctx, t, "in", 1)
	e.input(ctx, t, "in", "a", "b")
	c := e.consumer(t, "g", "in", shareconsumer.Transactional)
	recs := poll(ctx, t, c, 2)
	p := e.producer(ctx, t, "slow", producer.TransactionTimeout(2*time.Second))
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendShareAcksToTransaction(ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()))

	// The application stalls; another member polls until it has had both
	// records, for up to three lock durations after the transaction
	// timeout. (It does not acknowledge them, so it may get them more
	// than once.)
	other := e.consumer(t, "g", "in", shareconsumer.Transactional)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
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
}
