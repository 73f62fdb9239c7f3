package lifecycle_test

import (
	"context"
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
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/wire"
)

// TestStagedWhileHeldRenewalTravels stages part of an acquisition while
// the RENEW of its held records is on its way: the held renewal of four
// records of one batch reaches the leader only after a transaction staged
// two of them there (TX_PENDING, its EndTxn held back), so the broker
// refuses that RENEW. docs/design.md (RenewHeldLocks): "A refused renewal
// stops renewing that acquisition's records, unless one of them was
// staged while the RENEW travelled (its transaction may have reached the
// broker first): the others are then renewed again without it." So the
// other two keep their lock for several lock durations: another member
// polling all along gets none of them, and a second transaction stages and
// commits them.
func TestStagedWhileHeldRenewalTravels(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.ShareLockDuration(time.Second))
	e.Topic(ctx, t, "in", 1)
	e.Topic(ctx, t, "out", 1)
	var batch []*kgo.Record
	for _, v := range []string{"a", "b", "c", "d"} {
		batch = append(batch, &kgo.Record{Topic: "in", Value: []byte(v)})
	}
	require.NoError(t, e.Admin.ProduceSync(ctx, batch...).FirstErr()) // one batch: one acquisition
	cons := e.consumer(t, "g", "in", shareconsumer.RenewHeldLocks(true))
	prod := e.producer(ctx, t, "tx")
	recs := appenv.PollN(ctx, t, cons, 4)

	txnAcked := make(chan struct{})
	renewDone := make(chan struct{})
	commitErr := make(chan error, 1)
	var renewOnce, ackOnce sync.Once
	var renewRefused atomic.Bool
	wait := func(ch chan struct{}) {
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
		}
	}
	stop := e.C.InjectFaults(func(_ int32, client string, req kmsg.Request) broker.FaultAction {
		switch r := req.(type) {
		case *kmsg.ShareAcknowledgeRequest:
			if client != "lc-consumer" || !r.IsRenewAck {
				return broker.FaultAction{}
			}
			var act broker.FaultAction
			renewOnce.Do(func() {
				// Stage two of the four while this RENEW travels, and
				// let their TxnShareAcknowledge reach the leader first.
				require.NoError(t, prod.BeginTransaction())
				for _, rec := range recs[:2] {
					prod.Produce(ctx, &kgo.Record{Topic: "out", Value: rec.Value}, nil)
				}
				require.NoError(t, prod.SendShareAcksToTransaction(ctx, cons.Acks(recs[:2], kshare.AckAccept), cons.GroupMetadata()))
				go func() { commitErr <- prod.CommitTransaction(ctx) }()
				wait(txnAcked)
				act.AfterHandling = func(resp kmsg.Response) {
					for _, tp := range resp.(*kmsg.ShareAcknowledgeResponse).Topics {
						for _, pp := range tp.Partitions {
							if pp.ErrorCode != 0 {
								renewRefused.Store(true)
							}
						}
					}
					close(renewDone)
				}
			})
			return act
		case *wire.TxnShareAcknowledgeRequest:
			var act broker.FaultAction
			ackOnce.Do(func() { act.AfterHandling = func(kmsg.Response) { close(txnAcked) } })
			return act
		}
		if req.Key() == kmsg.EndTxn.Int16() && client == "lc-producer" {
			wait(renewDone) // the records stay TX_PENDING until the RENEW was handled
		}
		return broker.FaultAction{}
	})
	defer stop()
	select {
	case err := <-commitErr:
		require.NoError(t, err, "first transaction")
	case <-ctx.Done():
		t.Fatal("first transaction never ended")
	}
	stop()
	require.True(t, renewRefused.Load(), "the broker did not refuse the RENEW that met TX_PENDING records (test premise)")

	// Several lock durations pass while another member polls.
	other := e.consumer(t, "g", "in", shareconsumer.KgoOpts(kgo.ClientID("lc-other")))
	pctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	for {
		rs, err := other.Poll(pctx)
		if err != nil {
			break
		}
		for _, r := range rs {
			t.Errorf("held record %s (offset %d) went to another member while its holder renews it", r.Value, r.Offset)
		}
	}
	cancel()
	require.NoError(t, prod.BeginTransaction())
	for _, rec := range recs[2:] {
		prod.Produce(ctx, &kgo.Record{Topic: "out", Value: rec.Value}, nil)
	}
	err := prod.SendShareAcksToTransaction(ctx, cons.Acks(recs[2:], kshare.AckAccept), cons.GroupMetadata())
	if err == nil {
		err = prod.CommitTransaction(ctx)
	}
	require.NoError(t, err, "the rest of the acquisition lost its lock after the refused RENEW")
	_ = context.Background
}
