package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/kshare-go/kshare/producer"
)

// TestInDoubtCommitThenClose leaves a commit in doubt (every EndTxn
// answer lost, or every EndTxn request lost, until the commit's context
// ends), then closes the producer or acknowledger with time to spare and
// the faults gone. Close must learn the outcome: an error matching
// ErrCommitted when EndTxn(COMMIT) had been applied, nil when not; and the
// broker must agree (outputs committed and inputs acknowledged, or neither).
func TestInDoubtCommitThenClose(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.ShareLockDuration(30*time.Second))
	i := 0
	for _, ack := range []bool{false, true} {
		for _, fault := range []broker.Fault{broker.DropAnswer, broker.DropRequest} {
			i++
			t.Run(fmt.Sprintf("acknowledger=%v/%s", ack, fault), func(t *testing.T) {
				inDoubtCase(ctx, t, e, i, ack, fault)
			})
		}
	}
}

func inDoubtCase(ctx context.Context, t *testing.T, e *env, i int, ack bool, fault broker.Fault) {
	in, out, group, txid := fmt.Sprintf("in%d", i), fmt.Sprintf("out%d", i), fmt.Sprintf("g%d", i), fmt.Sprintf("tx%d", i)
	e.Topic(ctx, t, in, 1)
	e.Topic(ctx, t, out, 1)
	e.Input(ctx, t, in, "a", "b", "c")
	cons := e.consumer(t, group, in)
	recs := appenv.PollN(ctx, t, cons, 3)
	var commitErr error
	var closeFn func(context.Context) error
	var applied atomic.Int64
	stop := e.C.InjectFaults(func(_ int32, c string, req kmsg.Request) broker.FaultAction {
		if c != txid || req.Key() != kmsg.EndTxn.Int16() {
			return broker.FaultAction{}
		}
		if r := req.(*kmsg.EndTxnRequest); r.Commit && fault == broker.DropAnswer {
			applied.Add(1)
		}
		return broker.FaultAction{Fault: fault}
	})
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if ack {
		a, err := acknowledger.New(acknowledger.SeedBrokers(e.Seeds...), acknowledger.TransactionalID(txid),
			acknowledger.KgoOpts(kgo.ClientID(txid)))
		require.NoError(t, err)
		require.NoError(t, a.InitTransactions(ctx))
		commitErr = a.CommitAcknowledgements(cctx, cons.Acks(recs, kshare.AckAccept), cons.GroupMetadata())
		closeFn = a.Close
	} else {
		p, err := producer.New(producer.SeedBrokers(e.Seeds...), producer.TransactionalID(txid),
			producer.KgoOpts(kgo.ClientID(txid)))
		require.NoError(t, err)
		require.NoError(t, p.InitTransactions(ctx))
		require.NoError(t, p.BeginTransaction())
		for _, r := range recs {
			p.Produce(ctx, &kgo.Record{Topic: out, Value: r.Value}, nil)
		}
		require.NoError(t, p.SendShareAcksToTransaction(ctx, cons.Acks(recs, kshare.AckAccept), cons.GroupMetadata()))
		commitErr = p.CommitTransaction(cctx)
		closeFn = p.Close
	}
	cancel()
	stop()
	require.ErrorIs(t, commitErr, kshare.ErrInDoubt, "commit with every EndTxn %s", fault)
	closeErr := closeFn(ctx)
	t.Logf("commit: %v; close: %v; EndTxn(COMMIT) applied %d times", commitErr, closeErr, applied.Load())
	if applied.Load() > 0 {
		require.ErrorIs(t, closeErr, kshare.ErrCommitted, "Close learned nothing of a commit the coordinator applied")
	} else {
		require.NoError(t, closeErr, "Close of a commit the coordinator never saw")
	}
	require.NoError(t, cons.Close(ctx))
	fresh := e.consumer(t, group, in)
	back := 0
	if applied.Load() > 0 {
		// Nothing may come back: any record in a 2 s window fails.
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		for {
			rs, err := fresh.Poll(pctx)
			if err != nil {
				require.True(t, errors.Is(err, kshare.ErrAbortable))
				break
			}
			back += len(rs)
		}
	} else {
		// The three inputs come back: poll until they did, however long
		// that takes (the test's context bounds it), not for a window
		// in which they happen to arrive.
		for back < 3 {
			rs, err := fresh.Poll(ctx)
			require.NoError(t, err, "%d of 3 inputs came back", back)
			back += len(rs)
		}
	}
	outs := 3
	if !ack {
		outs = len(e.CommittedValues(ctx, t, out))
	}
	if applied.Load() > 0 {
		require.Zero(t, back, "inputs of a committed transaction came back")
		require.Equal(t, 3, outs)
	} else {
		require.Equal(t, 3, back, "inputs of an aborted transaction")
		if !ack {
			require.Zero(t, outs)
		}
	}
}
