package shareconsumer

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
// With it, Poll resolves every record it is about to return against the
// ledger: after the records were acquired, it reads the ledger partition
// of their input partition read_committed past its high watermark (an
// open transaction that wrote a claim before the acquisition holds the
// read back until it ends), and a record a committed claim covers is
// acknowledged by the consumer as the claim says (its output committed
// earlier and its acknowledgement was lost) and counted in
// Metrics().ResolvedFromLedger instead of being returned. Every record is
// resolved, not only redeliveries: Kafka's delivery counts are not
// reliable enough to tell them (docs/design.md). A lookup costs a
// ListOffsets and a Fetch to each leader of the ledger partitions
// involved, in parallel, and its work is the claims written since the
// last one; the lookup of records fetched ahead starts when they arrive,
// while the application works on the last Poll's records, so a Poll
// mostly finds it done (Metrics().LedgerPollWait).
//
// The first Poll creates the topic if it is missing (ledger.DefaultPartitions
// partitions, the cluster's default replication factor); a ledger that
// does not exist and cannot be created, or cannot be read, fails Poll with
// kshare.ErrUsage (the records it would have returned are released).
// A Poll whose ctx ends before the ledger is read returns
// kshare.ErrAbortable; the lookup goes on, its records renewed, and the
// next Poll waits for it (a release would cost each record a delivery).
// A lookup that cannot read the ledger within two minutes (longer than
// Kafka's default transaction timeout, which bounds an open transaction
// holding the read back) releases its records and fails the Poll that
// waits for it with kshare.ErrAbortable.
func ShareLedger(topic string) Opt { return optFunc(func(c *config) { c.ledger = topic }) }

// ledgerPruneEvery is how often Poll drops claims below the group's
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
	return nil
}

// ledgerRoundTimeout bounds one ledger round: longer than Kafka's default
// transaction.timeout.ms (60s), so that a round outwaits a transaction
// left open by a stalled holder, which holds the ledger's read back until
// its coordinator aborts it. A variable for tests.
var ledgerRoundTimeout = 2 * time.Minute

// ledgerRound is the ledger lookup of the records one Poll took. It runs
// in a goroutine of its own, under a context that only Close and
// ledgerRoundTimeout end, not Poll's: a Poll whose context ends first
// leaves it running, and the next Poll waits for it and hands its outcome
// over. Releasing the records instead would cost each a delivery, and an
// application whose Polls are often cut short (a source woken for its
// checkpoints) would take its records to the delivery limit unprocessed.
// Until a Poll hands them over, its records are in state stResolving:
// renewed like records fetched ahead, and out of the application's reach
// (it cannot stage what no lookup has cleared).
type ledgerRound struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when kept and err are set
	exited chan struct{} // closed when its goroutine returns
	kept   []*kgo.Record
	err    error
}

// startEagerRoundLocked starts the ledger round of the records the sessions
// fetched ahead, when no round runs: the lookup (a round trip to the
// ledger's leaders, and a wait for any transaction open on the ledger)
// then overlaps the application's work on what the last Poll returned,
// and the next Poll takes its outcome instead of waiting for all of it.
// The records are held no longer than fetched-ahead records are (renewed
// until a Poll takes them, given back once the application stops polling:
// releaseIdleRoundLocked), and at most one MaxPollRecords batch more is
// fetched: a session fetches ahead once per Poll. An
// application slower than MaxPollInterval gets no eager rounds (its Polls
// fetch from one leader at a time and hold nothing back). Nor does one
// with a ledger transaction of this consumer's records open: its claims,
// staged before the lookup's mark is taken, would hold the read back
// until the application commits, and the lookup's fetches, waiting
// at the leaders, would only load them while the application's flush
// waits for its replicas (Kafka 4.4, two nodes: commit p50 8.8 ms with
// this rule, 17-23 ms without). Its end starts the lookup (resolveLocked).
func (c *Consumer) startEagerRoundLocked() {
	if c.ledger == nil || !c.ledgerReady || c.round != nil || c.closing || c.stuck != nil || c.slow || len(c.ledgerOpen) > 0 {
		return
	}
	if recs := c.takeReadyLocked(time.Now()); len(recs) > 0 {
		c.startRoundLocked(recs)
		// No session long-polls for more while a round runs: a Poll
		// that waits now waits for this round (and says so again if
		// the round settles every record).
		c.polling = false
	}
}

// releaseIdleRoundLocked gives back the records a finished ledger round
// kept for an application that stopped polling (MaxPollInterval), as the
// sessions give back what they fetched ahead: a round started ahead of
// the Polls would otherwise hold them until their locks ran out, a
// delivery each all the same, and the consumer would never learn that
// the application is slow. A round still running, or one a Poll waits
// for, is left alone; so is a failed one (its records went back, and the
// next Poll reports its error).
func (c *Consumer) releaseIdleRoundLocked() {
	r := c.round
	if r == nil || c.closing || !c.idleLocked(time.Now()) {
		return
	}
	select {
	case <-r.done:
	default:
		return
	}
	if r.err != nil {
		return
	}
	c.round = nil
	c.noteSlowLocked(-1, c.releaseResolvingLocked(r.kept))
}

// startRoundLocked starts the ledger round of recs, which Poll just took.
func (c *Consumer) startRoundLocked(recs []*kgo.Record) {
	ctx, cancel := context.WithTimeoutCause(c.bgCtx, ledgerRoundTimeout,
		fmt.Errorf("the claim ledger was not read within %v", ledgerRoundTimeout))
	r := &ledgerRound{cancel: cancel, done: make(chan struct{}), exited: make(chan struct{})}
	c.round = r
	go func() {
		defer close(r.exited)
		kept, err := c.resolveFromLedger(ctx, recs)
		cancel()
		r.kept, r.err = kept, err
		close(r.done)
		// An application that stopped polling while the lookup ran
		// does not get its records held until their locks run out.
		c.mu.Lock()
		c.releaseIdleRoundLocked()
		c.mu.Unlock()
	}()
}

// endRoundLocked hands over the outcome of round r, which is done: the
// records no committed claim covers that are still held under the
// delivery Poll took, now delivered to the application, or the round's
// error. One whose lock ran out meanwhile is counted in ExpiredUnseen:
// the group delivers it again.
func (c *Consumer) endRoundLocked(r *ledgerRound) ([]*kgo.Record, error) {
	c.round = nil
	if r.err != nil {
		return nil, r.err
	}
	now := time.Now()
	kept := r.kept[:0:0]
	var handed *acquisition
	var f partFinder
	for _, rec := range r.kept {
		a := c.resolvingLocked(&f, rec, now)
		if a == nil {
			c.dropResolvingLocked(&f, rec, now)
			continue
		}
		a.states[rec.Offset-a.first] = stDelivered
		c.countDeliveredLocked(a)
		kept = append(kept, rec)
		if a != handed {
			handed = a
			c.handOverLocked(a, now)
		}
	}
	return kept, nil
}

// partFinder is a finder with the partition it finds in, for one pass
// over a round's records: they come partition by partition and in offset
// order, so looking each up from the acquisition that held the last one
// is cheap.
type partFinder struct {
	tp kshare.TopicPartition
	finder
}

// roundHoldLocked returns the acquisition that holds r for a ledger round
// (state stResolving, the same delivery) and r's index in it.
func (c *Consumer) roundHoldLocked(f *partFinder, r *kgo.Record) (*acquisition, int, bool) {
	tp := kshare.TopicPartition{Topic: r.Topic, Partition: r.Partition}
	if f.p == nil || f.tp != tp {
		*f = partFinder{tp: tp, finder: finder{p: c.held.parts[tp]}}
	}
	a, idx, ok := f.find(r.Offset)
	if !ok || a.states[idx] != stResolving {
		return nil, 0, false
	}
	if d := deliveryOf(r); d != nil && d != a.delivery {
		return nil, 0, false
	}
	return a, idx, true
}

// resolvingLocked returns the acquisition that holds r for a ledger round
// with its lock standing, or nil.
func (c *Consumer) resolvingLocked(f *partFinder, r *kgo.Record, now time.Time) *acquisition {
	if a, _, ok := c.roundHoldLocked(f, r); ok && a.usable(now) {
		return a
	}
	return nil
}

// dropResolvingLocked forgets r, kept by a round whose lock ran out
// before a Poll could hand it over, and counts it as expired unseen.
func (c *Consumer) dropResolvingLocked(f *partFinder, r *kgo.Record, now time.Time) {
	a, idx, ok := c.roundHoldLocked(f, r)
	if !ok {
		return
	}
	a.set(idx, stFree)
	if !a.dead {
		c.noteExpiredUnseenLocked(1, a.tp.Topic, a.tp.Partition, now)
	}
	c.held.compact(a.tp)
	*f = partFinder{} // compact may have dropped the partition's state
}

// resolveFromLedger resolves records Poll took against the claim ledger
// and returns those that no committed claim covers, for the application.
// It runs without c.mu. The covered ones are acknowledged as their claims
// say. On an error every record is released and the error returned.
func (c *Consumer) resolveFromLedger(ctx context.Context, recs []*kgo.Record) ([]*kgo.Record, error) {
	const op = "poll"
	n := c.ledger.Partitions()
	if n <= 0 { // Ensure succeeded, so this does not happen
		c.releaseResolving(recs)
		return nil, errs.Usage(op, fmt.Errorf("claim ledger %q has no partitions", c.ledger.Topic()))
	}
	c.mu.Lock()
	runs := runsByInput(recs, c.cfg.group, c.topicIDs)
	prune := time.Since(c.ledgerPrunedAt) >= ledgerPruneEvery
	if prune {
		c.ledgerPrunedAt = time.Now()
	}
	c.mu.Unlock()
	seen := make(map[int32]bool, len(runs))
	list := make([]int32, 0, len(runs))
	for _, run := range runs {
		if p := run.in.LedgerPartition(n); !seen[p] {
			seen[p] = true
			list = append(list, p)
		}
	}
	began := time.Now()
	defer func() {
		c.mu.Lock()
		c.metrics.LedgerResolves++
		c.metrics.LedgerResolveTime += time.Since(began)
		c.mu.Unlock()
	}()
	if err := c.ledger.CatchUp(ctx, list); err != nil {
		c.releaseResolving(recs)
		class := errs.ClassOf(err)
		if class == nil {
			class = kshare.ErrAbortable
		}
		if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		return nil, errs.New(class, op, fmt.Errorf("resolving records against the claim ledger: %w", err))
	}
	var kept []*kgo.Record
	var covered map[*kgo.Record]wire.AckType
	for _, run := range runs {
		from := len(kept)
		kept = append(kept, run.recs...)
		c.ledger.LookupEach(run.in, run.offsets, func(i int, typ int8) {
			if covered == nil {
				covered = make(map[*kgo.Record]wire.AckType)
			}
			covered[run.recs[i]] = wire.AckType(typ)
			kept[from+i] = nil
		})
	}
	if covered != nil {
		kept = slices.DeleteFunc(kept, func(r *kgo.Record) bool { return r == nil })
	}
	if prune {
		// After the lookups: the start offsets it reads are at most the
		// offsets of the records just resolved (they are acquired), so
		// pruning never drops a claim these records needed anyway.
		pctx, cancel := context.WithTimeout(ctx, ledgerPruneTimeout)
		if err := c.ledger.PruneGroup(pctx, c.cfg.group); err != nil {
			c.logger.Debug("could not prune the claim index; trying again later", "err", err)
		} else if err := c.ledger.Truncate(pctx); err != nil {
			c.logger.Debug("could not truncate the claim ledger; trying again later", "err", err)
		}
		cancel()
	}
	if len(covered) > 0 {
		c.mu.Lock()
		n := c.settleResolvingLocked(covered)
		c.metrics.ResolvedFromLedger += int64(n)
		c.mu.Unlock()
		c.logger.Debug("records resolved from the claim ledger", "records", n)
	}
	return kept, nil
}

// inputRun is a run of a Poll's records of one input partition, in the
// order Poll took them, with their offsets.
type inputRun struct {
	in      ledger.Input
	recs    []*kgo.Record
	offsets []int64
}

// runsByInput cuts recs into runs of one input partition each (a fetch
// hands records over partition by partition, so a Poll has few), so that
// resolving costs a lookup of the ledger partition per run rather than
// per record.
func runsByInput(recs []*kgo.Record, group string, topicIDs map[string][16]byte) []inputRun {
	var runs []inputRun
	for i := 0; i < len(recs); {
		j := i + 1
		for j < len(recs) && recs[j].Topic == recs[i].Topic && recs[j].Partition == recs[i].Partition {
			j++
		}
		offs := make([]int64, j-i)
		for k, r := range recs[i:j] {
			offs[k] = r.Offset
		}
		runs = append(runs, inputRun{
			in:      ledger.Input{Group: group, TopicID: topicIDs[recs[i].Topic], Partition: recs[i].Partition},
			recs:    recs[i:j],
			offsets: offs,
		})
		i = j
	}
	return runs
}

// settleResolvingLocked acknowledges records a ledger round holds, each
// with its type, with a plain ShareAcknowledge in the background, and
// returns how many it acknowledged (records no longer held for the round
// under the same delivery are skipped).
func (c *Consumer) settleResolvingLocked(types map[*kgo.Record]wire.AckType) int {
	now := time.Now()
	picked := make(map[*acquisition]map[int]wire.AckType)
	n := 0
	var f partFinder
	for r, t := range types {
		a := c.resolvingLocked(&f, r, now)
		if a == nil {
			continue
		}
		idx := int(r.Offset - a.first)
		if picked[a] == nil {
			picked[a] = make(map[int]wire.AckType)
		}
		picked[a][idx] = t
		n++
	}
	js := jobSet{quiet: true}
	for a, idxs := range picked {
		js.add(a, a.take(func(idx int) (wire.AckType, bool) {
			t, ok := idxs[idx]
			return t, ok
		}))
		c.held.compact(a.tp)
	}
	c.queueLocked(js)
	return n
}

// releaseResolving gives back the records of a round that failed: the
// application never saw them (Metrics().ReleasedUnseen).
func (c *Consumer) releaseResolving(recs []*kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return // Close released them
	}
	c.releaseResolvingLocked(recs)
}

// releaseResolvingLocked gives back the records of recs that a ledger
// round still holds, counted as ReleasedUnseen, and returns how many.
func (c *Consumer) releaseResolvingLocked(recs []*kgo.Record) int {
	types := make(map[*kgo.Record]wire.AckType, len(recs))
	for _, r := range recs {
		types[r] = wire.AckRelease
	}
	n := c.settleResolvingLocked(types)
	if n > 0 {
		c.metrics.ReleasedUnseen += int64(n)
		c.releasedSincePoll = true
	}
	return n
}

// renewRecheck is how often a commit-time renewal checks that the records
// it waits for are still staged and their locks not known lost.
const renewRecheck = 250 * time.Millisecond

// renewWaiter is one commit-time renewal (tracker.Renew): it waits for a
// RENEW, sent after the call, of each of its records.
type renewWaiter struct {
	recs    []*stagedRec
	pending int
	renewed []*stagedRec
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
	} else {
		w.renewed = append(w.renewed, sr)
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
	var lastSess *session
	w.recs = make([]*stagedRec, 0, acks.Len())
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
				forcedDoneLocked(sr, fmt.Errorf("superseded by another renewal: %w", ErrLockExpired))
			}
			sr.force, sr.forceSent = w, false
			w.recs = append(w.recs, sr)
			w.pending++
			if a.sess != lastSess {
				sessions[a.sess], lastSess = true, a.sess
			}
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
	for _, sr := range w.recs {
		if sr.force == w {
			forcedDoneLocked(sr, fmt.Errorf("no renewal answer before the commit gave up: %w", context.Cause(ctx)))
		}
	}
	failed = append(failed, w.failed...)
	renewed := w.renewed
	c.mu.Unlock()
	return append(failed, c.checkLeaderEpochs(ctx, renewed)...)
}
