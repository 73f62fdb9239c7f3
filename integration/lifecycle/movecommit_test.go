package lifecycle_test

import (
	"context"
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

// TestInputLeaderMovesDuringCommit moves the input partition's leader
// while a commit is under way: right after the leader staged the
// transaction's acknowledgements (TxnShareAcknowledge handled, its answer
// delivered or lost, so the producer retries at the new leader), or right
// after EndTxn. Whatever the commit returns, the broker must agree: outputs
// committed and inputs acknowledged, or neither (and the inputs come back).
func TestInputLeaderMovesDuringCommit(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.Nodes(3), broker.ShareLockDuration(2*time.Second))
	type tc struct {
		key  int16
		drop bool
	}
	i := 0
	for _, c := range []tc{{wire.TxnShareAcknowledgeKey, false}, {wire.TxnShareAcknowledgeKey, true}, {kmsg.EndTxn.Int16(), false}, {kmsg.EndTxn.Int16(), true}} {
		i++
		t.Run(fmt.Sprintf("%s/drop=%v", wire.NameForKey(c.key), c.drop), func(t *testing.T) {
			in, out, group, txid := fmt.Sprintf("in%d", i), fmt.Sprintf("out%d", i), fmt.Sprintf("g%d", i), fmt.Sprintf("tx%d", i)
			e.Topic(ctx, t, in, 1)
			e.Topic(ctx, t, out, 1)
			e.Input(ctx, t, in, "a", "b", "c")
			cons := e.consumer(t, group, in)
			prod := e.producer(ctx, t, txid, producer.KgoOpts(kgo.ClientID(txid)))
			recs := appenv.PollN(ctx, t, cons, 3)
			var once sync.Once
			var fired atomic.Bool
			stop := e.C.InjectFaults(func(_ int32, client string, req kmsg.Request) broker.FaultAction {
				if client != txid || req.Key() != c.key {
					return broker.FaultAction{}
				}
				var act broker.FaultAction
				once.Do(func() {
					fired.Store(true)
					act.AfterHandling = func(kmsg.Response) {
						leader, err := e.C.Leader(in, 0)
						require.NoError(t, err)
						for _, n := range e.C.NodeIDs() {
							if n != leader {
								require.NoError(t, e.C.MoveLeader(in, 0, n))
								break
							}
						}
					}
					if c.drop {
						act.Fault = broker.DropAnswer
					}
				})
				return act
			})
			defer stop()
			require.NoError(t, prod.BeginTransaction())
			for _, r := range recs {
				prod.Produce(ctx, &kgo.Record{Topic: out, Value: r.Value}, nil)
			}
			require.NoError(t, prod.SendShareAcksToTransaction(ctx, cons.Acks(recs, kshare.AckAccept), cons.GroupMetadata()))
			err := prod.CommitTransaction(ctx)
			require.True(t, fired.Load())
			t.Logf("commit: %v", err)
			committed := err == nil
			if err != nil {
				require.ErrorIs(t, err, kshare.ErrAbortable)
				require.NoError(t, prod.AbortTransaction(ctx))
			}
			require.NoError(t, cons.Close(ctx))
			outs := e.CommittedValues(ctx, t, out)
			// After a commit nothing may come back within 5 s; after an
			// abort every input comes back: poll until it did (the
			// test's context bounds it), not for a window.
			fresh := e.consumer(t, group, in)
			pctx, cancel := context.WithCancel(ctx)
			if committed {
				cancel()
				pctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			}
			defer cancel()
			offsets := map[int64]bool{}
			for len(offsets) < 3 {
				rs, err := fresh.Poll(pctx)
				if err != nil {
					require.True(t, committed, "%d of the aborted transaction's 3 inputs came back: %v", len(offsets), err)
					break
				}
				for _, r := range rs {
					offsets[r.Offset] = true
				}
			}
			if committed {
				require.Len(t, outs, 3)
				require.Empty(t, offsets, "inputs of a committed transaction came back")
			} else {
				require.Empty(t, outs)
				require.Len(t, offsets, 3, "inputs of an aborted transaction must come back")
			}
		})
	}
}
