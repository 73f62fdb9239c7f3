package producer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/txn"
)

// waitingInTransaction starts a cluster and a producer txnID whose
// transaction times out far away, begins a transaction, and has a Produce
// wait for the metadata of topic "missing" (see waitingProduce).
func waitingInTransaction(t *testing.T, txnID string) (*broker.Cluster, *Producer, <-chan error) {
	t.Helper()
	c := newCluster(t)
	createTopic(t, c, "out", 1)
	p := newProducer(t, c, txnID, TransactionTimeout(10*time.Minute))
	require.NoError(t, p.BeginTransaction())
	return c, p, waitingProduce(t, p, "missing")
}

// waitingProduce starts a Produce (with a context that never ends) of a
// record to topic, which does not exist, and returns once the call is
// waiting for the topic's metadata; the channel hears its promise.
func waitingProduce(t *testing.T, p *Producer, topic string) <-chan error {
	t.Helper()
	promised := make(chan error, 1)
	go p.Produce(context.Background(), &kgo.Record{Topic: topic, Value: []byte("x")},
		func(_ *kgo.Record, err error) { promised <- err })
	for {
		p.topicsMu.RLock()
		_, loading := p.loading[topic]
		p.topicsMu.RUnlock()
		if loading {
			return promised
		}
		require.NoError(t, testCtx(t).Err())
		time.Sleep(5 * time.Millisecond)
	}
}

// AbortTransaction ends the wait of a Produce still looking for the
// metadata of a topic that does not exist: the record fails with
// ErrAbortable and the abort does not wait for the Produce's context or
// the transaction timeout, which are both far away.
func TestAbortEndsProduceWaitingForMetadata(t *testing.T) {
	c, p, promised := waitingInTransaction(t, "abort-waiting")

	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
	defer cancel()
	require.NoError(t, p.AbortTransaction(ctx), "the abort does not wait for the record")
	select {
	case err := <-promised:
		require.ErrorIs(t, err, kshare.ErrAbortable)
		require.ErrorContains(t, err, "transaction aborted before the record was sent")
	default:
		t.Fatal("AbortTransaction returned before the waiting record heard its fate")
	}
	require.Equal(t, txn.StateReady, p.txn.State())

	// The producer goes on: the next transaction is not touched.
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.ProduceSync(testCtx(t), &kgo.Record{Topic: "out", Value: []byte("next")}).FirstErr())
	require.NoError(t, p.CommitTransaction(testCtx(t)))
	require.Len(t, readCommitted(t, c, "out", 1), 1)
}

// A topic that does not exist holds up only its own records: loads of the
// metadata of other topics do not wait for it.
func TestMissingTopicDoesNotHoldUpOthers(t *testing.T) {
	_, p, promised := waitingInTransaction(t, "missing-and-present")

	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
	defer cancel()
	require.NoError(t, p.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: []byte("present")}).FirstErr(),
		"a record of an existing topic is written while another waits for a missing one")
	require.NoError(t, p.AbortTransaction(ctx))
	require.ErrorIs(t, <-promised, kshare.ErrAbortable)
}

// A Produce waiting for another Produce's load of the same topic gives up
// with its own context, and the load goes on for the other.
func TestProduceWaitingForAnotherLoadHonoursItsContext(t *testing.T) {
	_, p, first := waitingInTransaction(t, "second-waiter")

	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	err := p.ProduceSync(ctx, &kgo.Record{Topic: "missing", Value: []byte("y")}).FirstErr()
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	select {
	case err := <-first:
		t.Fatalf("the first Produce ended with the second's context: %v", err)
	default:
	}
	require.NoError(t, p.AbortTransaction(testCtx(t)))
	require.ErrorIs(t, <-first, kshare.ErrAbortable)
}

// The waits of one transaction are abandoned once, never those of the
// next: a Produce of transaction 2 waits although transaction 1 was
// abandoned, and a context asked for an abandoned transaction has ended.
func TestWaitsAbandonOnlyTheirTransaction(t *testing.T) {
	var w waits
	one := w.of(1)
	require.NoError(t, one.Err())
	w.abandon(1)
	require.Error(t, one.Err(), "transaction 1 abandoned")
	require.Error(t, w.of(1).Err(), "asked again after it was abandoned")
	two := w.of(2)
	require.NoError(t, two.Err(), "transaction 2 is not abandoned")
	require.Same(t, two, w.of(2), "one context per transaction")
	w.abandon(1)
	require.NoError(t, two.Err(), "abandoning 1 again leaves 2 alone")
	w.abandon(^uint64(0))
	require.Error(t, two.Err(), "Close abandons every transaction")
	require.Error(t, w.of(3).Err())
}
