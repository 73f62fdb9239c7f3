package shareconsumer_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
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
	"github.com/kshare-go/kshare/shareconsumer"
)

// topicID returns the id of topic.
func (e *env) topicID(topic string) [16]byte {
	e.t.Helper()
	md, err := kadm.NewClient(e.admin).ListTopics(e.ctx, topic)
	require.NoError(e.t, err)
	d, ok := md[topic]
	require.True(e.t, ok)
	require.NoError(e.t, d.Err)
	return d.ID
}

// createLedger creates the test's ledger topic with n partitions before
// any consumer does, and returns its id.
func (e *env) createLedger(n int32) [16]byte {
	e.t.Helper()
	e.createTopic(ledgerTopic, n)
	return e.topicID(ledgerTopic)
}

// isLedgerRead reports whether req is a ListOffsets or Fetch of the
// ledger (by name or id).
func isLedgerRead(req kmsg.Request, id [16]byte) bool {
	switch r := req.(type) {
	case *kmsg.ListOffsetsRequest:
		for _, t := range r.Topics {
			if t.Topic == ledgerTopic {
				return true
			}
		}
	case *kmsg.FetchRequest:
		for _, t := range r.Topics {
			if t.Topic == ledgerTopic || t.TopicID == id {
				return true
			}
		}
	}
	return false
}

// isProduceTo reports whether req is a Produce to topic (by name or id).
func isProduceTo(req kmsg.Request, topic string, id [16]byte) bool {
	r, ok := req.(*kmsg.ProduceRequest)
	if !ok {
		return false
	}
	for _, t := range r.Topics {
		if t.Topic == topic || t.TopicID == id {
			return true
		}
	}
	return false
}

// gate is a hold that a test opens once.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (g *gate) wait(ctx context.Context) {
	select {
	case <-g.ch:
	case <-ctx.Done():
	}
}

// holdLedgerReads installs a hook that holds every ledger read until the
// returned gate opens (and counts the held ones); the test opens it and
// removes the hook when it ends.
func (e *env) holdLedgerReads(id [16]byte) (*gate, *atomic.Int32) {
	g := newGate()
	var held atomic.Int32
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if isLedgerRead(req, id) {
			held.Add(1)
			g.wait(e.ctx)
		}
		return broker.FaultAction{}
	})
	e.t.Cleanup(func() { stop(); g.open() })
	return g, &held
}

// requireNoLedgerGoroutines fails if a goroutine of a ledger loop or a
// ledger read is still running.
func requireNoLedgerGoroutines(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range []string{"shareconsumer.(*Consumer).ledgerLoop", "shareconsumer.(*Consumer).resolveBuffered", "ledger.(*Resolver).CatchUp", "ledger.(*Resolver).roundLocked"} {
			if strings.Contains(g, fn) {
				t.Fatalf("a ledger goroutine outlived Close:\n%s", g)
			}
		}
	}
}

// ledgerEnv is one input partition with inputs records and an existing
// ledger of 4 partitions, whose id it returns.
func ledgerEnv(t *testing.T, inputs int, opts ...broker.Opt) (*env, [16]byte) {
	e := newEnv(t, append([]broker.Opt{broker.ShareTxnAPIs(false)}, opts...)...)
	e.createTopic("in", 1)
	e.createTopic("out", 1)
	e.groupConfig("g")
	id := e.createLedger(4)
	e.produce("in", 1, values("v", inputs)...)
	return e, id
}

// Close while a ledger round is held at the ledger's leader (an
// unreachable or hung ledger): Close returns, the waiting Poll returns
// ErrClosed without records, and no ledger goroutine is left behind.
func TestLedgerCloseWhileRoundHeld(t *testing.T) {
	e, id := ledgerEnv(t, 3)
	_, held := e.holdLedgerReads(id)
	c := e.ledgerConsumer()
	polled := make(chan error, 1)
	go func() {
		recs, err := c.Poll(e.ctx)
		if len(recs) > 0 {
			err = fmt.Errorf("Poll returned %d records no round resolved", len(recs))
		}
		polled <- err
	}()
	e.eventually("a ledger round is held", func() bool { return held.Load() > 0 })
	cctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	err := c.Close(cctx)
	t.Logf("Close: %v", err)
	require.NoError(t, cctx.Err(), "Close used up its context")
	require.ErrorIs(t, <-polled, kshare.ErrClosed)
	requireNoLedgerGoroutines(t)
}

// Close while a round waits for an open transaction that wrote a claim
// before the records' acquisition: Close returns, and nothing is left
// behind.
func TestLedgerCloseWhileRoundWaitsForOpenTxn(t *testing.T) {
	e, id := ledgerEnv(t, 3)
	inID := e.topicID("in")
	w := e.client(kgo.TransactionalID("other"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	cl := ledger.Claim{Group: "g", Topic: "in", TopicID: inID, Partition: 0, TransactionalID: "other", Ranges: []ledger.Range{{First: 100, Last: 100, Type: ledger.TypeAccept}}}
	v, err := cl.Encode()
	require.NoError(t, err)
	require.NoError(t, w.BeginTransaction())
	require.NoError(t, w.ProduceSync(e.ctx, &kgo.Record{Topic: ledgerTopic, Partition: cl.Input().LedgerPartition(4), Value: v}).FirstErr())
	defer func() { _ = w.EndTransaction(context.WithoutCancel(e.ctx), kgo.TryAbort) }()

	var fetches atomic.Int32
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if _, ok := req.(*kmsg.FetchRequest); ok && isLedgerRead(req, id) {
			fetches.Add(1)
		}
		return broker.FaultAction{}
	})
	defer stop()
	c := e.ledgerConsumer()
	polled := make(chan error, 1)
	go func() {
		recs, err := c.Poll(e.ctx)
		if len(recs) > 0 {
			err = fmt.Errorf("Poll returned %d records while the ledger's transaction was open", len(recs))
		}
		polled <- err
	}()
	e.eventually("the round waits for the open transaction", func() bool { return fetches.Load() >= 3 })
	unresolved, _ := shareconsumer.LedgerBuffered(c)
	require.Equal(t, 1, unresolved)
	cctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	t.Logf("Close: %v", c.Close(cctx))
	require.NoError(t, cctx.Err(), "Close used up its context")
	require.ErrorIs(t, <-polled, kshare.ErrClosed)
	requireNoLedgerGoroutines(t)
}

// A Poll whose ctx ends while the round resolving its records is held
// returns ErrAbortable; the records stay buffered (nothing released), and
// once the ledger answers a later Poll returns each exactly once.
func TestLedgerShortPollWhileRoundHeldKeepsRecords(t *testing.T) {
	const inputs = 5
	e, id := ledgerEnv(t, inputs)
	g, held := e.holdLedgerReads(id)
	c := e.ledgerConsumer()
	for held.Load() == 0 {
		pctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
		recs, err := c.Poll(pctx)
		cancel()
		require.Empty(t, recs, "records returned before their round ended")
		require.ErrorIs(t, err, kshare.ErrAbortable)
		require.NoError(t, e.ctx.Err())
	}
	for range 3 { // more short Polls while the round is held
		pctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
		recs, err := c.Poll(pctx)
		cancel()
		require.Empty(t, recs)
		require.ErrorIs(t, err, kshare.ErrAbortable)
	}
	unresolved, _ := shareconsumer.LedgerBuffered(c)
	require.Equal(t, 1, unresolved, "the records wait in the buffer")
	g.open()
	seen := make(map[string]int)
	var all []*kgo.Record
	for len(seen) < inputs {
		recs, err := c.Poll(e.ctx)
		require.NoError(t, err)
		for _, r := range recs {
			seen[string(r.Value)]++
			all = append(all, r)
		}
	}
	for v, n := range seen {
		require.Equal(t, 1, n, "%s returned %d times", v, n)
	}
	m := c.Metrics()
	require.Zero(t, m.ReleasedUnseen, "nothing was released")
	require.Zero(t, m.Redelivered)
	p := e.ledgerProducer("w")
	require.NoError(t, process(e.ctx, t, p, c, all))
	verdict, _, _ := exactlyOnce(e.readCommitted("out", inputs), inputs)
	require.Equal(t, "exactly-once: OK", verdict)
	e.allAcknowledged("g", "in", map[int32]int64{0: inputs})
}

// Two sessions: the first one's records start a round, which is held at
// the ledger; meanwhile a claim for the second partition's record is
// committed (on a ledger partition that round does not read) and only
// then the second session acquires that record, during the round. The
// round must not count the second session's records as resolved: a later
// round, whose ListOffsets is after their acquisition, finds the claim,
// and the record is acknowledged as it says and never returned.
func TestLedgerResultBufferedDuringRoundGetsItsOwnRound(t *testing.T) {
	e := newEnv(t, broker.Nodes(2), broker.ShareTxnAPIs(false), broker.ShareLockDuration(10*time.Minute))
	e.createTopic("in", 2)
	e.createTopic("out", 1)
	e.groupConfig("g")
	inID := e.topicID("in")
	// A ledger whose partitions for input partitions 0 and 1 differ.
	var n int32
	for n = 2; (ledger.Input{Group: "g", TopicID: inID, Partition: 0}).LedgerPartition(n) == (ledger.Input{Group: "g", TopicID: inID, Partition: 1}).LedgerPartition(n); n++ {
	}
	id := e.createLedger(n)
	l0, err := e.c.Leader("in", 0)
	require.NoError(t, err)
	l1, err := e.c.Leader("in", 1)
	require.NoError(t, err)
	if l0 == l1 {
		for _, node := range e.c.NodeIDs() {
			if node != l0 {
				require.NoError(t, e.c.MoveLeader("in", 1, node))
				l1 = node
			}
		}
	}
	cl := e.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, cl.ProduceSync(e.ctx, &kgo.Record{Topic: "in", Partition: 0, Value: []byte("a")}, &kgo.Record{Topic: "in", Partition: 1, Value: []byte("x")}).FirstErr())

	fetchGate, roundGate := newGate(), newGate()
	var roundHeld, fetch1Held atomic.Bool
	stop := e.c.InjectFaults(func(node int32, _ string, req kmsg.Request) broker.FaultAction {
		switch r := req.(type) {
		case *kmsg.ShareFetchRequest:
			if node == l1 && !fetch1Held.Swap(true) {
				fetchGate.wait(e.ctx) // the second session's first fetch
			}
		case *kmsg.FetchRequest:
			if isLedgerRead(r, id) && !roundHeld.Swap(true) {
				roundGate.wait(e.ctx) // the first round's Fetch
			}
		}
		return broker.FaultAction{}
	})
	t.Cleanup(func() { stop(); fetchGate.open(); roundGate.open() })

	c := e.ledgerConsumer()
	type polled struct {
		recs []*kgo.Record
		err  error
	}
	got := make(chan polled, 1)
	go func() {
		recs, err := c.Poll(e.ctx)
		got <- polled{recs, err}
	}()
	e.eventually("the first round is held", func() bool { return roundHeld.Load() && fetch1Held.Load() })
	// The claim commits before the second session acquires x.
	w := e.client(kgo.TransactionalID("earlier"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	claim := ledger.Claim{Group: "g", Topic: "in", TopicID: inID, Partition: 1, TransactionalID: "earlier", Ranges: []ledger.Range{{First: 0, Last: 0, Type: ledger.TypeAccept}}}
	v, err := claim.Encode()
	require.NoError(t, err)
	require.NoError(t, w.BeginTransaction())
	require.NoError(t, w.ProduceSync(e.ctx, &kgo.Record{Topic: ledgerTopic, Partition: claim.Input().LedgerPartition(n), Value: v}).FirstErr())
	require.NoError(t, w.EndTransaction(e.ctx, kgo.TryCommit))
	fetchGate.open()
	e.eventually("both sessions' fetches are buffered, unresolved", func() bool {
		unresolved, _ := shareconsumer.LedgerBuffered(c)
		return unresolved == 2
	})
	roundGate.open()
	var recs []*kgo.Record
	p := <-got
	require.NoError(t, p.err)
	recs = append(recs, p.recs...)
	for c.Metrics().ResolvedFromLedger == 0 {
		pctx, cancel := context.WithTimeout(e.ctx, 500*time.Millisecond)
		rs, err := c.Poll(pctx)
		cancel()
		if err != nil {
			require.ErrorIs(t, err, kshare.ErrAbortable)
		}
		recs = append(recs, rs...)
		require.NoError(t, e.ctx.Err())
	}
	for _, r := range recs {
		require.NotEqual(t, "x", string(r.Value), "a record whose claim committed before its acquisition was returned")
	}
	e.eventually("x acknowledged from its claim", func() bool { return e.startOffsets("g", "in")[1] == 1 })
}

// A ledger that stays unreachable for one consumer (every read of it
// fails at the connection; the input cluster is fine): Poll tells the
// application why it gets nothing, with an error that names the ledger
// and its last failure, and the fetched records are not returned
// unresolved (they stay buffered, renewed: releasing them would cost
// each a delivery, every lock duration, until the group archived them).
func TestLedgerUnreachableIsNamedByPoll(t *testing.T) {
	const inputs = 4
	e, id := ledgerEnv(t, inputs, broker.ShareLockDuration(time.Second))
	var dropped atomic.Int32
	stop := e.c.InjectFaults(func(_ int32, client string, req kmsg.Request) broker.FaultAction {
		if client == "c1" && isLedgerRead(req, id) {
			dropped.Add(1)
			return broker.FaultAction{Fault: broker.DropRequest}
		}
		return broker.FaultAction{}
	})
	defer stop()
	c := e.ledgerConsumer(shareconsumer.KgoOpts(kgo.ClientID("c1")))
	const enough = 30 // failed reads: with the 1s backoff cap, several seconds, many lock durations
	var last error
	for dropped.Load() < enough {
		pctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
		recs, err := c.Poll(pctx)
		cancel()
		require.Empty(t, recs, "records returned that no ledger read resolved")
		require.NoError(t, e.ctx.Err())
		require.Error(t, err)
		last = err
		if strings.Contains(err.Error(), ledgerTopic) {
			t.Logf("Poll reported the ledger after %d failed reads: %v", dropped.Load(), err)
			return
		}
	}
	unresolved, _ := shareconsumer.LedgerBuffered(c)
	t.Fatalf("after %d failed ledger reads Poll still says only %q; %d fetch(es) held unresolved (released: %d)",
		dropped.Load(), last, unresolved, c.Metrics().ReleasedUnseen)
}

// The ledger partition's leadership moves while a round's requests are
// held at the old leader: the round retries at the new leader (NOT_LEADER,
// metadata, then OFFSET_NOT_AVAILABLE until the new leader caught up)
// and resolves the records; a claim committed before the acquisition is
// honoured, the other records are returned once each.
func TestLedgerLeaderMovesMidRound(t *testing.T) {
	const inputs = 4
	e := newEnv(t, broker.Nodes(2), broker.ShareTxnAPIs(false), broker.ShareLockDuration(10*time.Minute))
	e.createTopic("in", 1)
	e.createTopic("out", 1)
	e.groupConfig("g")
	id := e.createLedger(1)
	inID := e.topicID("in")
	e.produce("in", 1, values("v", inputs)...)
	// A claim of offset 0, committed before anything is acquired.
	w := e.client(kgo.TransactionalID("earlier"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	claim := ledger.Claim{Group: "g", Topic: "in", TopicID: inID, Partition: 0, TransactionalID: "earlier", Ranges: []ledger.Range{{First: 0, Last: 0, Type: ledger.TypeAccept}}}
	v, err := claim.Encode()
	require.NoError(t, err)
	require.NoError(t, w.BeginTransaction())
	require.NoError(t, w.ProduceSync(e.ctx, &kgo.Record{Topic: ledgerTopic, Partition: 0, Value: v}).FirstErr())
	require.NoError(t, w.EndTransaction(e.ctx, kgo.TryCommit))

	g := newGate()
	var held atomic.Int32
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if isLedgerRead(req, id) && held.Load() < 2 {
			held.Add(1)
			g.wait(e.ctx)
		}
		return broker.FaultAction{}
	})
	t.Cleanup(func() { stop(); g.open() })
	c := e.ledgerConsumer()
	type polled struct {
		recs []*kgo.Record
		err  error
	}
	got := make(chan polled, 1)
	go func() {
		var out []*kgo.Record
		for len(out) < inputs-1 {
			rs, err := c.Poll(e.ctx)
			if err != nil {
				got <- polled{out, err}
				return
			}
			out = append(out, rs...)
		}
		got <- polled{out, nil}
	}()
	e.eventually("the round is held at the old leader", func() bool { return held.Load() >= 2 })
	old, err := e.c.Leader(ledgerTopic, 0)
	require.NoError(t, err)
	for _, node := range e.c.NodeIDs() {
		if node != old {
			require.NoError(t, e.c.MoveLeader(ledgerTopic, 0, node))
		}
	}
	g.open()
	p := <-got
	require.NoError(t, p.err)
	seen := make(map[string]int)
	for _, r := range p.recs {
		seen[string(r.Value)]++
	}
	require.Zero(t, seen["v0"], "the claimed record was returned")
	for i := 1; i < inputs; i++ {
		require.Equal(t, 1, seen[fmt.Sprintf("v%d", i)])
	}
	require.Equal(t, int64(1), c.Metrics().ResolvedFromLedger)
}

// A ledger read fails for a moment (its leader restarts: the connection
// drops) while metadata, from a broker that has not caught up, briefly
// does not know the ledger topic: six answers, well under a second. The
// ledger exists all along, and a missing subscribed topic is reported
// only after metadata said so for 5s; the ledger is not declared deleted
// (ErrUsage, the records released) on such a blip.
func TestLedgerMetadataBlipIsNotUsage(t *testing.T) {
	const inputs = 3
	e, id := ledgerEnv(t, inputs)
	var blip atomic.Bool
	var blipped atomic.Int32
	stop := e.c.InjectFaults(func(_ int32, client string, req kmsg.Request) broker.FaultAction {
		if client != "c1" || !blip.Load() {
			return broker.FaultAction{}
		}
		if isLedgerRead(req, id) {
			return broker.FaultAction{Fault: broker.DropRequest}
		}
		if r, ok := req.(*kmsg.MetadataRequest); ok && len(r.Topics) == 1 && r.Topics[0].Topic != nil && *r.Topics[0].Topic == ledgerTopic {
			return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
				mr := resp.(*kmsg.MetadataResponse)
				for i := range mr.Topics {
					mr.Topics[i].ErrorCode = 3 // UNKNOWN_TOPIC_OR_PARTITION
					mr.Topics[i].Partitions = nil
				}
				if blipped.Add(1) >= 6 {
					blip.Store(false) // caught up
				}
			}}
		}
		return broker.FaultAction{}
	})
	defer stop()
	c := e.ledgerConsumer(shareconsumer.KgoOpts(kgo.ClientID("c1")))
	require.NoError(t, process(e.ctx, t, e.ledgerProducer("w"), c, pollRecords(e.ctx, t, c, inputs)))
	e.produce("in", 1, values("w", inputs)...)
	blip.Store(true)
	seen := make(map[string]int)
	for len(seen) < inputs {
		recs, err := c.Poll(e.ctx)
		if err != nil {
			require.NotErrorIs(t, err, kshare.ErrUsage, "an existing ledger declared unreadable after %d metadata answers", blipped.Load())
			require.ErrorIs(t, err, kshare.ErrAbortable)
			require.NoError(t, e.ctx.Err())
		}
		for _, r := range recs {
			seen[string(r.Value)]++
		}
	}
	require.Zero(t, c.Metrics().ReleasedUnseen)
}

// A round that settles buffered records while their lock looks gone (the
// consumer's renewal is still in flight) looks them up all the same: the
// renewal may give the lock back, and a Poll after that must not return
// a record that a committed claim covers (an earlier holder committed it;
// its acknowledgement was lost). The broker's lock is an hour; the
// answers tell the consumer 300ms, and a renewal's answer an hour again.
func TestLedgerRoundLooksUpRecordsWhoseLockLooksGone(t *testing.T) {
	const inputs = 4
	e, id := ledgerEnv(t, inputs, broker.ShareLockDuration(time.Hour))
	inID := e.topicID("in")
	in := ledger.Input{Group: "g", TopicID: inID, Partition: 0}
	claim := ledger.Claim{Group: "g", Topic: "in", TopicID: inID, Partition: 0, TransactionalID: "earlier",
		Ranges: []ledger.Range{{First: 0, Last: inputs - 1, Type: ledger.TypeAccept}}}
	v, err := claim.Encode()
	require.NoError(t, err)
	w := e.client(kgo.TransactionalID("earlier"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, w.BeginTransaction())
	require.NoError(t, w.ProduceSync(e.ctx, &kgo.Record{Topic: ledgerTopic, Partition: in.LedgerPartition(4), Value: v}).FirstErr())
	require.NoError(t, w.EndTransaction(e.ctx, kgo.TryCommit))

	ledgerGate, renewGate := newGate(), newGate()
	var fetchedAt atomic.Int64
	var ledgerReads, renews atomic.Int32
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		switch r := req.(type) {
		case *kmsg.ShareFetchRequest:
			return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
				if sf, ok := resp.(*kmsg.ShareFetchResponse); ok {
					sf.AcquisitionLockTimeoutMillis = 300
					fetchedAt.CompareAndSwap(0, time.Now().UnixNano())
				}
			}}
		case *kmsg.ShareAcknowledgeRequest:
			if r.IsRenewAck {
				renews.Add(1)
				renewGate.wait(e.ctx)
				return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
					if sa, ok := resp.(*kmsg.ShareAcknowledgeResponse); ok {
						sa.AcquisitionLockTimeoutMillis = int32(time.Hour / time.Millisecond)
					}
				}}
			}
		default:
			if isLedgerRead(req, id) {
				ledgerReads.Add(1)
				ledgerGate.wait(e.ctx)
			}
		}
		return broker.FaultAction{}
	})
	t.Cleanup(func() { stop(); ledgerGate.open(); renewGate.open() })
	c := e.ledgerConsumer()

	// The first Poll starts the fetching; it gives up once the round is
	// held at the ledger, and the records stay buffered.
	pctx, cancel := context.WithCancel(e.ctx)
	polled := make(chan []*kgo.Record, 1)
	go func() {
		recs, _ := c.Poll(pctx)
		polled <- recs
	}()
	e.eventually("the round reads the ledger", func() bool { return ledgerReads.Load() > 0 })
	cancel()
	require.Empty(t, <-polled)
	e.eventually("the buffered records' renewal is in flight", func() bool { return renews.Load() > 0 })
	// Past the lock the consumer was told of (from a time no earlier than
	// the fetch was sent), whatever the machine's speed.
	time.Sleep(time.Until(time.Unix(0, fetchedAt.Load()).Add(400 * time.Millisecond)))
	ledgerGate.open()
	e.eventually("the round settled", func() bool { return c.Metrics().LedgerResolves > 0 })
	renewGate.open()
	e.eventually("the renewal gave the lock back", func() bool { return c.Metrics().LocksRenewed > 0 })

	pctx, cancel = context.WithTimeout(e.ctx, 500*time.Millisecond)
	defer cancel()
	recs, err := c.Poll(pctx)
	require.Empty(t, recs, "Poll returned records that a committed claim covers, never looked up")
	require.ErrorIs(t, err, kshare.ErrAbortable)
}
