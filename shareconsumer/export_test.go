package shareconsumer

import (
	"time"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
)

// Stage stages acks with the consumer that built them, as a transaction
// does when they join it (tests only).
func Stage(acks *kshare.ShareAcks, meta kshare.ShareGroupMetadata) error {
	set := (*acktrack.Set)(acks)
	return set.Tracker().Stage(set, acktrack.Staging{Group: meta.GroupID, Member: meta.MemberID})
}

// TopicID returns the topic id acks carry for topic (tests only).
func TopicID(acks *kshare.ShareAcks, topic string) ([16]byte, bool) {
	return (*acktrack.Set)(acks).TopicID(topic)
}

// SetUnknownTopicTimeout sets how long metadata must say that a
// subscribed topic does not exist before Poll reports it, and returns the
// function that restores it (tests only).
func SetUnknownTopicTimeout(d time.Duration) (restore func()) {
	old := unknownTopicTimeout
	unknownTopicTimeout = d
	return func() { unknownTopicTimeout = old }
}

// SessionWork returns the steps of c's share sessions and their full
// scans of staged records for renewals (tests only).
func SessionWork(c *Consumer) (steps, scans int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.sessOrder {
		steps += s.steps
		scans += s.renewScans
	}
	return steps, scans
}

// SetUnreachableTimeout sets how long a new consumer may fail to reach
// any broker before Poll reports it, for consumers created afterwards,
// and returns the function that restores it (tests only).
func SetUnreachableTimeout(d time.Duration) (restore func()) {
	old := unreachableTimeout
	unreachableTimeout = d
	return func() { unreachableTimeout = old }
}

// CheckReached runs the check that reports a cluster never reached,
// at once (tests only).
func CheckReached(c *Consumer) { c.checkReached() }

// StageUntil stages acks as a transaction with the given deadline does
// (tests only).
func StageUntil(acks *kshare.ShareAcks, meta kshare.ShareGroupMetadata, deadline time.Time) error {
	set := (*acktrack.Set)(acks)
	return set.Tracker().Stage(set, acktrack.Staging{Group: meta.GroupID, Member: meta.MemberID, Deadline: deadline})
}

// Resolve tells the consumer that built acks how their transaction ended
// (tests only).
func Resolve(acks *kshare.ShareAcks, committed bool) {
	set := (*acktrack.Set)(acks)
	set.Tracker().Resolve(set, committed)
}

// TxnTimers returns how many staged acknowledgements wait for their
// transaction's deadline (tests only).
func TxnTimers(c *Consumer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.txnTimers)
}

// SetLedgerPruneEvery sets how often Poll prunes the claim index and
// truncates the ledger, and returns the function that restores it (tests
// only).
func SetLedgerPruneEvery(d time.Duration) (restore func()) {
	old := ledgerPruneEvery
	ledgerPruneEvery = d
	return func() { ledgerPruneEvery = old }
}

// SetLedgerRoundTimeout sets how long one ledger round may take, and
// returns the function that restores it (tests only).
func SetLedgerRoundTimeout(d time.Duration) (restore func()) {
	old := ledgerRoundTimeout
	ledgerRoundTimeout = d
	return func() { ledgerRoundTimeout = old }
}

// RoundRunning reports whether a ledger round of c is under way (tests
// only).
func RoundRunning(c *Consumer) bool {
	c.mu.Lock()
	r := c.round
	c.mu.Unlock()
	if r == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}
