package acknowledger_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/wire"
)

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// CommitAcknowledgements commits a consumer's acknowledgements in one
// transaction: accepted and rejected records are done, released ones come
// back, and the consumer forgets what committed.
func TestCommitAcknowledgements(t *testing.T) {
	const partitions, inputs = 3, 30
	e := newEnv(t, partitions, inputs, broker.Nodes(3))
	c := e.consumer()
	a := e.acknowledger("ack")

	recs := e.poll(c, inputs)
	var acks *kshare.ShareAcks
	var released []*kgo.Record
	for _, r := range recs {
		i, _ := strconv.Atoi(string(r.Value))
		typ := kshare.AckAccept
		switch i % 5 {
		case 1:
			typ = kshare.AckRelease
			released = append(released, r)
		case 2:
			typ = kshare.AckReject
		}
		acks = acks.Merge(c.Acks([]*kgo.Record{r}, typ))
	}
	require.NoError(t, a.CommitAcknowledgements(e.ctx, acks, c.GroupMetadata()))
	for _, r := range recs {
		_, held := c.DeliveryCount(r)
		require.False(t, held, "record %q still tracked after commit", r.Value)
	}

	again := e.poll(c, len(released))
	for _, r := range again {
		i, _ := strconv.Atoi(string(r.Value))
		require.Equal(t, 1, i%5, "record %q came back but was not released", r.Value)
		n, _ := c.DeliveryCount(r)
		require.EqualValues(t, 2, n)
	}
	require.NoError(t, a.CommitAcknowledgements(e.ctx, c.Acks(again, kshare.AckAccept), c.GroupMetadata()))
	e.allDone(partitions, inputs/partitions)
	e.expectNothing(c, 300*time.Millisecond)
	require.EqualValues(t, 2, a.Metrics().TransactionsCommitted, "two transactions")
}

// A commit that cannot succeed (a lock ran out) fails with ErrAbortable
// wrapping ErrLockExpired and leaves no transaction open: the acknowledger
// goes on, AbortAcknowledgements has nothing to do, and the records come
// back.
func TestCommitAcknowledgementsFailsCleanly(t *testing.T) {
	e := newEnv(t, 1, 4, broker.ShareLockDuration(time.Second))
	c := e.consumer()
	a := e.acknowledger("ack")
	recs := e.poll(c, 4)
	deadline, _ := c.LockDeadline(recs[0])
	time.Sleep(time.Until(deadline) + 50*time.Millisecond)

	err := a.CommitAcknowledgements(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata())
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.ErrorIs(t, err, shareconsumer.ErrLockExpired)
	require.NoError(t, a.AbortAcknowledgements(e.ctx))
	require.Equal(t, "ready", acknowledger.State(a))

	again := e.poll(c, 4)
	require.NoError(t, a.CommitAcknowledgements(e.ctx, c.Acks(again, kshare.AckAccept), c.GroupMetadata()))
	e.allDone(1, 4)
}

// When the abort that follows a failed commit fails too, the transaction
// stays open and AbortAcknowledgements ends it. Here the caller's context
// ends while the acknowledgements are being staged at the leader (the
// records go TX_PENDING there), so neither the commit nor the automatic
// abort can finish; AbortAcknowledgements aborts, and the records come
// back at once (the lock is 10 minutes).
func TestAbortAcknowledgementsEndsALeftoverTransaction(t *testing.T) {
	const inputs = 4
	e := newEnv(t, 1, inputs, broker.ShareLockDuration(10*time.Minute))
	c := e.consumer()
	a := e.acknowledger("ack")
	recs := e.poll(c, inputs)

	ctx, cancel := context.WithCancel(e.ctx)
	stop := e.c.ObserveRequests(func(_ int32, req kmsg.Request) {
		if req.Key() == wire.TxnShareAcknowledgeKey {
			cancel() // the request is handled; its answer is not awaited
		}
	})
	err := a.CommitAcknowledgements(ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata())
	stop()
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.Equal(t, "abortable error", acknowledger.State(a), "the abort could not finish")

	require.NoError(t, a.AbortAcknowledgements(e.ctx))
	require.Equal(t, "ready", acknowledger.State(a))
	again := e.poll(c, inputs)
	require.Equal(t, []int16{2, 2, 2, 2}, deliveries(c, again))
	require.NoError(t, a.CommitAcknowledgements(e.ctx, c.Acks(again, kshare.AckAccept), c.GroupMetadata()))
	e.allDone(1, inputs)
}

// Checkpoints staged for several lock durations commit without any
// redelivery: the consumer renews the staged locks. Committing checkpoint 1
// leaves checkpoint 2 staged.
func TestCheckpointsOutlastTheLock(t *testing.T) {
	const inputs = 8
	e := newEnv(t, 1, inputs, broker.ShareLockDuration(2*time.Second))
	c := e.consumer(shareconsumer.MaxPollRecords(4))
	other := e.consumer()
	a := e.acknowledger("ack")

	recs := e.poll(c, inputs)
	first, second := recs[:inputs/2], recs[inputs/2:]
	require.NoError(t, a.Stage(1, c.Acks(first, kshare.AckAccept), c.GroupMetadata()))
	require.NoError(t, a.Stage(2, c.Acks(second, kshare.AckAccept), c.GroupMetadata()))
	require.Equal(t, []int64{1, 2}, a.Staged())

	// Several lock durations; the other member polls all along.
	e.expectNothing(other, 5*time.Second)
	require.NoError(t, a.CommitCheckpoint(e.ctx, 1))
	require.Equal(t, []int64{2}, a.Staged())
	e.allDone(1, int64(len(first)))
	e.expectNothing(other, 3*time.Second)
	require.NoError(t, a.CommitCheckpoint(e.ctx, 2))
	require.Empty(t, a.Staged())
	e.allDone(1, inputs)
	e.expectNothing(c, 300*time.Millisecond)

	err := a.Stage(2, c.Acks(recs[:1], kshare.AckAccept), c.GroupMetadata())
	require.ErrorIs(t, err, kshare.ErrUsage, "checkpoint 2 is already committed")
}

// An aborted checkpoint's records come back at once (the lock is 10
// minutes): the consumer releases them, and no transaction is run.
func TestAbortCheckpointRedeliversAtOnce(t *testing.T) {
	const inputs = 6
	e := newEnv(t, 2, inputs, broker.ShareLockDuration(10*time.Minute))
	c := e.consumer()
	a := e.acknowledger("ack")
	recs := e.poll(c, inputs)
	require.NoError(t, a.Stage(7, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()))
	log := bundled.ObserveRequests(t, e.c)
	require.NoError(t, a.AbortCheckpoint(7))
	require.Empty(t, a.Staged())

	again := e.poll(c, inputs)
	require.Equal(t, []int16{2, 2, 2, 2, 2, 2}, deliveries(c, again))
	require.Empty(t, log.Of(kmsg.EndTxn.Int16(), wire.TxnShareAcknowledgeKey), "no transaction")
	require.NotEmpty(t, log.Of(kmsg.ShareAcknowledge.Int16(), kmsg.ShareFetch.Int16()), "the consumer released them")
	require.NoError(t, a.Stage(8, c.Acks(again, kshare.AckAccept), c.GroupMetadata()))
	require.NoError(t, a.CommitCheckpoint(e.ctx, 8))
	e.allDone(2, inputs/2)
}

// A checkpoint whose commit fails (here the partition's leader moved, so
// the member's locks are gone) is dropped, and its records are delivered
// again; the next checkpoint commits them.
func TestFailedCheckpointRedelivers(t *testing.T) {
	const inputs = 5
	e := newEnv(t, 1, inputs, broker.Nodes(3), broker.ShareLockDuration(10*time.Minute))
	c := e.consumer()
	a := e.acknowledger("ack")
	recs := e.poll(c, inputs)
	require.NoError(t, a.Stage(1, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()))

	leader, err := e.c.Leader(topic, 0)
	require.NoError(t, err)
	require.NoError(t, e.c.MoveLeader(topic, 0, (leader+1)%3))
	err = a.CommitCheckpoint(e.ctx, 1)
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.Empty(t, a.Staged(), "a failed checkpoint is dropped")

	again := e.poll(c, inputs)
	require.NoError(t, a.Stage(2, c.Acks(again, kshare.AckAccept), c.GroupMetadata()))
	require.NoError(t, a.CommitCheckpoint(e.ctx, 2))
	e.allDone(1, inputs)
}

// Closing the acknowledger drops its staged checkpoints; their records come
// back to the group.
func TestCloseDropsStagedCheckpoints(t *testing.T) {
	e := newEnv(t, 1, 3, broker.ShareLockDuration(10*time.Minute))
	c := e.consumer()
	a := e.acknowledger("ack")
	recs := e.poll(c, 3)
	require.NoError(t, a.Stage(1, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()))
	require.NoError(t, a.Close(e.ctx))
	require.ErrorIs(t, a.CommitCheckpoint(e.ctx, 1), kshare.ErrClosed)
	again := e.poll(c, 3)
	require.Equal(t, []int16{2, 2, 2}, deliveries(c, again))
}

// Invalid calls fail with ErrUsage and change nothing.
func TestUsageErrors(t *testing.T) {
	_, err := acknowledger.New(acknowledger.TransactionalID("no-brokers"))
	require.ErrorIs(t, err, kshare.ErrUsage)
	_, err = acknowledger.New(nil)
	require.ErrorIs(t, err, kshare.ErrUsage)

	e := newEnv(t, 1, 1)
	c := e.consumer()
	a := e.acknowledger("ack")
	recs := e.poll(c, 1)
	meta := c.GroupMetadata()
	require.ErrorIs(t, a.CommitAcknowledgements(e.ctx, nil, meta), kshare.ErrUsage)
	require.ErrorIs(t, a.Stage(1, nil, meta), kshare.ErrUsage)
	require.ErrorIs(t, a.Stage(1, c.Acks(recs, kshare.AckType(4)), meta), kshare.ErrUsage)
	require.ErrorIs(t, a.Stage(1, c.Acks(recs, kshare.AckAccept), kshare.ShareGroupMetadata{}), kshare.ErrUsage)
	require.NoError(t, a.CommitAcknowledgements(e.ctx, new(kshare.ShareAcks), meta), "nothing to commit")
	require.NoError(t, a.AbortAcknowledgements(e.ctx), "nothing to abort")
	require.NoError(t, a.CommitCheckpoint(e.ctx, 3), "empty checkpoint")
	require.ErrorIs(t, a.Stage(3, c.Acks(recs, kshare.AckAccept), meta), kshare.ErrUsage)
	require.NoError(t, a.AbortCheckpoint(9), "nothing staged")
	require.NoError(t, a.Close(context.Background()))
	require.NoError(t, a.Close(context.Background()), "second Close")
}
