package shareconsumer_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/ledger"
	"github.com/kshare-go/kshare/internal/txn"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/wire"
)

const ledgerTopic = "claims"

// ledgerConsumer is a Transactional consumer of "in" in group g that
// resolves its records against the test's claim ledger.
func (e *env) ledgerConsumer(opts ...shareconsumer.Opt) *shareconsumer.Consumer {
	e.t.Helper()
	return e.consumer("g", "in", append([]shareconsumer.Opt{shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.ShareLedger(ledgerTopic)}, opts...)...)
}

// ledgerProducer is a transactional producer that writes claims to the
// test's ledger.
func (e *env) ledgerProducer(txnID string) *producer.Producer {
	e.t.Helper()
	return e.producer(txnID, producer.ShareLedger(ledgerTopic))
}

// exactlyOnce is the verdict on the committed outputs of inputs values
// v0..v<inputs-1>: "OK", or "FAILED" with what is duplicated or missing.
func exactlyOnce(outputs map[string]int, inputs int) (verdict string, duplicates, missing int) {
	var dups []string
	for i := range inputs {
		switch n := outputs[fmt.Sprintf("out-v%d", i)]; {
		case n == 0:
			missing++
		case n > 1:
			duplicates += n - 1
			dups = append(dups, fmt.Sprintf("v%d x%d", i, n))
		}
	}
	if duplicates == 0 && missing == 0 {
		return "exactly-once: OK", 0, 0
	}
	sort.Strings(dups)
	return fmt.Sprintf("exactly-once: FAILED (%d duplicates %v, %d missing)", duplicates, dups, missing), duplicates, missing
}

// The README's loop in ledger mode, on a cluster without KIP-1289, with
// two workers: every input's output commits exactly once, every input is
// acknowledged, and no KIP-1289 request is sent.
func TestLedgerLoopExactlyOnce(t *testing.T) {
	const inputs = 90
	e := txnEnv(t, inputs, broker.ShareTxnAPIs(false))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var mu sync.Mutex
	done := make(map[string]bool)
	var wg sync.WaitGroup
	for w := range 2 {
		c := e.ledgerConsumer(shareconsumer.MaxPollRecords(7))
		p := e.ledgerProducer(fmt.Sprintf("w%d", w))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				recs, err := c.Poll(ctx)
				if err != nil {
					if ctx.Err() == nil {
						t.Logf("worker %d: poll: %v", w, err) // abortable hiccups pass
					}
					continue
				}
				if err := process(ctx, t, p, c, recs); err != nil {
					if ctx.Err() == nil {
						t.Errorf("worker %d: %v", w, err)
					} else {
						t.Logf("worker %d: transaction at the end: %v", w, err)
					}
					actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
					_ = p.AbortTransaction(actx)
					acancel()
					_, _ = c.Release(recs)
					continue
				}
				mu.Lock()
				for _, r := range recs {
					done[string(r.Value)] = true
				}
				if len(done) == inputs {
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, done, inputs)
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
	e.allAcknowledged("g", "in", map[int32]int64{0: inputs / 3, 1: inputs / 3, 2: inputs / 3})
}

// Without the ledger option, a cluster without KIP-1289 still refuses
// the call, and the error names the way out.
func TestLedgerUnsupportedNamesTheOption(t *testing.T) {
	e := txnEnv(t, 3, broker.ShareTxnAPIs(false))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	p := e.producer("plain")
	recs := pollRecords(e.ctx, t, c, 3)
	require.NoError(t, p.BeginTransaction())
	err := p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata())
	require.ErrorIs(t, err, kshare.ErrUnsupported)
	require.Contains(t, err.Error(), "producer.ShareLedger")
	require.NoError(t, p.AbortTransaction(e.ctx))
}

// A ledger transaction whose consumer does not name the ledger is refused
// (the consumer would not resolve the records), and so is a ledger
// consumer outside Transactional mode.
func TestLedgerMisconfigured(t *testing.T) {
	_, err := shareconsumer.New(shareconsumer.SeedBrokers("127.0.0.1:1"), shareconsumer.Group("g"), shareconsumer.Topics("in"), shareconsumer.ShareLedger(ledgerTopic))
	require.ErrorIs(t, err, kshare.ErrUsage)

	e := txnEnv(t, 3, broker.ShareTxnAPIs(false))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	p := e.ledgerProducer("w")
	recs := pollRecords(e.ctx, t, c, 3)
	require.NoError(t, p.BeginTransaction())
	err = p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata())
	require.ErrorIs(t, err, kshare.ErrUsage)
	require.Contains(t, err.Error(), "ShareLedger")
	require.ErrorIs(t, p.CommitTransaction(e.ctx), kshare.ErrAbortable)
	require.NoError(t, p.AbortTransaction(e.ctx))
}

// A worker whose plain acknowledgement after the commit is lost (its
// connection drops as it sends it, and then it dies): the records come
// back to the group, and the next consumer finds their committed claims
// in the ledger and acknowledges them itself; the application never sees
// them again and no output is written twice.
func TestLedgerResolvesAfterLostAcknowledgement(t *testing.T) {
	const inputs = 12
	e := txnEnv(t, inputs, broker.ShareTxnAPIs(false), broker.ShareLockDuration(10*time.Minute))
	c1 := e.ledgerConsumer()
	p1 := e.ledgerProducer("w1")
	recs := pollRecords(e.ctx, t, c1, inputs)
	member := c1.GroupMetadata().MemberID

	var dropped atomic.Int32
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if r, ok := req.(*kmsg.ShareAcknowledgeRequest); ok && !r.IsRenewAck && r.MemberID != nil && *r.MemberID == member {
			for _, tp := range r.Topics {
				for _, p := range tp.Partitions {
					for _, b := range p.AcknowledgementBatches {
						if len(b.AcknowledgeTypes) > 0 && b.AcknowledgeTypes[0] == int8(wire.AckAccept) {
							dropped.Add(1)
							return broker.FaultAction{Fault: broker.DropRequest}
						}
					}
				}
			}
		}
		return broker.FaultAction{}
	})
	defer stop()
	require.NoError(t, process(e.ctx, t, p1, c1, recs))
	e.eventually("the post-commit acknowledgements were dropped", func() bool { return dropped.Load() > 0 })
	_ = c1.Close(e.ctx) // the worker dies (its acknowledgements failed)
	stop()

	c2 := e.ledgerConsumer()
	for c2.Metrics().ResolvedFromLedger < inputs {
		pctx, cancel := context.WithTimeout(e.ctx, time.Second)
		got, err := c2.Poll(pctx)
		cancel()
		require.Empty(t, got, "a record whose output committed was handed to the application again")
		if err != nil && !errors.Is(err, kshare.ErrAbortable) {
			require.NoError(t, err)
		}
		require.NoError(t, e.ctx.Err())
	}
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
	e.allAcknowledged("g", "in", map[int32]int64{0: inputs / 3, 1: inputs / 3, 2: inputs / 3})
	m := c2.Metrics()
	require.Positive(t, m.LedgerResolves, "every Poll that was delivered records resolved them")
	require.Positive(t, m.LedgerResolveTime)
}

// staleHolder sets up the race the commit-time renewal closes: worker 1
// polls every input, then the input's leadership moves while worker 1's
// share session is held up (as if the worker were paused), so that its
// locks are lost without it knowing. Worker 2 gets the records from the
// new leader, finds no claim, processes and commits them. Then worker 1
// resumes and writes its outputs and claims: it returns worker 1's
// transaction ready to commit, and the inputs. With andBack, leadership
// comes back to the first leader before worker 2 polls: the
// share-partition is loaded again there without worker 1's locks while
// worker 1's session stands, and worker 1's renewal of the records worker
// 2 has acknowledged is answered with success (they are below the
// share-partition's start offset).
func staleHolder(t *testing.T, e *env, inputs int, andBack bool) (p1 *producer.Producer) {
	// A long MaxWait: the share requests held up below do not time out
	// in the client, which would tell it that its session is gone.
	c1 := e.ledgerConsumer(shareconsumer.MaxWait(time.Minute))
	p1 = e.ledgerProducer("w1")
	recs := pollRecords(e.ctx, t, c1, inputs)
	member := c1.GroupMetadata().MemberID

	// Hold worker 1's share requests from now until it has written its
	// claims; those that passed before are answered before the move.
	resume := make(chan struct{})
	var holding atomic.Bool
	var inflight atomic.Int32
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		var m *string
		switch r := req.(type) {
		case *kmsg.ShareFetchRequest:
			m = r.MemberID
		case *kmsg.ShareAcknowledgeRequest:
			m = r.MemberID
		}
		if m == nil || *m != member {
			return broker.FaultAction{}
		}
		// Counted before the check: a request either is held, or is
		// counted until the node has answered it.
		inflight.Add(1)
		if holding.Load() {
			inflight.Add(-1)
			select {
			case <-resume:
			case <-e.ctx.Done():
			}
			return broker.FaultAction{}
		}
		return broker.FaultAction{AfterHandling: func(kmsg.Response) { inflight.Add(-1) }}
	})
	t.Cleanup(stop)
	holding.Store(true)
	e.eventually("worker 1's earlier share requests answered", func() bool { return inflight.Load() == 0 })
	leader, err := e.c.Leader("in", 0)
	require.NoError(t, err)
	var to int32
	for _, n := range e.c.NodeIDs() {
		if n != leader {
			to = n
		}
	}
	require.NoError(t, e.c.MoveLeader("in", 0, to))
	if andBack {
		require.NoError(t, e.c.MoveLeader("in", 0, leader))
	}

	c2 := e.ledgerConsumer()
	p2 := e.ledgerProducer("w2")
	again := pollRecords(e.ctx, t, c2, inputs)
	require.NoError(t, process(e.ctx, t, p2, c2, again))

	require.NoError(t, p1.BeginTransaction())
	for _, r := range recs {
		p1.Produce(e.ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + string(r.Value))}, nil)
	}
	require.NoError(t, p1.SendShareAcksToTransaction(e.ctx, c1.Acks(recs, kshare.AckAccept), c1.GroupMetadata()),
		"worker 1 does not know yet that its locks are gone")
	close(resume)
	stop()
	return p1
}

// ledgerRaceEnv is one input partition on two nodes, so that its
// leadership can move.
func ledgerRaceEnv(t *testing.T, inputs int) *env {
	e := newEnv(t, broker.Nodes(2), broker.ShareTxnAPIs(false), broker.ShareLockDuration(10*time.Minute))
	e.createTopic("in", 1)
	e.createTopic("out", 1)
	e.groupConfig("g")
	e.produce("in", 1, values("v", inputs)...)
	return e
}

// A worker whose locks were lost while it was held up must not commit: its
// renewal before EndTxn fails, the commit is ErrAbortable, and nothing of
// it is visible; the other worker's outputs are, exactly once.
func TestLedgerStaleHolderCannotCommit(t *testing.T) {
	const inputs = 6
	e := ledgerRaceEnv(t, inputs)
	p1 := staleHolder(t, e, inputs, false)
	err := p1.CommitTransaction(e.ctx)
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.Contains(t, err.Error(), "could not be renewed")
	require.NoError(t, p1.AbortTransaction(e.ctx))
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
}

// The leader comes back between two requests of the stale worker's
// session: its renewal succeeds, in time, at the leader that forgot its
// locks, so the renewal alone would let it commit. The leader epoch it
// saw before acquiring the records differs from the one the leader
// answers after the renewal, and the commit fails.
func TestLedgerLeaderAwayAndBackCannotCommit(t *testing.T) {
	const inputs = 6
	e := ledgerRaceEnv(t, inputs)
	p1 := staleHolder(t, e, inputs, true)
	err := p1.CommitTransaction(e.ctx)
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.Contains(t, err.Error(), "leader epoch")
	require.NoError(t, p1.AbortTransaction(e.ctx))
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
}

// The same race with the renewal check skipped (a test-only hook): the
// stale worker commits, and the verification sees every input's output
// twice. This is what the renewal prevents.
func TestLedgerWithoutRenewalCheckDuplicates(t *testing.T) {
	const inputs = 6
	e := ledgerRaceEnv(t, inputs)
	txn.SkipLedgerRenewal.Store(true)
	defer txn.SkipLedgerRenewal.Store(false)
	p1 := staleHolder(t, e, inputs, false)
	require.NoError(t, p1.CommitTransaction(e.ctx), "without the check the stale worker commits")
	outputs := e.readCommitted("out", inputs)
	// Both transactions committed; wait for every copy to be read.
	e.eventually("both workers' outputs read", func() bool {
		outputs = e.readCommitted("out", inputs)
		total := 0
		for _, n := range outputs {
			total += n
		}
		return total == 2*inputs
	})
	verdict, duplicates, _ := exactlyOnce(outputs, inputs)
	require.Contains(t, verdict, "FAILED")
	require.Equal(t, inputs, duplicates)

	// The ledger shows it too: both transactions committed a claim for
	// every input.
	audit := ledger.NewResolver(e.client(), ledgerTopic, "g", nil)
	n, err := audit.Ensure(e.ctx, false, 0)
	require.NoError(t, err)
	parts := make([]int32, n)
	for i := range parts {
		parts[i] = int32(i)
	}
	require.NoError(t, audit.CatchUp(e.ctx, parts))
	require.EqualValues(t, inputs, audit.Stats().Conflicts)
}

// A worker paused past its lock, after it wrote its claims: its share
// requests are held up until another member has acquired the records
// (the lock ran out at the broker). That member cannot hand them to its
// application while the paused worker's transaction is open (its claims
// hold the ledger's last stable offset back); the paused worker resumes,
// its renewal is refused, and its commit fails; it aborts, and the other
// member then processes the records, exactly once.
func TestLedgerPausedPastLockAborts(t *testing.T) {
	const inputs = 4
	e := newEnv(t, broker.ShareTxnAPIs(false), broker.ShareLockDuration(time.Second))
	e.createTopic("in", 1)
	e.createTopic("out", 1)
	e.groupConfig("g")
	e.produce("in", 1, values("v", inputs)...)

	// RenewHeldLocks keeps worker 1's locks until it stages them, however
	// slow the machine; a long MaxWait keeps its held-up requests from
	// timing out in the client.
	c1 := e.ledgerConsumer(shareconsumer.RenewHeldLocks(true), shareconsumer.MaxWait(time.Minute))
	p1 := e.ledgerProducer("w1")
	recs := pollRecords(e.ctx, t, c1, inputs)
	member1 := c1.GroupMetadata().MemberID
	c2 := e.ledgerConsumer()
	member2 := c2.GroupMetadata().MemberID

	require.NoError(t, p1.BeginTransaction())
	for _, r := range recs {
		p1.Produce(e.ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + string(r.Value))}, nil)
	}
	require.NoError(t, p1.SendShareAcksToTransaction(e.ctx, c1.Acks(recs, kshare.AckAccept), c1.GroupMetadata()))
	require.NoError(t, p1.Flush(e.ctx), "the claims are written, in the open transaction")

	// Pause worker 1; tell when worker 2 acquires the records.
	resume := make(chan struct{})
	acquired := make(chan struct{})
	var acquiredOnce sync.Once
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		switch r := req.(type) {
		case *kmsg.ShareFetchRequest:
			if r.MemberID != nil && *r.MemberID == member2 {
				return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
					if fr, ok := resp.(*kmsg.ShareFetchResponse); ok {
						for _, t := range fr.Topics {
							for _, p := range t.Partitions {
								if len(p.AcquiredRecords) > 0 {
									acquiredOnce.Do(func() { close(acquired) })
								}
							}
						}
					}
				}}
			}
			if r.MemberID != nil && *r.MemberID == member1 {
				waitOrEnd(e.ctx, resume)
			}
		case *kmsg.ShareAcknowledgeRequest:
			if r.MemberID != nil && *r.MemberID == member1 {
				waitOrEnd(e.ctx, resume)
			}
		}
		return broker.FaultAction{}
	})
	defer stop()
	type polled struct {
		recs []*kgo.Record
		err  error
	}
	got2 := make(chan polled, 1)
	go func() {
		var out []*kgo.Record
		for len(out) < inputs {
			rs, err := c2.Poll(e.ctx)
			if err != nil {
				got2 <- polled{out, err}
				return
			}
			out = append(out, rs...)
		}
		got2 <- polled{out, nil}
	}()
	select {
	case <-acquired:
	case <-e.ctx.Done():
		close(resume)
		t.Fatal("worker 2 never acquired the records")
	}
	select {
	case p := <-got2:
		close(resume)
		t.Fatalf("worker 2's Poll returned %d records (%v) while worker 1's claims were in an open transaction", len(p.recs), p.err)
	default:
	}
	close(resume) // worker 1 resumes
	err := p1.CommitTransaction(e.ctx)
	require.ErrorIs(t, err, kshare.ErrAbortable, "a worker whose lock ran out must not commit")
	require.Contains(t, err.Error(), "could not be renewed")
	require.NoError(t, p1.AbortTransaction(e.ctx))

	p := <-got2
	require.NoError(t, p.err)
	p2 := e.ledgerProducer("w2")
	require.NoError(t, process(e.ctx, t, p2, c2, p.recs))
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
	e.allAcknowledged("g", "in", map[int32]int64{0: inputs})
}

// waitOrEnd waits until ch is closed or ctx ends.
func waitOrEnd(ctx context.Context, ch <-chan struct{}) {
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// The consumer's claim index holds only claims of records the group may
// still deliver, and the ledger is truncated below them: after a first
// batch is committed and acknowledged, the next Poll prunes its claims
// and deletes them from the ledger.
func TestLedgerIndexBoundedAndTruncated(t *testing.T) {
	defer shareconsumer.SetLedgerPruneEvery(0)()
	const batch = 6
	e := newEnv(t, broker.ShareTxnAPIs(false))
	e.createTopic("in", 1)
	e.createTopic("out", 1)
	e.groupConfig("g")
	c := e.ledgerConsumer()
	p := e.ledgerProducer("w")
	e.produce("in", 1, values("v", batch)...)
	require.NoError(t, process(e.ctx, t, p, c, pollRecords(e.ctx, t, c, batch)))
	e.allAcknowledged("g", "in", map[int32]int64{0: batch})
	require.Zero(t, c.Metrics().LedgerTruncations, "nothing was prunable yet")

	e.produce("in", 1, values("w", batch)...)
	second := pollRecords(e.ctx, t, c, batch)
	m := c.Metrics()
	require.Zero(t, m.LedgerRanges, "the first batch's claims were pruned")
	require.Equal(t, int64(1), m.LedgerTruncations)
	require.NoError(t, process(e.ctx, t, p, c, second))
	starts, err := kadm.NewClient(e.admin).ListStartOffsets(e.ctx, ledgerTopic)
	require.NoError(t, err)
	truncated := false
	starts.Each(func(o kadm.ListedOffset) { truncated = truncated || o.Offset > 0 })
	require.True(t, truncated, "the ledger partition was truncated")
}
