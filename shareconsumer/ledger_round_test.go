package shareconsumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/ledger"
	"github.com/kshare-go/kshare/shareconsumer"
)

// holdLedger opens a transaction that writes a record (not a claim) to
// every partition of the test's ledger and leaves it open: until it ends,
// no read_committed read passes it, so every ledger lookup waits. It
// returns the function that aborts it.
func (e *env) holdLedger() (abort func()) {
	e.t.Helper()
	e.createTopic(ledgerTopic, ledger.DefaultPartitions)
	cl := e.client(kgo.TransactionalID("ledger-holder"), kgo.TransactionTimeout(5*time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(e.t, cl.BeginTransaction())
	for p := range int32(ledger.DefaultPartitions) {
		require.NoError(e.t, cl.ProduceSync(e.ctx, &kgo.Record{Topic: ledgerTopic, Partition: p, Value: []byte("not a claim")}).FirstErr())
	}
	return func() { require.NoError(e.t, cl.EndTransaction(e.ctx, kgo.TryAbort)) }
}

// startRound polls c, cutting each Poll short, until a ledger round of c
// waits for the ledger (held back by holdLedger).
func startRound(t *testing.T, e *env, c *shareconsumer.Consumer) {
	t.Helper()
	for !shareconsumer.RoundRunning(c) {
		pctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
		_, err := c.Poll(pctx)
		cancel()
		require.ErrorIs(t, err, kshare.ErrAbortable)
		require.NoError(t, e.ctx.Err())
	}
}

// Polls cut short while the ledger lookup waits, past several lock
// durations, cost the records nothing: the lookup goes on, their locks
// are renewed, none is released, and once the ledger can be read the next
// Poll returns every record on its first delivery. (Releasing them at
// each cut, as Poll once did, took a source woken for its checkpoints
// every 50ms to the delivery limit with nothing processed.)
func TestLedgerPollCutShortKeepsTheRecords(t *testing.T) {
	const inputs = 12
	e := txnEnv(t, inputs, broker.ShareTxnAPIs(false), broker.ShareLockDuration(time.Second))
	abort := e.holdLedger()
	c := e.ledgerConsumer()
	cuts := 0
	for {
		m := c.Metrics()
		require.Zero(t, m.Released+m.ReleasedUnseen, "records released while their lookup waited (after %d cut-short Polls)", cuts)
		if m.LocksRenewed >= 3*inputs {
			break // past several lock durations
		}
		pctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
		recs, err := c.Poll(pctx)
		cancel()
		require.ErrorIs(t, err, kshare.ErrAbortable, "Poll returned %d records while the ledger could not be read", len(recs))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, e.ctx.Err())
		cuts++
	}
	abort()
	got := pollRecords(e.ctx, t, c, inputs)
	for _, r := range got {
		n, ok := c.DeliveryCount(r)
		require.True(t, ok)
		require.EqualValues(t, 1, n, "record %s delivered again after %d cut-short Polls", r.Value, cuts)
	}
	require.Zero(t, c.Metrics().Redelivered)
}

// A lookup that cannot read the ledger within the round's bound gives its
// records back and fails the Poll waiting for it, naming the cause; the
// records are delivered again once the ledger can be read.
func TestLedgerRoundTimesOut(t *testing.T) {
	const inputs = 6
	defer shareconsumer.SetLedgerRoundTimeout(500 * time.Millisecond)()
	e := txnEnv(t, inputs, broker.ShareTxnAPIs(false))
	abort := e.holdLedger()
	c := e.ledgerConsumer()
	var err error
	for err == nil {
		var recs []*kgo.Record
		recs, err = c.Poll(e.ctx)
		require.Empty(t, recs, "records returned while the ledger could not be read")
	}
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "the claim ledger was not read within 500ms")
	require.NoError(t, e.ctx.Err())
	m := c.Metrics()
	released := m.ReleasedUnseen
	require.Positive(t, released, "the timed-out round released its records")
	require.Zero(t, m.Released+m.RecordsDelivered, "no record was returned, so none counts as returned or released after it")
	abort()
	again := 0
	for _, r := range pollRecords(e.ctx, t, c, inputs) {
		if n, _ := c.DeliveryCount(r); n > 1 {
			again++
		}
	}
	require.EqualValues(t, released, again, "records delivered again: those the timed-out round released")
}

// Close while a ledger lookup waits ends it: Close returns, the records
// go back to the group, and no goroutine is left (TestMain checks).
func TestLedgerCloseDuringRound(t *testing.T) {
	const inputs = 6
	e := txnEnv(t, inputs, broker.ShareTxnAPIs(false))
	abort := e.holdLedger()
	defer func() { abort() }()
	c := e.ledgerConsumer()
	startRound(t, e, c)
	require.NoError(t, c.Close(e.ctx))
	m := c.Metrics()
	require.Zero(t, m.RecordsDelivered+m.Released, "Close released records Poll never returned")
	_, err := c.Poll(e.ctx)
	require.ErrorIs(t, err, kshare.ErrClosed)
	c2 := e.ledgerConsumer()
	abort()
	abort = func() {}
	pollRecords(e.ctx, t, c2, inputs)
}

// The ledger lookup of records fetched ahead starts when they arrive, not
// when the next Poll asks for them: it runs while the application works on
// what the last Poll returned. One Poll is made, and a second lookup ends
// without another; the next Poll takes its outcome.
func TestLedgerLookupRunsWhileTheApplicationWorks(t *testing.T) {
	const inputs = 30
	e := txnEnv(t, inputs, broker.ShareTxnAPIs(false))
	c := e.ledgerConsumer(shareconsumer.MaxPollRecords(5))
	first, err := c.Poll(e.ctx)
	require.NoError(t, err)
	require.NotEmpty(t, first)
	e.eventually("a lookup of the records fetched ahead ends with no Poll waiting", func() bool {
		return c.Metrics().LedgerResolves >= 2 && !shareconsumer.RoundRunning(c)
	})
	waited := c.Metrics().LedgerPollWait
	next, err := c.Poll(e.ctx)
	require.NoError(t, err)
	require.NotEmpty(t, next, "the next Poll hands over what the lookup kept")
	require.Equal(t, waited, c.Metrics().LedgerPollWait, "the next Poll did not wait for a lookup")
	for _, r := range next {
		n, ok := c.DeliveryCount(r)
		require.True(t, ok)
		require.EqualValues(t, 1, n)
	}
}

// Records whose lookup ran ahead of an application that then stops polling
// are not kept from the group: once MaxPollInterval has passed, their
// locks run out unrenewed and another consumer gets every record.
func TestLedgerLookupAheadOfAnIdleApplicationLetsGo(t *testing.T) {
	const inputs = 30
	e := txnEnv(t, inputs, broker.ShareTxnAPIs(false), broker.ShareLockDuration(2*time.Second))
	c1 := e.ledgerConsumer(shareconsumer.MaxPollRecords(5), shareconsumer.MaxPollInterval(500*time.Millisecond))
	_, err := c1.Poll(e.ctx)
	require.NoError(t, err)
	e.eventually("a lookup ran ahead of the application", func() bool { return c1.Metrics().LedgerResolves >= 2 })
	c2 := e.ledgerConsumer()
	pollRecords(e.ctx, t, c2, inputs)
}

// An offset acknowledged twice in one ledger transaction (ShareAcks.Merge
// of an override) is settled by its last type, as its claim says: ACCEPT
// then RELEASE commits no claim and gives the record back, and it is
// delivered again; ACCEPT then REJECT claims REJECT.
func TestLedgerRepeatedOffsetTakesItsLastType(t *testing.T) {
	const inputs = 2
	e := newEnv(t, broker.ShareTxnAPIs(false))
	e.createTopic("in", 1)
	e.createTopic("out", 1)
	e.groupConfig("g")
	e.produce("in", 1, values("v", inputs)...)
	c := e.ledgerConsumer()
	p := e.ledgerProducer("w")
	recs := pollRecords(e.ctx, t, c, inputs)
	released, rejected := recs[:1], recs[1:]
	acks := c.Acks(recs, kshare.AckAccept).Merge(c.Acks(released, kshare.AckRelease)).Merge(c.Acks(rejected, kshare.AckReject))
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendShareAcksToTransaction(e.ctx, acks, c.GroupMetadata()), "an override is documented use of Merge")
	require.NoError(t, p.CommitTransaction(e.ctx))
	again := pollRecords(e.ctx, t, c, 1)
	require.Equal(t, string(released[0].Value), string(again[0].Value), "the released record comes back")
	n, _ := c.DeliveryCount(again[0])
	require.EqualValues(t, 2, n)
}

// A lookup that finished ahead of an application which then stops polling
// for MaxPollInterval gives its records back (ReleasedUnseen), as records
// fetched ahead are, rather than holding them until their locks run out.
func TestLedgerIdleApplicationReleasesAFinishedLookup(t *testing.T) {
	e := newEnv(t, broker.ShareTxnAPIs(false), broker.ShareLockDuration(5*time.Second))
	e.createTopic("in", 1)
	e.createTopic("out", 1)
	e.groupConfig("g")
	e.produce("in", 1, values("v", 20)...)
	c := e.ledgerConsumer(shareconsumer.MaxPollRecords(5), shareconsumer.MaxPollInterval(300*time.Millisecond))
	p := e.ledgerProducer("w")
	recs, err := c.Poll(e.ctx)
	require.NoError(t, err)
	require.NoError(t, process(e.ctx, t, p, c, recs))
	e.eventually("the finished lookup's records are given back", func() bool { return c.Metrics().ReleasedUnseen > 0 })
	m := c.Metrics()
	require.Zero(t, m.ExpiredUnseen, "records held until their locks ran out")
	require.EqualValues(t, 5, m.ReleasedUnseen, "one MaxPollRecords batch was looked up ahead")
}

// A Poll that waits for a ledger lookup longer than MaxPollInterval (an
// open transaction holds the ledger back) is a Poll that waits: the
// records' locks stay renewed past several lock durations, none runs out,
// and the Poll returns each record on its first delivery.
func TestLedgerPollWaitingPastMaxPollIntervalKeepsTheLocks(t *testing.T) {
	const inputs = 6
	e := txnEnv(t, inputs, broker.ShareTxnAPIs(false), broker.ShareLockDuration(time.Second))
	abort := e.holdLedger()
	c := e.ledgerConsumer(shareconsumer.MaxPollInterval(200 * time.Millisecond))
	type polled struct {
		recs []*kgo.Record
		err  error
	}
	done := make(chan polled, 1)
	go func() {
		recs, err := c.Poll(e.ctx)
		done <- polled{recs, err}
	}()
	e.eventually("the waiting round's locks renewed past several lock durations", func() bool {
		return c.Metrics().LocksRenewed >= 3*inputs
	})
	abort()
	got := <-done
	require.NoError(t, got.err)
	for _, r := range got.recs {
		n, ok := c.DeliveryCount(r)
		require.True(t, ok)
		require.EqualValues(t, 1, n)
	}
	require.Zero(t, c.Metrics().ExpiredUnseen)
}
