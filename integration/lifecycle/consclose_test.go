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
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/wire"
)

// TestConsumerClosedUnderAStagedTransaction closes the share consumer
// while a producer transaction holds its staged acknowledgements: before
// CommitTransaction, or while the commit's TxnShareAcknowledge or EndTxn
// is at the broker, with Close's context alive or already ended. The
// consumer's Close promises that closing early never breaks exactly-once:
// the commit either succeeds with every output and acknowledgement, or
// fails and nothing of it takes effect (the inputs come back).
func TestConsumerClosedUnderAStagedTransaction(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.ShareLockDuration(2*time.Second))
	i := 0
	for _, at := range []int16{-1, wire.TxnShareAcknowledgeKey, kmsg.EndTxn.Int16()} {
		for _, closeNow := range []bool{false, true} {
			i++
			where := "before-commit"
			if at >= 0 {
				where = wire.NameForKey(at)
			}
			t.Run(fmt.Sprintf("%s/closeNow=%v", where, closeNow), func(t *testing.T) {
				consumerCloseCase(ctx, t, e, i, at, closeNow)
			})
		}
	}
}

func consumerCloseCase(ctx context.Context, t *testing.T, e *env, i int, at int16, closeNow bool) {
	in, out, group, txid := fmt.Sprintf("in%d", i), fmt.Sprintf("out%d", i), fmt.Sprintf("g%d", i), fmt.Sprintf("tx%d", i)
	e.Topic(ctx, t, in, 1)
	e.Topic(ctx, t, out, 1)
	e.Input(ctx, t, in, "a", "b", "c")
	cons := e.consumer(t, group, in)
	prod := e.producer(ctx, t, txid, producer.KgoOpts(kgo.ClientID(txid)))
	recs := appenv.PollN(ctx, t, cons, 3)
	var closeMu sync.Mutex
	var closeErr error
	closeCons := func() {
		closeMu.Lock()
		defer closeMu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if closeNow {
			cancel()
		}
		defer cancel()
		closeErr = cons.Close(cctx)
	}
	require.NoError(t, prod.BeginTransaction())
	for _, r := range recs {
		prod.Produce(ctx, &kgo.Record{Topic: out, Value: r.Value}, nil)
	}
	require.NoError(t, prod.SendShareAcksToTransaction(ctx, cons.Acks(recs, kshare.AckAccept), cons.GroupMetadata()))
	var once sync.Once
	var fired atomic.Bool
	fired.Store(at < 0)
	if at < 0 {
		closeCons()
	} else {
		stop := e.C.InjectFaults(func(_ int32, c string, req kmsg.Request) broker.FaultAction {
			if c != txid || req.Key() != at {
				return broker.FaultAction{}
			}
			var act broker.FaultAction
			once.Do(func() {
				fired.Store(true)
				act.AfterHandling = func(kmsg.Response) { closeCons() }
			})
			return act
		})
		defer stop()
	}
	err := prod.CommitTransaction(ctx)
	require.True(t, fired.Load(), "the fault never landed")
	closeMu.Lock()
	t.Logf("consumer close: %v; commit: %v", closeErr, err)
	closeMu.Unlock()
	committed := err == nil
	if err != nil {
		require.ErrorIs(t, err, kshare.ErrAbortable)
		require.NoError(t, prod.AbortTransaction(ctx))
	}
	if at < 0 && !closeNow {
		require.False(t, committed, "the consumer's Close doc: acknowledgements that had not reached the leaders fail at commit")
	}
	outs := e.CommittedValues(ctx, t, out)
	fresh := e.consumer(t, group, in)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second) // past a 2 s lock
	defer cancel()
	offsets := map[int64]bool{}
	for {
		rs, err := fresh.Poll(pctx)
		if err != nil {
			break
		}
		for _, r := range rs {
			offsets[r.Offset] = true
		}
	}
	if committed {
		require.Len(t, outs, 3, "committed transaction's outputs")
		require.Empty(t, offsets, "inputs of a committed transaction came back")
	} else {
		require.Empty(t, outs, "aborted transaction's outputs")
		require.Len(t, offsets, 3, "inputs of an aborted transaction must come back")
	}
	_ = errors.Is
}
