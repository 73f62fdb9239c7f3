package shareconsumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/ledger"
	"github.com/kshare-go/kshare/wire"
)

// ShareLedger names the claim ledger topic of an exactly-once pipeline on
// a cluster without KIP-1289, in Transactional mode (New refuses it in
// another mode: kshare.ErrUsage). Give every consumer of the group and
// every producer or acknowledger that commits its records the same topic
// (producer.ShareLedger, acknowledger.ShareLedger).
//
// With it, every record is resolved against the ledger before Poll
// returns it. As soon as a share fetch's records arrive, the consumer's
// ledger loop reads the ledger partitions of their input partitions
// read_committed past their high watermarks (an open transaction that
// wrote a claim before the acquisition holds the read back until it
// ends), while the application still works on what the last Poll
// returned; a record a committed claim covers is acknowledged by the
// consumer as the claim says (its output committed earlier and its
// acknowledgement was lost) and counted in Metrics().ResolvedFromLedger
// instead of being returned. Every record is resolved, not only
// redeliveries: Kafka's delivery counts are not reliable enough to tell
// them (docs/design.md). A round costs a ListOffsets and a Fetch per
// ledger leader, sent together; a Poll waits for one only when the
// application polls faster than the ledger answers
// (Metrics().LedgerPollWait).
//
// The first Poll creates the topic if it is missing (ledger.DefaultPartitions
// partitions, the cluster's default replication factor); a ledger that
// does not exist and cannot be created fails Poll with kshare.ErrUsage.
// A ledger that cannot be read (refused, or deleted) is kshare.ErrUsage
// too, from a later Poll, and the records of that round are released.
// Failures that pass (a leader move, a broker restart) are retried, and
// an open transaction that wrote a claim holds the ledger back until it
// ends: Poll waits for the ledger within its context, a ctx that ends
// first is kshare.ErrAbortable, and the records stay buffered (their
// locks renewed) for the next Poll.
func ShareLedger(topic string) Opt { return optFunc(func(c *config) { c.ledger = topic }) }

// ledgerPruneEvery is how often the ledger loop drops claims below the group's
// share-partition start offsets from the resolver's memory, and truncates
// the ledger below the claims still held (a variable for tests).
var ledgerPruneEvery = 30 * time.Second

// ledgerPruneTimeout bounds one prune: it is housekeeping, and a Poll
// must not wait long for it.
const ledgerPruneTimeout = 5 * time.Second

// ensureLedgerLocked opens the claim ledger once, creating it if missing,
// with c.mu held (it is released meanwhile).
func (c *Consumer) ensureLedgerLocked(ctx context.Context) error {
	if c.ledger == nil || c.ledgerReady {
		return nil
	}
	c.mu.Unlock()
	_, err := c.ledger.Ensure(ctx, true, 0)
	c.mu.Lock()
	if err != nil {
		return err
	}
	c.ledgerReady = true
	c.wakeLedger()
	return nil
}

// ledgerRound is what one round of the ledger loop resolves: the records
// sessions fetched and buffered for Poll, which Poll does not return
// before a round has resolved them.
type ledgerRound struct {
	results map[*session]*fetchResult
	inputs  map[kshare.TopicPartition]ledger.Input
	prune   bool
}

// wakeLedger asks the ledger loop for a round.
func (c *Consumer) wakeLedger() {
	select {
	case c.ledgerWake <- struct{}{}:
	default:
	}
}

// ledgerLoop resolves buffered records against the claim ledger as soon
// as a session buffers them, while the application works on what the
// last Poll returned, so that a Poll finds them resolved instead of
// waiting for the ledger. It ends when Close begins.
func (c *Consumer) ledgerLoop() {
	defer close(c.ledgerDone)
	for {
		select {
		case <-c.ledgerCtx.Done():
			return
		case <-c.ledgerWake:
		}
		for c.resolveBuffered() {
		}
	}
}

// resolveBuffered runs one round over the buffered records no round has
// resolved, and reports whether there were any. The round reads the
// ledger after the records were acquired (they are buffered, so they
// were), which is what resolving needs (docs/design.md). A record a
// committed claim covers is acknowledged as the claim says (its output
// committed earlier and its acknowledgement was lost) and dropped from
// the buffer; the rest are marked resolved, for Poll. On a ledger failure
// the round's records are released and Poll gets the error.
func (c *Consumer) resolveBuffered() bool {
	c.mu.Lock()
	if c.closing || !c.ledgerReady {
		c.mu.Unlock()
		return false
	}
	rd := ledgerRound{results: make(map[*session]*fetchResult), inputs: make(map[kshare.TopicPartition]ledger.Input)}
	for _, s := range c.sessOrder {
		res := s.buffered
		if res == nil || res.resolved {
			continue
		}
		rd.results[s] = res
		for _, g := range res.groups {
			tp := g.acq.tp
			if _, ok := rd.inputs[tp]; !ok {
				rd.inputs[tp] = ledger.Input{Group: c.cfg.group, TopicID: c.topicIDs[tp.Topic], Partition: tp.Partition}
			}
		}
	}
	if len(rd.results) == 0 {
		c.mu.Unlock()
		return false
	}
	if rd.prune = time.Since(c.ledgerPrunedAt) >= ledgerPruneEvery; rd.prune {
		c.ledgerPrunedAt = time.Now()
	}
	c.mu.Unlock()

	parts := make(map[int32]bool)
	for _, in := range rd.inputs {
		parts[c.ledger.PartitionOf(in)] = true
	}
	list := make([]int32, 0, len(parts))
	for p := range parts {
		list = append(list, p)
	}
	// A round takes as long as the ledger does: an open transaction that
	// wrote a claim holds it until the transaction ends (at the latest,
	// its timeout), and retriable failures are retried. Meanwhile the
	// records stay buffered and their locks renewed, and a Poll waits
	// within its own context. Only Close ends a round early.
	began := time.Now()
	err := c.ledger.CatchUp(c.ledgerCtx, list)
	took := time.Since(began)

	c.mu.Lock()
	c.metrics.LedgerResolves++
	c.metrics.LedgerResolveTime += took
	if err != nil {
		if c.closing {
			c.mu.Unlock()
			return false
		}
		// The ledger cannot be read as configured (CatchUp retries
		// everything else): the records go back, and Poll says why.
		c.releaseRoundLocked(rd)
		c.logger.Error("could not resolve fetched records against the claim ledger; released them", "err", err)
		c.queueClassifiedLocked(errs.New(kshare.ErrUsage, "poll", fmt.Errorf("resolving records against the claim ledger: %w", err)))
		c.mu.Unlock()
		return true
	}
	n := 0
	for s, res := range rd.results {
		if s.buffered != res {
			continue // given back meanwhile (idle, fenced, closing)
		}
		n += c.settleCoveredLocked(res, rd.inputs)
		res.resolved, res.resolvedAt = true, time.Now()
		if len(res.groups) == 0 {
			s.buffered = nil
			s.poke() // all settled by the ledger: fetch more
		}
	}
	c.metrics.ResolvedFromLedger += int64(n)
	c.signalReady()
	c.mu.Unlock()
	if n > 0 {
		c.logger.Debug("records resolved from the claim ledger", "records", n)
	}
	if rd.prune {
		// The start offsets it reads are at most the offsets of any
		// record the group holds or will deliver, so pruning never drops
		// a claim that a record still needs.
		pctx, cancel := context.WithTimeout(c.ledgerCtx, ledgerPruneTimeout)
		if err := c.ledger.PruneGroup(pctx, c.cfg.group); err != nil {
			c.logger.Debug("could not prune the claim index; trying again later", "err", err)
		} else if err := c.ledger.Truncate(pctx); err != nil {
			c.logger.Debug("could not truncate the claim ledger; trying again later", "err", err)
		}
		cancel()
	}
	return true
}

// settleCoveredLocked acknowledges, as their claims say, the buffered
// records of res that a committed claim covers, drops them from res, and
// returns how many it acknowledged.
func (c *Consumer) settleCoveredLocked(res *fetchResult, inputs map[kshare.TopicPartition]ledger.Input) int {
	now := time.Now()
	js := jobSet{quiet: true}
	n := 0
	kept := res.groups[:0]
	for _, g := range res.groups {
		a := g.acq
		var covered map[int]wire.AckType
		if len(g.recs) == 0 {
			continue
		}
		// Every record is looked up, even one whose lock looks gone: a
		// renewal in flight may still give it back its lock, and Poll
		// must never return a record that was not. The records are in
		// offset order: one walk along the claimed ranges, which are
		// usually none.
		usable := a.usable(now)
		claimed := c.ledger.Claimed(inputs[a.tp], g.recs[0].Offset, g.recs[len(g.recs)-1].Offset)
		if len(claimed) > 0 {
			recs := g.recs[:0]
			for _, r := range g.recs {
				for len(claimed) > 0 && claimed[0].Last < r.Offset {
					claimed = claimed[1:]
				}
				idx := int(r.Offset - a.first)
				if len(claimed) > 0 && claimed[0].First <= r.Offset && a.states[idx] == stBuffered {
					if covered == nil {
						covered = make(map[int]wire.AckType)
					}
					covered[idx] = wire.AckType(claimed[0].Type)
					continue
				}
				recs = append(recs, r)
			}
			g.recs = recs
		}
		if len(covered) > 0 {
			taken := a.take(func(idx int) (wire.AckType, bool) {
				t, ok := covered[idx]
				return t, ok
			})
			if usable { // else the lock is gone: nothing to acknowledge
				js.add(a, taken)
				n += len(covered)
			}
			c.held.compact(a.tp)
		}
		if len(g.recs) > 0 {
			kept = append(kept, g)
		}
	}
	clear(res.groups[len(kept):])
	res.groups = kept
	c.queueLocked(js)
	return n
}

// releaseRoundLocked gives back the records of a round that could not
// be resolved.
func (c *Consumer) releaseRoundLocked(rd ledgerRound) {
	js := jobSet{quiet: true}
	now := time.Now()
	for s, res := range rd.results {
		if s.buffered != res {
			continue
		}
		for _, g := range res.groups {
			a := g.acq
			buffered := func(idx int) bool { return a.states[idx] == stBuffered }
			if !a.usable(now) { // their lock is gone: nothing to release
				a.take(func(idx int) (wire.AckType, bool) { return 0, buffered(idx) })
				c.held.compact(a.tp)
				continue
			}
			js.add(a, a.take(func(idx int) (wire.AckType, bool) {
				if !buffered(idx) {
					return 0, false
				}
				c.metrics.ReleasedUnseen++
				return wire.AckRelease, true
			}))
			c.held.compact(a.tp)
		}
		s.buffered = nil
	}
	c.queueLocked(js)
}

// renewRecheck is how often a commit-time renewal checks that the records
// it waits for are still staged and their locks not known lost.
const renewRecheck = 250 * time.Millisecond

// The outcomes of a commit-time renewal that ended without an answer,
// made once: they are reported for every record.
var (
	errTxnEnded          = errors.New("the transaction ended")
	errRenewalSuperseded = errors.New("superseded by another renewal")
)

// renewWaiter is one commit-time renewal (tracker.Renew): it waits for a
// RENEW, sent after the call, of each of its records.
type renewWaiter struct {
	recs    []*stagedRec
	pending int
	failed  []acktrack.RenewFailure
	done    chan struct{}
}

// forcedDoneLocked reports the outcome of sr's commit-time renewal, if one
// waits for it: err nil for renewed.
func forcedDoneLocked(sr *stagedRec, err error) {
	w := sr.force
	if w == nil {
		return
	}
	sr.force, sr.forceSent = nil, false
	if err != nil {
		w.failed = append(w.failed, acktrack.RenewFailure{TopicPartition: acktrack.TopicPartition(sr.acq.tp), Offset: sr.off, Err: err})
	}
	w.pending--
	if w.pending == 0 {
		close(w.done)
	}
}

// Renew implements acktrack.Renewer: a ledger transaction's commit asks
// for the locks of its staged records to be renewed by a RENEW sent now,
// after its claims are durable. It waits, within ctx, for the answer for
// every record and returns the records that were not renewed: no longer
// staged in acks, their lock gone or refused by the leader
// (INVALID_RECORD_STATE once the lock ran out or another member holds
// the record, NOT_LEADER after a leader move), the session reset, the
// broker unable to renew, or ctx ending first.
func (t *tracker) Renew(ctx context.Context, acks *acktrack.Set) []acktrack.RenewFailure {
	c := (*Consumer)(t)
	w := &renewWaiter{done: make(chan struct{})}
	var failed []acktrack.RenewFailure
	now := time.Now()
	c.mu.Lock()
	sessions := make(map[*session]bool)
	for _, atp := range acks.Partitions() {
		f := finder{p: c.held.parts[kshare.TopicPartition(atp)]}
		for _, rec := range acks.Records(atp) {
			fail := func(err error) {
				failed = append(failed, acktrack.RenewFailure{TopicPartition: atp, Offset: rec.Offset, Err: err})
			}
			a, idx, ok := f.find(rec.Offset)
			sr := stagedOf(a, idx, ok)
			switch {
			case sr == nil || sr.unit != acks:
				fail(fmt.Errorf("no longer staged in this transaction: %w", ErrLockExpired))
				continue
			case sr.force == w:
				continue // listed twice
			case a.dead || sr.stopped:
				fail(fmt.Errorf("lock lost or renewal refused before the commit: %w", ErrLockExpired))
				continue
			case !now.Before(sr.deadline):
				fail(fmt.Errorf("lock ended at %s%s: %w", sr.deadline.Format(time.RFC3339Nano), c.renewHintLocked(a), ErrLockExpired))
				continue
			}
			if sr.force != nil {
				forcedDoneLocked(sr, errRenewalSuperseded)
			}
			sr.force, sr.forceSent = w, false
			w.recs = append(w.recs, sr)
			w.pending++
			sessions[a.sess] = true
		}
	}
	if w.pending == 0 {
		c.mu.Unlock()
		return failed
	}
	for s := range sessions {
		s.renewRescanLocked()
		s.poke()
	}
	c.mu.Unlock()
	// The sessions report every outcome; the recheck is a safety net that
	// fails records whose staging ended in a way no session step reports
	// (their acquisition dropped), rather than holding the commit until
	// ctx ends.
	recheck := time.NewTicker(renewRecheck)
	defer recheck.Stop()
	for waiting := true; waiting; {
		select {
		case <-w.done:
			waiting = false
		case <-ctx.Done():
			waiting = false
		case <-recheck.C:
			c.mu.Lock()
			for _, sr := range w.recs {
				if sr.force == w && (sr.acq.dead || sr.acq.stagedAt(int(sr.off-sr.acq.first)) != sr) {
					forcedDoneLocked(sr, fmt.Errorf("lock lost or staging ended: %w", ErrLockExpired))
				}
			}
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sr := range w.recs {
		if sr.force == w {
			forcedDoneLocked(sr, fmt.Errorf("no renewal answer before the commit gave up: %w", context.Cause(ctx)))
		}
	}
	return append(failed, w.failed...)
}
