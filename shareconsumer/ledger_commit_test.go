package shareconsumer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/txn"
)

// commitWatch counts, as the broker sees them, the EndTxn(COMMIT)s and
// commit-time RENEWs of a test, and whether the ledger's Produce was
// answered before each RENEW.
type commitWatch struct {
	commits        atomic.Int32
	renews         atomic.Int32
	renewsEarly    atomic.Int32 // RENEWs that arrived before any claim was answered
	claimsAnswered atomic.Bool
	claimsSeen     atomic.Int32
	outputsSeen    atomic.Int32
}

// watchCommit installs a hook that fills w and holds the ledger's
// Produce until claims opens and the output's until outputs opens.
func (e *env) watchCommit(w *commitWatch, claims, outputs *gate) {
	ledgerID, outID := e.topicID(ledgerTopic), e.topicID("out")
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		switch r := req.(type) {
		case *kmsg.EndTxnRequest:
			if r.Commit {
				w.commits.Add(1)
			}
		case *kmsg.ShareAcknowledgeRequest:
			if r.IsRenewAck {
				w.renews.Add(1)
				if !w.claimsAnswered.Load() {
					w.renewsEarly.Add(1)
				}
			}
		case *kmsg.ProduceRequest:
			switch {
			case isProduceTo(r, ledgerTopic, ledgerID):
				w.claimsSeen.Add(1)
				claims.wait(e.ctx)
				return broker.FaultAction{AfterHandling: func(kmsg.Response) { w.claimsAnswered.Store(true) }}
			case isProduceTo(r, "out", outID):
				w.outputsSeen.Add(1)
				outputs.wait(e.ctx)
			}
		}
		return broker.FaultAction{}
	})
	e.t.Cleanup(func() { stop(); claims.open(); outputs.open() })
}

// opened is a gate that is open from the start.
func opened() *gate { g := newGate(); g.open(); return g }

// A ledger commit renews its records' locks only once the claims were
// answered (durable), calls BeforeRenew after that, and commits.
func TestLedgerRenewOnlyAfterClaimsDurable(t *testing.T) {
	const inputs = 4
	e, _ := ledgerEnv(t, inputs, broker.ShareLockDuration(10*time.Minute))
	c := e.ledgerConsumer()
	p := e.ledgerProducer("w")
	recs := pollRecords(e.ctx, t, c, inputs)
	var w commitWatch
	e.watchCommit(&w, opened(), opened())
	var hookCalls, hookEarly atomic.Int32
	txn.SetFaultHooks(&txn.FaultHooks{BeforeRenew: func(context.Context) {
		hookCalls.Add(1)
		if !w.claimsAnswered.Load() {
			hookEarly.Add(1)
		}
	}})
	defer txn.SetFaultHooks(nil)
	require.NoError(t, process(e.ctx, t, p, c, recs))
	require.Equal(t, int32(1), hookCalls.Load(), "BeforeRenew runs once per commit")
	require.Zero(t, hookEarly.Load(), "BeforeRenew ran before the claims were durable")
	require.Positive(t, w.renews.Load(), "the commit renewed the locks")
	require.Zero(t, w.renewsEarly.Load(), "a RENEW reached the broker before the claims were answered")
	require.Equal(t, int32(1), w.commits.Load())
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
	e.allAcknowledged("g", "in", map[int32]int64{0: inputs})
}

// The claims never become durable within the commit's ctx: the commit
// fails, sends no RENEW (nothing proves the claims were visible) and no
// EndTxn(COMMIT); after the abort the records are processed exactly once.
func TestLedgerCommitFailsWhileClaimsHeld(t *testing.T) {
	const inputs = 4
	e, _ := ledgerEnv(t, inputs, broker.ShareLockDuration(10*time.Minute))
	c := e.ledgerConsumer()
	p := e.ledgerProducer("w")
	recs := pollRecords(e.ctx, t, c, inputs)
	var w commitWatch
	claims := newGate()
	e.watchCommit(&w, claims, opened())
	var hookCalls atomic.Int32
	txn.SetFaultHooks(&txn.FaultHooks{BeforeRenew: func(context.Context) { hookCalls.Add(1) }})
	defer txn.SetFaultHooks(nil)

	require.NoError(t, p.BeginTransaction())
	for _, r := range recs {
		p.Produce(e.ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + string(r.Value))}, nil)
	}
	require.NoError(t, p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()))
	e.eventually("the claims' Produce is held", func() bool { return w.claimsSeen.Load() > 0 })
	cctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- p.CommitTransaction(cctx) }()
	e.eventually("the outputs were written", func() bool { return w.outputsSeen.Load() > 0 })
	cancel()
	err := <-done
	require.Error(t, err)
	t.Logf("commit: %v", err)
	require.Zero(t, w.commits.Load(), "EndTxn(COMMIT) sent by a commit whose claims were not durable")
	require.Zero(t, w.renews.Load(), "a RENEW was sent before the claims were durable")
	require.Zero(t, hookCalls.Load(), "BeforeRenew ran before the claims were durable")
	claims.open()
	require.NoError(t, p.AbortTransaction(e.ctx))
	_, _ = c.Release(recs)
	again := pollRecords(e.ctx, t, c, inputs)
	require.NoError(t, process(e.ctx, t, p, c, again))
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
}

// The outputs' flush is held while the claims are durable: the renewal
// waits for the whole flush, and the commit, whose ctx ends before the
// flush does, fails without a RENEW or EndTxn(COMMIT).
func TestLedgerFlushHeldThenFlushFails(t *testing.T) {
	const inputs = 4
	// The ledger's leader is not the output's: the claims do not queue
	// behind the held outputs on one connection.
	e := newEnv(t, broker.Nodes(2), broker.ShareTxnAPIs(false), broker.ShareLockDuration(10*time.Minute))
	e.createTopic("in", 1)
	e.createTopic("out", 1)
	e.groupConfig("g")
	e.createLedger(1)
	outLeader, err := e.c.Leader("out", 0)
	require.NoError(t, err)
	for _, node := range e.c.NodeIDs() {
		if node != outLeader {
			require.NoError(t, e.c.MoveLeader(ledgerTopic, 0, node))
		}
	}
	e.produce("in", 1, values("v", inputs)...)
	c := e.ledgerConsumer()
	p := e.ledgerProducer("w")
	recs := pollRecords(e.ctx, t, c, inputs)
	var w commitWatch
	outputs := newGate()
	e.watchCommit(&w, opened(), outputs)

	require.NoError(t, p.BeginTransaction())
	for _, r := range recs {
		p.Produce(e.ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + string(r.Value))}, nil)
	}
	require.NoError(t, p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()))
	cctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- p.CommitTransaction(cctx) }()
	e.eventually("the commit's flush reaches the held outputs", func() bool { return w.outputsSeen.Load() > 0 })
	select {
	case err := <-done:
		t.Fatalf("the commit returned (%v) while its outputs were held", err)
	default:
	}
	cancel()
	err = <-done
	require.Error(t, err)
	t.Logf("commit: %v", err)
	require.Zero(t, w.commits.Load(), "EndTxn(COMMIT) sent by a commit whose flush failed")
	require.Zero(t, w.renews.Load(), "a RENEW sent before the flush was done")
	outputs.open()
	require.NoError(t, p.AbortTransaction(e.ctx))
	t.Log("aborted")
	_, _ = c.Release(recs)
	again := pollRecords(e.ctx, t, c, inputs)
	t.Log("polled again")
	require.NoError(t, process(e.ctx, t, p, c, again))
	t.Log("processed")
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
}

// The ledger refuses the claims (a non-retriable produce error): the
// commit fails, sends no RENEW and no EndTxn(COMMIT), and BeforeRenew
// does not run.
func TestLedgerCommitFailsWhenClaimsRefused(t *testing.T) {
	const inputs = 4
	e, _ := ledgerEnv(t, inputs, broker.ShareLockDuration(10*time.Minute))
	c := e.ledgerConsumer()
	p := e.ledgerProducer("w")
	recs := pollRecords(e.ctx, t, c, inputs)
	ledgerID := e.topicID(ledgerTopic)
	var commits, renews, refused atomic.Int32
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		switch r := req.(type) {
		case *kmsg.EndTxnRequest:
			if r.Commit {
				commits.Add(1)
			}
		case *kmsg.ShareAcknowledgeRequest:
			if r.IsRenewAck {
				renews.Add(1)
			}
		case *kmsg.ProduceRequest:
			if isProduceTo(r, ledgerTopic, ledgerID) {
				return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
					pr, ok := resp.(*kmsg.ProduceResponse)
					if !ok {
						return
					}
					for i := range pr.Topics {
						if pr.Topics[i].Topic != ledgerTopic && pr.Topics[i].TopicID != ledgerID {
							continue
						}
						for j := range pr.Topics[i].Partitions {
							pr.Topics[i].Partitions[j].ErrorCode = 87 // INVALID_RECORD
							refused.Add(1)
						}
					}
				}}
			}
		}
		return broker.FaultAction{}
	})
	defer stop()
	var hookCalls atomic.Int32
	txn.SetFaultHooks(&txn.FaultHooks{BeforeRenew: func(context.Context) { hookCalls.Add(1) }})
	defer txn.SetFaultHooks(nil)

	err := process(e.ctx, t, p, c, recs)
	require.Error(t, err)
	t.Logf("commit: %v", err)
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.Positive(t, refused.Load())
	require.Zero(t, commits.Load(), "EndTxn(COMMIT) sent though the claims were refused")
	require.Zero(t, renews.Load(), "a RENEW was sent though the claims were refused")
	require.Zero(t, hookCalls.Load())
	stop()
	require.NoError(t, p.AbortTransaction(e.ctx))
	_, _ = c.Release(recs)
	require.NoError(t, process(e.ctx, t, p, c, pollRecords(e.ctx, t, c, inputs)))
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
}
