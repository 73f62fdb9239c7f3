package shareconsumer_test

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
	"github.com/kshare-go/kshare/internal/txn"
	"github.com/kshare-go/kshare/shareconsumer"
)

// A leader answers an acknowledgement of offsets below the share-partition
// start offset with success without looking at them (Apache Kafka 4.4
// does; so does the bundled broker). A worker's RENEW held up at the
// leader until its lock ran out, another member was handed the records,
// committed their outputs and acknowledged them, is then answered with
// success: that late success must not count as the lock held, or the
// worker commits the records a second time. These tests hold worker 1's
// RENEW at the leader until worker 2's commit is acknowledged, then let
// it through, and check that worker 1 cannot commit.

// lateRenewal is one run of the race: worker 1 polls the inputs; its
// first RENEW once armed is held at the leader until release.
type lateRenewal struct {
	e       *env
	c1      *shareconsumer.Consumer
	recs    []*kgo.Record
	held    chan struct{} // closed when the leader holds worker 1's RENEW
	release func()
}

func startLateRenewal(t *testing.T, inputs int, armed func() bool) *lateRenewal {
	e := newEnv(t, broker.ShareTxnAPIs(false), broker.ShareLockDuration(time.Second))
	e.createTopic("in", 1)
	e.createTopic("out", 1)
	e.groupConfig("g")
	e.produce("in", 1, values("v", inputs)...)
	// RenewHeldLocks keeps worker 1's locks until the RENEW is held,
	// however slow the machine; a long MaxWait keeps the held-up RENEW
	// from timing out in the client.
	c1 := e.ledgerConsumer(shareconsumer.RenewHeldLocks(true), shareconsumer.MaxWait(time.Minute))
	recs := pollRecords(e.ctx, t, c1, inputs)
	member1 := c1.GroupMetadata().MemberID

	r := &lateRenewal{e: e, c1: c1, recs: recs, held: make(chan struct{})}
	resume := make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if ar, ok := req.(*kmsg.ShareAcknowledgeRequest); ok && ar.IsRenewAck && ar.MemberID != nil && *ar.MemberID == member1 && armed() {
			held := false
			heldOnce.Do(func() { held = true })
			if held {
				close(r.held)
				waitOrEnd(e.ctx, resume)
			}
		}
		return broker.FaultAction{}
	})
	t.Cleanup(stop)
	r.release = func() { releaseOnce.Do(func() { close(resume) }) }
	t.Cleanup(r.release)
	return r
}

// worker2Commits waits for worker 1's RENEW to be held, has worker 2 take
// the records once their lock ran out, commit them and have them
// acknowledged, lets the RENEW through, and returns once worker 1 has its
// answer.
func (r *lateRenewal) worker2Commits(t *testing.T, inputs int) {
	e := r.e
	select {
	case <-r.held:
	case <-e.ctx.Done():
		t.Fatal("worker 1's RENEW never reached the leader")
	}
	c2 := e.ledgerConsumer()
	p2 := e.ledgerProducer("w2")
	require.NoError(t, process(e.ctx, t, p2, c2, pollRecords(e.ctx, t, c2, inputs)))
	e.allAcknowledged("g", "in", map[int32]int64{0: int64(inputs)})
	before := r.c1.Metrics()
	r.release()
	e.eventually("worker 1's RENEW answered", func() bool {
		m := r.c1.Metrics()
		return m.LocksRenewed+m.RenewalsRefused > before.LocksRenewed+before.RenewalsRefused
	})
}

// Records returned by Poll and renewed (RenewHeldLocks) while the
// application works on them: the late success leaves their lock lost, and
// staging them fails.
func TestLedgerLateRenewalOfHeldRecordsProvesNothing(t *testing.T) {
	const inputs = 4
	r := startLateRenewal(t, inputs, func() bool { return true })
	e := r.e
	r.worker2Commits(t, inputs)

	p1 := e.ledgerProducer("w1")
	err := process(e.ctx, t, p1, r.c1, r.recs)
	require.ErrorIs(t, err, shareconsumer.ErrLockExpired, "worker 1's lock ran out before its late renewal")
	require.NoError(t, p1.AbortTransaction(e.ctx))
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
}

// Records staged in a ledger transaction whose claims are not written yet
// (the worker stalls there, as in the ctp harness's pause fault): the
// late success of their renewal leaves them lost, and the commit fails.
func TestLedgerLateRenewalOfStagedRecordsProvesNothing(t *testing.T) {
	const inputs = 4
	var stalled atomic.Bool
	r := startLateRenewal(t, inputs, stalled.Load)
	e := r.e
	type worker1 struct{}
	answered := make(chan struct{})
	txn.SetFaultHooks(&txn.FaultHooks{BeforeClaims: func(ctx context.Context) {
		if ctx.Value(worker1{}) == nil {
			return
		}
		stalled.Store(true)
		waitOrEnd(ctx, answered)
	}})
	defer txn.SetFaultHooks(nil)

	p1 := e.ledgerProducer("w1")
	ctx1 := context.WithValue(e.ctx, worker1{}, true)
	require.NoError(t, p1.BeginTransaction())
	for _, rec := range r.recs {
		p1.Produce(ctx1, &kgo.Record{Topic: "out", Value: []byte("out-" + string(rec.Value))}, nil)
	}
	staged := make(chan error, 1)
	go func() {
		staged <- p1.SendShareAcksToTransaction(ctx1, r.c1.Acks(r.recs, kshare.AckAccept), r.c1.GroupMetadata())
	}()
	r.worker2Commits(t, inputs)
	close(answered)

	err := <-staged
	if err == nil {
		err = p1.CommitTransaction(e.ctx)
	}
	require.ErrorIs(t, err, shareconsumer.ErrLockExpired, "worker 1's lock ran out before its late renewal")
	require.NoError(t, p1.AbortTransaction(e.ctx))
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
}
