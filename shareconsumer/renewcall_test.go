package shareconsumer_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/shareconsumer"
)

// pollFor polls c for d and returns what arrived.
func pollFor(ctx context.Context, t *testing.T, c *shareconsumer.Consumer, d time.Duration) []*kgo.Record {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var out []*kgo.Record
	for pctx.Err() == nil {
		recs, err := c.Poll(pctx)
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			break
		}
		out = append(out, recs...)
	}
	return out
}

// keys names records by partition and offset.
func keys(recs []*kgo.Record) map[[2]int64]bool {
	out := make(map[[2]int64]bool, len(recs))
	for _, r := range recs {
		out[[2]int64{int64(r.Partition), r.Offset}] = true
	}
	return out
}

// An application in Explicit mode that renews some of its records keeps
// exactly those for several lock durations: another member gets the
// others when their locks run out, never the renewed ones, and the
// renewed ones are then accepted. Without Renew the other member gets
// everything (the failure branch of the same check).
func TestRenewKeepsExactlyTheRecordsAsked(t *testing.T) {
	const inputs, lock = 9, 3 * time.Second
	for _, renew := range []bool{true, false} {
		name := map[bool]string{true: "renewed", false: "not renewed"}[renew]
		t.Run(name, func(t *testing.T) {
			e := txnEnv(t, inputs, broker.ShareLockDuration(lock))
			c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Explicit))
			recs := pollRecords(e.ctx, t, c, inputs)
			var kept, left []*kgo.Record
			for _, r := range recs {
				// Offsets 0 and 2 of partition 0 (a cut in the middle of
				// one fetch) and all of partition 1.
				if (r.Partition == 0 && r.Offset != 1) || r.Partition == 1 {
					kept = append(kept, r)
				} else {
					left = append(left, r)
				}
			}
			require.Len(t, kept, 5)
			first, _ := c.LockDeadline(kept[0])
			other := e.consumer("g", "in")
			var got []*kgo.Record
			for end := first.Add(2 * lock); time.Now().Before(end); {
				got = append(got, pollFor(e.ctx, t, other, time.Second)...)
				if renew {
					require.NoError(t, c.Renew(e.ctx, kept...))
				}
			}
			if !renew {
				require.Len(t, keys(got), inputs, "without Renew every lock ran out")
				return
			}
			for len(keys(got)) < len(left) {
				got = append(got, pollFor(e.ctx, t, other, time.Second)...)
			}
			require.Equal(t, keys(left), keys(got), "the other member gets the records not renewed, and only those")
			later, ok := c.LockDeadline(kept[0])
			require.True(t, ok)
			require.True(t, later.After(first.Add(lock)), "lock deadline %v did not move past %v", later, first.Add(lock))
			for _, r := range kept {
				require.NoError(t, c.Ack(r, kshare.AckAccept))
			}
			for _, r := range left {
				require.ErrorIs(t, c.Ack(r, kshare.AckAccept), shareconsumer.ErrLockExpired)
			}
			require.NoError(t, c.Commit(e.ctx))
			expectNothing(e.ctx, t, other, 500*time.Millisecond)
			e.allAcknowledged("g", "in", map[int32]int64{0: inputs / 3, 1: inputs / 3, 2: inputs / 3})
		})
	}
}

// In Transactional mode without RenewHeldLocks, Renew keeps records Poll
// returned until the application stages them, past their first lock; a
// staged record is the consumer's to renew, and Renew says so.
func TestRenewThenStage(t *testing.T) {
	const inputs, lock = 6, 2 * time.Second
	e := txnEnv(t, inputs, broker.ShareLockDuration(lock))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	p := e.producer("ctp")
	recs := pollRecords(e.ctx, t, c, inputs)
	first, _ := c.LockDeadline(recs[0])
	for time.Now().Before(first.Add(lock)) {
		require.NoError(t, c.Renew(e.ctx, recs...))
		time.Sleep(lock / 4)
	}
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()))
	err := c.Renew(e.ctx, recs[0])
	require.ErrorIs(t, err, kshare.ErrUsage)
	require.ErrorContains(t, err, "staged in a transaction")
	require.NoError(t, p.CommitTransaction(e.ctx))
	e.allAcknowledged("g", "in", map[int32]int64{0: inputs / 3, 1: inputs / 3, 2: inputs / 3})
}

// Every way a Renew can be refused, record by record and as a whole.
func TestRenewRefusals(t *testing.T) {
	const inputs = 6
	e := txnEnv(t, inputs, broker.ShareLockDuration(time.Minute))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Explicit))
	recs := pollRecords(e.ctx, t, c, inputs)

	var nilCtx context.Context
	require.ErrorIs(t, c.Renew(nilCtx, recs...), kshare.ErrUsage)
	require.NoError(t, c.Renew(e.ctx), "nothing to renew")
	implicit := e.consumer("g2", "in")
	require.ErrorIs(t, implicit.Renew(e.ctx, recs[0]), kshare.ErrUsage)

	// What the application should not renew refuses the whole call, and
	// renews nothing.
	before, _ := c.LockDeadline(recs[1])
	require.NoError(t, c.Ack(recs[0], kshare.AckAccept))
	stranger := &kgo.Record{Topic: "in", Partition: 0, Offset: 999}
	for _, tc := range []struct {
		recs []*kgo.Record
		want error
		says string
	}{
		{[]*kgo.Record{recs[1], recs[0]}, kshare.ErrUsage, "marked ACCEPT by Ack"},
		{[]*kgo.Record{recs[1], nil}, shareconsumer.ErrNotHeld, "nil record"},
		{[]*kgo.Record{recs[1], stranger}, shareconsumer.ErrNotHeld, "offset 999"},
	} {
		err := c.Renew(e.ctx, tc.recs...)
		require.ErrorIs(t, err, tc.want)
		require.ErrorContains(t, err, tc.says)
		require.Equal(t, []error{kshare.ErrUsage}, errs.ClassesOf(err))
		var re *shareconsumer.RenewError
		require.False(t, errors.As(err, &re))
	}
	after, _ := c.LockDeadline(recs[1])
	require.Equal(t, before, after, "a refused call renews nothing")
	require.NoError(t, c.Renew(e.ctx, recs[1], recs[1]), "a record listed twice is renewed once")
	after, _ = c.LockDeadline(recs[1])
	require.True(t, after.After(before), "recs[1] was renewed: %v then %v", before, after)

	require.NoError(t, c.Close(e.ctx))
	require.ErrorIs(t, c.Renew(e.ctx, recs[1]), kshare.ErrClosed)
	require.ErrorIs(t, c.Renew(nilCtx, nil), kshare.ErrClosed, "whatever the arguments")
	require.NoError(t, implicit.Close(e.ctx))
	require.ErrorIs(t, implicit.Renew(e.ctx, recs[1]), kshare.ErrClosed)
}

// A record whose lock ended cannot be renewed: the group has it again.
func TestRenewAfterTheLockEnded(t *testing.T) {
	const inputs = 3
	e := txnEnv(t, inputs, broker.ShareLockDuration(time.Second))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Explicit))
	recs := pollRecords(e.ctx, t, c, inputs)
	deadline, _ := c.LockDeadline(recs[0])
	time.Sleep(time.Until(deadline) + 50*time.Millisecond)
	err := c.Renew(e.ctx, recs[0])
	require.ErrorIs(t, err, shareconsumer.ErrLockExpired)
	require.Equal(t, []error{kshare.ErrAbortable}, errs.ClassesOf(err))
}

// A leader without ShareAcknowledge v2 cannot renew: Renew says so, and
// the locks run out as they are (ErrLockExpired).
func TestRenewOnABrokerWithoutRenew(t *testing.T) {
	const inputs = 3
	e := txnEnv(t, inputs, broker.ShareLockDuration(time.Minute), broker.APIVersionCap(kmsg.ShareAcknowledge.Int16(), 1))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Explicit))
	recs := pollRecords(e.ctx, t, c, inputs)
	err := c.Renew(e.ctx, recs...)
	var re *shareconsumer.RenewError
	require.ErrorAs(t, err, &re)
	require.Len(t, re.Failed, inputs)
	require.ErrorIs(t, err, shareconsumer.ErrLockExpired)
	require.Equal(t, []error{kshare.ErrAbortable}, errs.ClassesOf(err))
	require.ErrorContains(t, err, "KIP-1222")
}

// blockRenews holds every RENEW request until release is called; seen
// receives one value per RENEW held.
func blockRenews(t *testing.T, e *env, fault broker.Fault) (seen <-chan struct{}, release func()) {
	ch := make(chan struct{}, 16)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if r, ok := req.(*kmsg.ShareAcknowledgeRequest); ok && r.IsRenewAck {
			ch <- struct{}{}
			<-gate
			return broker.FaultAction{Fault: fault}
		}
		return broker.FaultAction{}
	})
	t.Cleanup(func() { release(); stop() })
	return ch, release
}

// A Renew whose answer does not come before its context ends, or before
// Close, returns; a lost answer loses the locks; a later Renew works.
func TestRenewLifecycle(t *testing.T) {
	const inputs = 3
	one := func(t *testing.T) (*env, *shareconsumer.Consumer, []*kgo.Record) {
		e := txnEnv(t, inputs, broker.ShareLockDuration(time.Minute))
		c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Explicit))
		recs := pollRecords(e.ctx, t, c, inputs)
		return e, c, recs
	}
	t.Run("context ends", func(t *testing.T) {
		e, c, recs := one(t)
		seen, release := blockRenews(t, e, broker.Deliver)
		ctx, cancel := context.WithCancel(e.ctx)
		done := make(chan error, 1)
		go func() { done <- c.Renew(ctx, recs[0]) }()
		<-seen
		cancel()
		err := <-done
		require.ErrorIs(t, err, context.Canceled)
		var re *shareconsumer.RenewError
		require.ErrorAs(t, err, &re)
		require.Len(t, re.Failed, 1)
		release()
		require.NoError(t, c.Renew(e.ctx, recs...), "the abandoned call leaves nothing stuck")
	})
	t.Run("close", func(t *testing.T) {
		e, c, recs := one(t)
		seen, release := blockRenews(t, e, broker.Deliver)
		done := make(chan error, 1)
		go func() { done <- c.Renew(e.ctx, recs...) }()
		<-seen
		closed := make(chan error, 1)
		go func() { closed <- c.Close(e.ctx) }()
		err := <-done
		require.ErrorIs(t, err, shareconsumer.ErrLockExpired, "Close gives the records back")
		require.False(t, errors.Is(err, kshare.ErrClosed), "a call that began before Close is not refused by it")
		var re *shareconsumer.RenewError
		require.ErrorAs(t, err, &re)
		require.Len(t, re.Failed, inputs)
		release()
		<-closed
	})
	t.Run("answer lost", func(t *testing.T) {
		e, c, recs := one(t)
		seen, release := blockRenews(t, e, broker.DropAnswer)
		done := make(chan error, 1)
		go func() { done <- c.Renew(e.ctx, recs[0]) }()
		<-seen
		release()
		err := <-done
		require.ErrorIs(t, err, shareconsumer.ErrLockExpired, "the session reset: its locks are gone")
		require.ErrorIs(t, c.Ack(recs[0], kshare.AckAccept), shareconsumer.ErrLockExpired)
	})
}

// A Renew whose context ends before its RENEW could be sent (the leader's
// session is busy with a commit held at the broker) leaves nothing
// behind: no RENEW goes out for it afterwards, and a later Renew of one
// of its records renews that record only.
func TestRenewAbandonedByItsContextLeavesNothing(t *testing.T) {
	const inputs = 9
	e := txnEnv(t, inputs, broker.ShareLockDuration(time.Minute))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Explicit))
	var p0 []*kgo.Record
	for _, r := range pollRecords(e.ctx, t, c, inputs) {
		if r.Partition == 0 {
			p0 = append(p0, r)
		}
	}
	slices.SortFunc(p0, func(a, b *kgo.Record) int { return cmp.Compare(a.Offset, b.Offset) })
	require.Len(t, p0, 3)

	gate, held := make(chan struct{}), make(chan struct{}, 4)
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		hold := false
		switch r := req.(type) {
		case *kmsg.ShareAcknowledgeRequest:
			hold = !r.IsRenewAck
		case *kmsg.ShareFetchRequest:
			for _, tp := range r.Topics {
				for _, p := range tp.Partitions {
					hold = hold || len(p.AcknowledgementBatches) > 0
				}
			}
		}
		if hold {
			held <- struct{}{}
			<-gate
		}
		return broker.FaultAction{}
	})
	t.Cleanup(func() { release(); stop() })

	require.NoError(t, c.Ack(p0[2], kshare.AckAccept))
	committed := make(chan error, 1)
	c.CommitAsync(func(err error) { committed <- err })
	<-held // the session waits for this answer

	before, _ := c.LockDeadline(p0[1])
	ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	err := c.Renew(ctx, p0[0], p0[1])
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	release()
	require.NoError(t, <-committed)
	require.NoError(t, c.Renew(e.ctx, p0[0]))
	after, _ := c.LockDeadline(p0[1])
	require.Equal(t, before, after, "the abandoned call's records were renewed")
}
