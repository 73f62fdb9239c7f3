package shareconsumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// timeOutARound has c's first ledger round (the ledger held back by an
// open transaction) run past a 500ms bound and returns the error of the
// Poll that waited for it. No record is returned meanwhile.
func timeOutARound(t *testing.T, e *env, c *shareconsumer.Consumer) error {
	t.Helper()
	var err error
	for err == nil {
		var recs []*kgo.Record
		recs, err = c.Poll(e.ctx)
		require.Empty(t, recs, "records returned while the ledger could not be read")
	}
	return err
}

// Metrics documents RecordsDelivered as "the records Poll returned" and
// Released as "the records Poll returned that the consumer released". A
// round that fails (here its bound; a ledger error or Close alike) returns
// nothing, yet its records stay counted as delivered, and their release
// is counted as Released, not ReleasedUnseen. (ledger_round_test.go's
// TestLedgerCloseDuringRound even waits on RecordsDelivered > 0 to know a
// round runs while no Poll has returned a record.)
func TestReviewFailedRoundMetrics(t *testing.T) {
	defer shareconsumer.SetLedgerRoundTimeout(500 * time.Millisecond)()
	const inputs = 6
	e := txnEnv(t, inputs, broker.ShareTxnAPIs(false))
	abort := e.holdLedger()
	defer func() { abort() }()
	c := e.ledgerConsumer()
	require.ErrorIs(t, timeOutARound(t, e, c), kshare.ErrAbortable)
	m := c.Metrics()
	require.Zero(t, m.RecordsDelivered, "Poll returned no record, yet RecordsDelivered counts %d", m.RecordsDelivered)
	require.Zero(t, m.Released, "records Poll never returned counted as Released (ReleasedUnseen is %d)", m.ReleasedUnseen)
}

// A Poll cut short leaves its round running; once the round ends, its kept
// records are no longer renewed (ledger.go: markResolvingLocked(recs,
// false)), although the application has not seen them. A Poll that comes
// a lock duration later, well within MaxPollInterval (for which records
// fetched ahead of Poll are renewed), finds their locks gone: the round
// drops them silently (not counted in ExpiredUnseen) and they come back on
// a second delivery, the cost the round exists to avoid.
func TestReviewKeptRecordsOutliveALatePoll(t *testing.T) {
	const inputs = 6
	lock := time.Second
	e := txnEnv(t, inputs, broker.ShareTxnAPIs(false), broker.ShareLockDuration(lock))
	abort := e.holdLedger()
	c := e.ledgerConsumer()
	for c.Metrics().LocksRenewed == 0 { // a round runs, renewing its records
		pctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
		_, err := c.Poll(pctx)
		cancel()
		require.ErrorIs(t, err, kshare.ErrAbortable)
		require.NoError(t, e.ctx.Err())
	}
	abort()
	e.eventually("the round ended", func() bool { return c.Metrics().LedgerResolves > 0 })
	time.Sleep(lock * 3 / 2) // the application is busy; no Poll
	for _, r := range pollRecords(e.ctx, t, c, inputs) {
		n, ok := c.DeliveryCount(r)
		require.True(t, ok)
		require.EqualValues(t, 1, n, "record %s delivered again: its round kept it, then let its lock run out before the next Poll", r.Value)
	}
	require.Zero(t, c.Metrics().ExpiredUnseen)
}

// A record a round is still looking up cannot be staged, however the
// application names it (here rebuilt from its topic, partition and
// offset): no lookup has cleared it, so a transaction over it could
// commit a record another member's committed claim covers. Nor does the
// consumer report it as held.
func TestLedgerRoundRecordsCannotBeStaged(t *testing.T) {
	const inputs = 6
	e := txnEnv(t, inputs, broker.ShareTxnAPIs(false))
	abort := e.holdLedger()
	defer func() { abort() }()
	c := e.ledgerConsumer()
	startRound(t, e, c)
	prod := e.ledgerProducer("stager")
	for p := range int32(3) {
		for off := range int64(inputs / 3) {
			r := &kgo.Record{Topic: "in", Partition: p, Offset: off}
			_, held := c.LockDeadline(r)
			require.False(t, held, "in/%d offset %d: reported held while a round looks it up", p, off)
			require.NoError(t, prod.BeginTransaction())
			err := prod.SendShareAcksToTransaction(e.ctx, c.Acks([]*kgo.Record{r}, kshare.AckAccept), c.GroupMetadata())
			require.NoError(t, prod.AbortTransaction(e.ctx))
			require.Error(t, err, "in/%d offset %d staged before any lookup cleared it", p, off)
			require.True(t, errors.Is(err, shareconsumer.ErrNotHeld) || errors.Is(err, shareconsumer.ErrLockExpired), "in/%d offset %d: %v", p, off, err)
		}
	}
}
