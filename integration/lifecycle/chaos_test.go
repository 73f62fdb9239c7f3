package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/wire"
)

// TestPipelineExactlyOnceUnderConsumerFaults runs a consume-transform-
// produce pipeline while the consumer's ShareFetch and ShareAcknowledge
// answers and the producer's TxnShareAcknowledge and EndTxn answers are
// dropped (count-based), the input partition's leader moves every few
// transactions, and held locks are renewed (RenewHeldLocks). The verdict
// is the exactly-once invariant, not timing: every input value appears in
// the committed output exactly once, and once the pipeline closes no input
// record is still available to the group.
func TestPipelineExactlyOnceUnderConsumerFaults(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.Nodes(3), broker.ShareDeliveryLimit(10), broker.ShareLockDuration(time.Second))
	e.Topic(ctx, t, "in", 1)
	e.Topic(ctx, t, "out", 1)
	const n = 120
	var values []string
	for i := range n {
		values = append(values, fmt.Sprintf("v%03d", i))
	}
	e.Input(ctx, t, "in", values...)

	var counts [4]atomic.Int64
	var dropped atomic.Int64
	stop := e.C.InjectFaults(func(_ int32, client string, req kmsg.Request) broker.FaultAction {
		every := map[int16]struct {
			i int
			k int64
		}{
			kmsg.ShareFetch.Int16():       {0, 4},
			kmsg.ShareAcknowledge.Int16(): {1, 2},
			wire.TxnShareAcknowledgeKey:   {2, 3},
			kmsg.EndTxn.Int16():           {3, 5},
		}
		if s, ok := every[req.Key()]; ok && (client == "lc-consumer" || client == "lc-producer") {
			if counts[s.i].Add(1)%s.k == 0 {
				dropped.Add(1)
				return broker.FaultAction{Fault: broker.DropAnswer}
			}
		}
		return broker.FaultAction{}
	})
	defer stop()

	cons := e.consumer(t, "g", "in", shareconsumer.RenewHeldLocks(true), shareconsumer.MaxPollRecords(7))
	prod := e.producer(ctx, t, "tx")

	committed := map[string]int{}
	nodes := e.C.NodeIDs()
	for iter := 0; len(committed) < n; iter++ {
		require.NoError(t, ctx.Err(), "pipeline stalled with %d of %d committed", len(committed), n)
		if iter%3 == 2 {
			require.NoError(t, e.C.MoveLeader("in", 0, nodes[iter%len(nodes)]))
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		recs, err := cons.Poll(pctx)
		cancel()
		if err != nil {
			require.ErrorIs(t, err, kshare.ErrAbortable, "poll")
			continue
		}
		require.NoError(t, prod.BeginTransaction())
		var vals []string
		for _, r := range recs {
			vals = append(vals, string(r.Value))
			prod.Produce(ctx, &kgo.Record{Topic: "out", Value: r.Value}, nil)
		}
		if iter%5 == 1 {
			// Work for most of a lock: the held renewal must keep it.
			time.Sleep(700 * time.Millisecond)
		}
		err = prod.SendShareAcksToTransaction(ctx, cons.Acks(recs, kshare.AckAccept), cons.GroupMetadata())
		if iter%5 == 3 && err == nil {
			time.Sleep(700 * time.Millisecond) // the staged renewal must keep it
		}
		if iter%4 == 3 && err == nil {
			// A deliberate abort: the consumer releases the records.
			require.NoError(t, prod.AbortTransaction(ctx))
			continue
		}
		if err == nil {
			err = prod.CommitTransaction(ctx)
		}
		done := err == nil
		if err != nil {
			if !errors.Is(err, kshare.ErrAbortable) && !errors.Is(err, kshare.ErrInDoubt) {
				t.Fatalf("iteration %d: unexpected error class: %v", iter, err)
			}
			aerr := prod.AbortTransaction(ctx)
			switch {
			case aerr == nil:
			case errors.Is(aerr, kshare.ErrCommitted):
				done = true
			default:
				t.Fatalf("iteration %d: abort: %v", iter, aerr)
			}
		}
		if done {
			for _, v := range vals {
				committed[v]++
			}
		}
	}
	stop()
	t.Logf("dropped %d answers; seen fetch %d ack %d txnack %d endtxn %d", dropped.Load(), counts[0].Load(), counts[1].Load(), counts[2].Load(), counts[3].Load())
	for v, k := range committed {
		require.Equal(t, 1, k, "value %s committed %d times by the pipeline", v, k)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	require.NoError(t, cons.Close(cctx))
	require.NoError(t, prod.Close(cctx))
	cancel()

	out := e.CommittedValues(ctx, t, "out")
	sort.Strings(out)
	require.Equal(t, values, out, "committed output is not every input exactly once")

	// Nothing may be left for the group: every input was acknowledged.
	fresh := e.consumer(t, "g", "in")
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for {
		recs, err := fresh.Poll(pctx)
		if err != nil {
			break
		}
		for _, r := range recs {
			t.Errorf("input %s still available after its output committed", r.Value)
		}
	}
}
