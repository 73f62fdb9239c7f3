package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
	"github.com/kshare-go/kshare/wire"
)

// TestCheckpointCommitRacingCloseReportsItsOutcome closes an acknowledger
// from another goroutine while its CommitCheckpoint is at each round trip
// of its transaction (TxnShareAcknowledge, EndTxn), with Close's context
// already ended or with time to spare, and with the round trip's answer
// delivered or lost. Whatever CommitCheckpoint and
// Close return must agree with the broker: the checkpoint's records are
// acknowledged if and only if CommitCheckpoint returned nil (or an error
// matching ErrCommitted) or Close returned an error matching ErrCommitted.
func TestCheckpointCommitRacingCloseReportsItsOutcome(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.ShareLockDuration(30*time.Second))
	keys := []int16{wire.TxnShareAcknowledgeKey, kmsg.EndTxn.Int16()}
	i := 0
	for _, key := range keys {
		for _, closeNow := range []bool{false, true} {
			for _, drop := range []bool{false, true} {
				i++
				name := fmt.Sprintf("%s/closeNow=%v/drop=%v", wire.NameForKey(key), closeNow, drop)
				t.Run(name, func(t *testing.T) {
					checkpointCloseCase(ctx, t, e, i, key, closeNow, drop)
				})
			}
		}
	}
}

func checkpointCloseCase(ctx context.Context, t *testing.T, e *env, i int, key int16, closeNow, drop bool) {
	topic, group, client := fmt.Sprintf("in%d", i), fmt.Sprintf("g%d", i), fmt.Sprintf("lc-ack-%d", i)
	e.Topic(ctx, t, topic, 1)
	e.Input(ctx, t, topic, "a", "b", "c")
	cons := e.consumer(t, group, topic)
	recs := appenv.PollN(ctx, t, cons, 3)
	a, err := acknowledger.New(acknowledger.SeedBrokers(e.Seeds...), acknowledger.TransactionalID(client),
		acknowledger.KgoOpts(kgo.ClientID(client)), acknowledger.TransactionTimeout(20*time.Second))
	require.NoError(t, err)
	require.NoError(t, a.InitTransactions(ctx))
	require.NoError(t, a.Stage(1, cons.Acks(recs, kshare.AckAccept), cons.GroupMetadata()))

	var once sync.Once
	var closeErr error
	closed := make(chan struct{})
	startClose := func() {
		go func() {
			defer close(closed)
			cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			if closeNow {
				cancel()
			}
			defer cancel()
			closeErr = a.Close(cctx)
		}()
		// Close has begun once AbortCheckpoint says ErrClosed.
		for !errors.Is(a.AbortCheckpoint(0), kshare.ErrClosed) {
			select {
			case <-closed:
				return
			case <-ctx.Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
	}
	var fired atomic.Bool
	stop := e.C.InjectFaults(func(_ int32, c string, req kmsg.Request) broker.FaultAction {
		if c != client || req.Key() != key {
			return broker.FaultAction{}
		}
		act := broker.FaultAction{}
		once.Do(func() {
			fired.Store(true)
			act.AfterHandling = func(kmsg.Response) { startClose() }
			if drop {
				act.Fault = broker.DropAnswer
			}
		})
		return act
	})
	commitErr := a.CommitCheckpoint(ctx, 1)
	stop()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("acknowledger Close hung")
	}
	require.True(t, fired.Load(), "the fault never landed")
	require.NoError(t, ctx.Err())

	reported := commitErr == nil || errors.Is(commitErr, kshare.ErrCommitted) || errors.Is(closeErr, kshare.ErrCommitted)
	inDoubt := !reported && errors.Is(closeErr, kshare.ErrInDoubt)
	t.Logf("commit: %v; close: %v", commitErr, closeErr)
	if closeErr != nil && !errors.Is(closeErr, kshare.ErrCommitted) {
		// Close left the transaction to the coordinator: the next
		// acknowledger with the same id settles it (docs of Close).
		next, err := acknowledger.New(acknowledger.SeedBrokers(e.Seeds...), acknowledger.TransactionalID(client))
		require.NoError(t, err)
		require.NoError(t, next.InitTransactions(ctx))
		require.NoError(t, next.Close(ctx))
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	require.NoError(t, cons.Close(cctx))
	cancel()

	// The records are acknowledged iff none is available to the group.
	available := e.cameBack(ctx, t, group, topic, 3)
	switch {
	case inDoubt:
		require.Contains(t, []int{0, 3}, available, "an in-doubt commit applied in part")
	case reported:
		require.Zero(t, available, "reported committed, yet %d records came back (commit %v, close %v)", available, commitErr, closeErr)
	default:
		require.Equal(t, 3, available, "reported not committed, yet records are acknowledged (commit %v, close %v)", commitErr, closeErr)
	}
}
