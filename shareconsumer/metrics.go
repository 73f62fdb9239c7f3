package shareconsumer

import (
	"time"
)

// Metrics is a snapshot of a Consumer's counters since New.
type Metrics struct {
	// RecordsDelivered counts the records Poll returned, and Redelivered
	// those of them the broker had delivered before (delivery count above
	// 1).
	RecordsDelivered, Redelivered int64
	// LocksRenewed counts record locks a RENEW renewed: records staged in
	// a transaction or checkpoint, records fetched ahead of Poll, and,
	// with RenewHeldLocks, records Poll returned. RenewalsRefused counts
	// records whose renewal the broker refused or that could not be
	// renewed before their lock ended (their lock then runs out).
	LocksRenewed, RenewalsRefused int64
	// ExpiredUnseen counts records fetched ahead of Poll whose lock ran
	// out before Poll returned them: the broker delivers them again, and
	// that delivery counts towards the group's delivery limit although the
	// application never saw the record. The consumer renews such records
	// to prevent it; a nonzero count means renewals failed or the broker
	// cannot renew (each occurrence is logged at WARN).
	ExpiredUnseen int64
	// ReleasedUnseen counts records fetched ahead of Poll that the consumer
	// gave back without Poll returning them: no Poll came for
	// MaxPollInterval, the consumer closed, or (ShareLedger) the ledger
	// lookup of a Poll's records failed. ExpiredUnseen and ReleasedUnseen
	// include records a ledger lookup held.
	ReleasedUnseen int64
	// Released counts the records Poll returned that the consumer released
	// (Release, an aborted transaction or checkpoint, Close).
	Released int64
	// ResolvedFromLedger counts delivered records (ShareLedger) that a
	// committed claim covered: the consumer acknowledged them as the
	// claim says instead of returning them from Poll (an earlier holder
	// committed their output, and its acknowledgement was lost).
	ResolvedFromLedger int64
	// LedgerAcked counts records of committed ledger transactions that
	// the consumer acknowledged after the commit (plain ShareAcknowledge);
	// LedgerAckFailed counts those whose acknowledgement was not sent
	// because the lock was gone: they come back and are resolved from the
	// ledger.
	LedgerAcked, LedgerAckFailed int64
	// LedgerMalformed counts ledger records that were not claims
	// (skipped; each logged, the first at WARN).
	LedgerMalformed int64
	// LedgerRanges is the number of claimed offset ranges the consumer
	// holds in memory (claims of records the group may still deliver);
	// LedgerTruncations counts the ledger partitions it truncated below
	// the claims it still holds.
	LedgerRanges      int
	LedgerTruncations int64
	// LedgerConflicts counts offsets that two committed claims cover:
	// two transactions committed the same records, which the protocol
	// rules out unless one of its assumptions failed (docs/design.md,
	// "Exactly-once without KIP-1289"); each is logged at ERROR.
	LedgerConflicts int64
	// LedgerResolves counts the ledger lookups (one per batch of records
	// a Poll hands over), and LedgerResolveTime is the time they took
	// (the ledger's latest offsets, its reads up to them, a wait for
	// transactions open on it, now and then the pruning of what can no
	// longer matter).
	LedgerResolves    int64
	LedgerResolveTime time.Duration
	// LedgerPollWait is the time Polls spent waiting for ledger lookups
	// to end. A lookup of records fetched ahead starts when they arrive
	// and runs while the application works on the last Poll's records,
	// so this, not LedgerResolveTime, is what the ledger adds to the
	// Polls: LedgerPollWait / LedgerResolves per lookup.
	LedgerPollWait time.Duration
	// LedgerEpochRefusals counts records a ledger commit did not commit
	// although their renewal succeeded: the partition's leader epoch
	// after the renewal was not the one they were acquired under, so
	// the leader may have forgotten their locks (and another member
	// been handed them) in between.
	LedgerEpochRefusals int64
}

// Metrics returns a snapshot of the consumer's counters.
func (c *Consumer) Metrics() Metrics {
	if !c.made() {
		return Metrics{}
	}
	c.mu.Lock()
	m := c.metrics
	c.mu.Unlock()
	if c.ledger != nil {
		st := c.ledger.Stats()
		m.LedgerMalformed, m.LedgerRanges, m.LedgerTruncations, m.LedgerConflicts = st.Malformed, st.Ranges, st.Truncated, st.Conflicts
	}
	return m
}

// unseenWarnEvery bounds how often expiries of records fetched ahead are
// logged: at most once per interval, with the count since the last line.
const unseenWarnEvery = 10 * time.Second

// noteExpiredUnseenLocked counts n records fetched ahead whose lock ran
// out before Poll returned them, and warns about them at most once every
// unseenWarnEvery.
func (c *Consumer) noteExpiredUnseenLocked(n int, tp string, partition int32, now time.Time) {
	if n == 0 {
		return
	}
	c.metrics.ExpiredUnseen += int64(n)
	c.unseenSinceWarn += int64(n)
	if !c.unseenWarnAt.IsZero() && now.Sub(c.unseenWarnAt) < unseenWarnEvery {
		return
	}
	c.logger.Warn("records fetched ahead of Poll lost their acquisition lock before Poll returned them; the broker delivers them again, and the lost delivery counts towards the group's delivery limit",
		"records", c.unseenSinceWarn, "last_topic", tp, "last_partition", partition, "total", c.metrics.ExpiredUnseen, "hint", c.unseenHintLocked())
	c.unseenWarnAt = now
	c.unseenSinceWarn = 0
}

// unseenHintLocked says why records fetched ahead may have expired.
func (c *Consumer) unseenHintLocked() string {
	if len(c.renewMissing) > 0 {
		return "a broker cannot renew locks (it lacks ShareAcknowledge v2, KIP-1222)"
	}
	return "lock renewals failed (see debug logs) or the lock is shorter than a round trip"
}
