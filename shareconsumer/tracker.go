package shareconsumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/txn"
	"github.com/kshare-go/kshare/wire"
)

// tracker is the Consumer seen as the acktrack.Tracker of the
// acknowledgements it builds: a type of its own, so that Stage and Resolve
// are not methods applications can call.
type tracker Consumer

// The Consumer follows its records through transactions, and tells the
// commit its current member epoch.
var (
	_ acktrack.Tracker      = (*tracker)(nil)
	_ txn.MemberEpochSource = (*tracker)(nil)
)

// CurrentMemberEpoch returns the consumer's current member epoch, if it is
// member of group now: TxnShareAcknowledge needs the current epoch, which
// a heartbeat may have moved since the acknowledgements were staged.
func (t *tracker) CurrentMemberEpoch(group, member string) (int32, bool) {
	c := (*Consumer)(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	if group != c.cfg.group || member != c.memberID || c.memberID == "" {
		return 0, false
	}
	return c.epoch, true
}

// Acks turns records returned by Poll into the acknowledgements a
// transaction carries (producer.SendShareAcksToTransaction,
// acknowledger.CommitAcknowledgements or Stage), each of type t, with the
// topic ids and lock deadlines the consumer knows. The consumer follows
// them: when they join a transaction it checks the records' locks and
// then renews them until the transaction ends, and it learns how the
// transaction ended. Combine the acknowledgements of several calls with
// kshare.ShareAcks.Merge.
//
// Acks does not check the records: putting them in a transaction does,
// and fails with ErrLockExpired (a lock ran out: kshare.ErrAbortable),
// ErrNotHeld (a record this consumer does not hold: kshare.ErrUsage), or
// kshare.ErrUsage for a type other than AckAccept, AckRelease and
// AckReject or outside Transactional mode. Nil records are skipped.
func (c *Consumer) Acks(records []*kgo.Record, t kshare.AckType) *kshare.ShareAcks {
	if !c.made() {
		return new(kshare.ShareAcks)
	}
	acks := acktrack.New((*tracker)(c))
	c.mu.Lock()
	defer c.mu.Unlock()
	var f finder
	var ftp kshare.TopicPartition
	for _, r := range records {
		if r == nil {
			continue
		}
		if tp := (kshare.TopicPartition{Topic: r.Topic, Partition: r.Partition}); f.p == nil || tp != ftp {
			f, ftp = finder{p: c.held.parts[tp]}, tp
		}
		rec := acktrack.Record{Offset: r.Offset, Type: int8(t)}
		var id [16]byte
		if a, idx, ok := f.find(r.Offset); ok {
			id = a.topicID
			if a.states[idx] != stBuffered { // else a newer delivery, not r's
				rec.LockDeadline = c.held.lockDeadline(a, idx)
				rec.Delivery = a.deliveries
				if d := deliveryOf(r); d != nil && d != a.delivery {
					// r is of an ended delivery: Stage refuses it.
					rec.Delivery = d.count
				}
			}
		} else {
			id = c.topicIDs[r.Topic]
		}
		acks.Add(r.Topic, id, r.Partition, rec)
	}
	return (*kshare.ShareAcks)(acks)
}

// Stage implements acktrack.Tracker: acks are about to join a
// transaction (or a checkpoint) of member st.Group/st.Member. It checks
// that this is the member, that the consumer holds every record with a
// lock that has not expired and that no other transaction has them, then
// marks them staged: from now on the consumer renews their locks (RENEW,
// where the broker supports it) until Resolve, and Close does not release
// them. Staged acknowledgements are staged once: staging them again while
// they are staged is a usage error (they would be in two transactions, and
// the first to end would give their records back while the other still
// carries them), unless st.Again says that their owner checks them again
// as they join its commit (an acknowledger's checkpoint). If st.Deadline
// is set, the transaction can no longer commit after it: the consumer then
// stops renewing the records and releases them, as after an abort, even
// if Resolve has not come yet. On any error nothing changes; the error
// wraps ErrLockExpired (lock passed or lost, kshare.ErrAbortable),
// ErrNotHeld, another usage error (another member, not Transactional
// mode, staged already; kshare.ErrUsage) or is kshare.ErrClosed.
func (t *tracker) Stage(acks *acktrack.Set, st acktrack.Staging) error {
	const op = "stage acknowledgements"
	c := (*Consumer)(t)
	if c.cfg.mode != Transactional {
		return errWrongMode(op, c.cfg.mode)
	}
	if st.Ledger != c.cfg.ledger {
		if st.Ledger == "" {
			return errs.Usage(op, fmt.Errorf("the consumer resolves its records against claim ledger %q (ShareLedger), so the transaction must write claims to it: give the producer or acknowledger the same ShareLedger", c.cfg.ledger))
		}
		if c.cfg.ledger == "" {
			return errs.Usage(op, fmt.Errorf("the transaction writes claims to ledger %q, but the consumer does not resolve its records against a ledger, so a record whose acknowledgement is lost after the commit would be processed again: give the consumer ShareLedger(%q)", st.Ledger, st.Ledger))
		}
		return errs.Usage(op, fmt.Errorf("the transaction writes claims to ledger %q, the consumer resolves its records against %q: give both the same ShareLedger topic", st.Ledger, c.cfg.ledger))
	}
	if st.Group != c.cfg.group || st.Member != c.memberID {
		return errs.Usage(op, fmt.Errorf("the acknowledgements are of member %s of group %q, the transaction carries member %s of group %q: pass the consumer's own GroupMetadata", c.memberID, c.cfg.group, st.Member, st.Group))
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return errClosed(op)
	}
	type target struct {
		a   *acquisition
		idx int
	}
	var fresh []target
	for _, atp := range acks.Partitions() {
		tp := kshare.TopicPartition(atp)
		f := finder{p: c.held.parts[tp]}
		for _, rec := range acks.Records(atp) {
			// Named only for an error: Stage runs for every record a
			// transaction acknowledges.
			where := recordName{tp, rec.Offset}
			a, idx, ok := f.find(rec.Offset)
			if sr := stagedOf(a, idx, ok); sr != nil {
				switch {
				case sr.unit != acks:
					return fmt.Errorf("%s is already in another transaction: %w", where, ErrNotHeld)
				case !st.Again:
					return errs.Usage(op, fmt.Errorf("%s: these acknowledgements are already staged in another transaction or checkpoint that has not ended; stage each ShareAcks once", where))
				case sr.acq.dead:
					return fmt.Errorf("%s: %w", where, ErrLockExpired)
				case !now.Before(sr.deadline):
					return fmt.Errorf("%s: lock ended at %s%s: %w", where, sr.deadline.Format(time.RFC3339Nano), c.renewHintLocked(sr.acq), ErrLockExpired)
				}
				continue
			}
			if !ok {
				if !rec.LockDeadline.IsZero() && !now.Before(rec.LockDeadline) {
					// Forgotten since its lock ended.
					return fmt.Errorf("%s: lock ended at %s: %w", where, rec.LockDeadline.Format(time.RFC3339Nano), ErrLockExpired)
				}
				return fmt.Errorf("%s (released or acknowledged since Poll returned it, forgotten a lock duration after its lock ended, or never returned by Poll): %w", where, ErrNotHeld)
			}
			switch {
			case rec.Delivery != 0 && rec.Delivery != a.deliveries && a.states[idx] == stDelivered:
				// The delivery Acks saw is over; the record has been
				// delivered to us again since. (A renewal of the same
				// delivery moves its lock, and is no reason to refuse.)
				return fmt.Errorf("%s: delivery %d ended, delivery %d holds it: %w", where, rec.Delivery, a.deliveries, ErrLockExpired)
			case a.dead:
				return fmt.Errorf("%s: %w", where, ErrLockExpired)
			case !now.Before(a.deadline):
				return fmt.Errorf("%s: lock ended at %s: %w", where, a.deadline.Format(time.RFC3339Nano), ErrLockExpired)
			case a.states[idx].unseen():
				return fmt.Errorf("%s was delivered again since Poll returned it: %w", where, ErrLockExpired)
			case a.states[idx] != stDelivered:
				return fmt.Errorf("%s is no longer held (released or acknowledged since Poll returned it, or never returned by Poll): %w", where, ErrNotHeld)
			}
			fresh = append(fresh, target{a, idx})
		}
	}
	// One allocation for the call's records: they are staged, and
	// resolved, together.
	slab := make([]stagedRec, len(fresh))
	var sooner []*session // sessions whose next renewal moved earlier
	for i, t := range fresh {
		if t.a.staged == nil {
			t.a.staged = make([]*stagedRec, len(t.a.states))
		}
		if t.a.states[t.idx] == stStaged {
			continue // listed twice in acks
		}
		t.a.states[t.idx] = stStaged
		sr := &slab[i]
		*sr = stagedRec{unit: acks, acq: t.a, off: t.a.first + int64(t.idx), deadline: t.a.deadline, ledger: st.Ledger != ""}
		t.a.staged[t.idx] = sr
		if t.a.sess.renewDueByLocked(sr.deadline) {
			sooner = append(sooner, t.a.sess)
		}
	}
	if !st.Deadline.IsZero() && c.txnTimers[acks] == nil {
		c.txnTimers[acks] = time.AfterFunc(time.Until(st.Deadline), func() { t.expire(acks) })
	}
	if st.Ledger != "" {
		if c.ledgerOpen == nil {
			c.ledgerOpen = make(map[*acktrack.Set]bool)
		}
		c.ledgerOpen[acks] = true
	}
	for _, s := range sooner {
		s.poke() // its next renewal is sooner than it waits for
	}
	return nil
}

// expire gives back the records of acks, staged in a transaction whose
// timeout has passed: the transaction can no longer commit, so nothing
// will acknowledge them, and renewing their locks until the application
// ends it would keep them from the group for as long as it stalls. The
// records are released as after an abort. A release that reaches a
// record the transaction did stage at its leader (TX_PENDING) is refused
// there and changes nothing: the coordinator decides that record.
func (t *tracker) expire(acks *acktrack.Set) {
	c := (*Consumer)(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.txnTimers[acks]; !ok {
		return // resolved meanwhile
	}
	delete(c.txnTimers, acks)
	c.logger.Info("transaction timeout passed with acknowledgements staged; giving their records back")
	c.resolveLocked(acks, false)
}

// Resolve implements acktrack.Tracker: the transaction that acks joined has
// ended, or acks will never be sent. The consumer stops renewing the
// records and forgets them. After a commit the broker has acknowledged
// them. After an abort the broker made available again every record whose
// acknowledgement reached it; a record whose acknowledgement never left the
// client (the producer sends them at commit, so an application's abort
// before commit leaves them all ACQUIRED) would sit locked until its lock
// ran out, so the consumer releases each record it still holds under the
// same lock (ShareAcknowledge RELEASE): the group gets it again at once. A
// release that finds the record already available fails harmlessly at the
// broker. A record that the broker has meanwhile delivered to this consumer
// again belongs to that new delivery and is left alone.
func (t *tracker) Resolve(acks *acktrack.Set, committed bool) {
	c := (*Consumer)(t)
	if acks == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if tm := c.txnTimers[acks]; tm != nil {
		tm.Stop()
		delete(c.txnTimers, acks)
	}
	c.resolveLocked(acks, committed)
}

// errTxnEnded fails a commit-time renewal whose transaction ended first.
var errTxnEnded = errors.New("the transaction ended")

// resolveLocked is Resolve with c.mu held.
func (c *Consumer) resolveLocked(acks *acktrack.Set, committed bool) {
	if c.ledgerOpen[acks] {
		delete(c.ledgerOpen, acks)
		// Its claims no longer hold the ledger back: records that
		// arrived meanwhile are looked up now.
		defer c.startEagerRoundLocked()
	}
	now := time.Now()
	release := make(map[*acquisition]map[int]struct{})
	// A ledger transaction's acknowledgements are the consumer's to send
	// once it committed: the brokers know nothing of the transaction.
	// Indexed by record, AckGap for none: a map per record costs a
	// ledger commit of many records more than the rest of its bookkeeping.
	acknowledge := make(map[*acquisition][]wire.AckType)
	acked := 0
	n := 0
	for _, atp := range acks.Partitions() {
		f := finder{p: c.held.parts[kshare.TopicPartition(atp)]}
		recs := acks.Records(atp)
		// RELEASE is never sent in the transaction (KIP-1289 refuses
		// it): the records whose last acknowledgement is RELEASE are
		// given back here, whichever the outcome, with a plain
		// ShareAcknowledge, as an abort gives back every record.
		var released map[int64]bool
		if committed {
			for _, rec := range recs {
				switch {
				case rec.Type == int8(kshare.AckRelease):
					if released == nil {
						released = make(map[int64]bool)
					}
					released[rec.Offset] = true
				case released != nil:
					delete(released, rec.Offset)
				}
			}
		}
		// From the last: an offset listed again (ShareAcks.Merge of an
		// override) is settled by its last type, as its claim says
		// (ledger.RangesOf); its earlier entries find it settled.
		for i := len(recs) - 1; i >= 0; i-- {
			rec := recs[i]
			a, idx, ok := f.find(rec.Offset)
			sr := stagedOf(a, idx, ok)
			if sr == nil || sr.unit != acks {
				continue
			}
			a.staged[idx] = nil
			forcedDoneLocked(sr, errTxnEnded)
			n++
			if committed && sr.ledger {
				if a.dead {
					c.metrics.LedgerAckFailed++
					a.set(idx, stFree)
					continue
				}
				if acknowledge[a] == nil {
					acknowledge[a] = make([]wire.AckType, len(a.states))
				}
				if acknowledge[a][idx] == wire.AckGap {
					acked++
				}
				acknowledge[a][idx] = wire.AckType(rec.Type)
				continue
			}
			if (!committed || released[rec.Offset]) && !c.closing && !a.dead && now.Before(sr.deadline) {
				if release[a] == nil {
					release[a] = make(map[int]struct{})
				}
				release[a][idx] = struct{}{}
				continue
			}
			a.set(idx, stFree)
		}
	}
	js := jobSet{quiet: true}
	for a, types := range acknowledge {
		js.add(a, a.take(func(idx int) (wire.AckType, bool) {
			return types[idx], types[idx] != wire.AckGap
		}))
	}
	c.metrics.LedgerAcked += int64(acked)
	for a, idxs := range release {
		js.add(a, a.take(func(idx int) (wire.AckType, bool) {
			_, ok := idxs[idx]
			return wire.AckRelease, ok
		}))
		c.metrics.Released += int64(len(idxs))
	}
	if len(release) > 0 {
		c.releasedSincePoll = true
	}
	c.queueLocked(js)
	for _, tp := range acks.Partitions() {
		c.held.compact(kshare.TopicPartition(tp))
	}
	c.logger.Debug("transaction outcome learned", "committed", committed, "records", n)
}

// Release gives records returned by Poll back to the group at once, in
// Transactional mode: the consumer sends RELEASE for each record it holds
// that is not staged in a transaction or checkpoint (a plain
// ShareAcknowledge, outside any transaction), and another member may get
// it within a round trip instead of when its lock runs out. Call it for
// the records of a transaction that ended before their acknowledgements
// were staged (work that failed before SendShareAcksToTransaction, or an
// abort before it), whose records no transaction outcome gives back.
// Records staged in a transaction, records the consumer no longer holds
// (released already, acknowledged, given back by an abort) and nil
// records are skipped, so releasing the records of any failed transaction
// is safe. A record the broker has delivered to this consumer again since
// Poll returned r is that newer delivery's, and is skipped too. It returns
// the number of records released; the release itself travels in the
// background, and one the broker refuses (the lock had run out) changes
// nothing. It fails with kshare.ErrUsage outside Transactional mode and
// kshare.ErrClosed after Close.
func (c *Consumer) Release(records []*kgo.Record) (int, error) {
	const op = "release"
	if !c.made() {
		return 0, errNotMade(op)
	}
	if c.cfg.mode != Transactional {
		return 0, errWrongMode(op, c.cfg.mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return 0, errClosed(op)
	}
	now := time.Now()
	picked := make(map[*acquisition]map[int]struct{})
	n := 0
	var f finder
	var ftp kshare.TopicPartition
	for _, r := range records {
		if r == nil {
			continue
		}
		if tp := (kshare.TopicPartition{Topic: r.Topic, Partition: r.Partition}); f.p == nil || tp != ftp {
			f, ftp = finder{p: c.held.parts[tp]}, tp
		}
		a, idx, ok := f.find(r.Offset)
		if !ok || a.states[idx] != stDelivered || !a.usable(now) {
			continue
		}
		if d := deliveryOf(r); d != nil && d != a.delivery {
			continue // r is of an ended delivery; a newer one holds the offset
		}
		if picked[a] == nil {
			picked[a] = make(map[int]struct{})
		}
		if _, dup := picked[a][idx]; !dup {
			picked[a][idx] = struct{}{}
			n++
		}
	}
	js := jobSet{quiet: true}
	for a, idxs := range picked {
		js.add(a, a.take(func(idx int) (wire.AckType, bool) {
			_, ok := idxs[idx]
			return wire.AckRelease, ok
		}))
		c.held.compact(a.tp)
	}
	c.metrics.Released += int64(n)
	if n > 0 {
		c.releasedSincePoll = true
	}
	c.queueLocked(js)
	return n, nil
}

// stagedOf is the staging of the offset find found, if it is staged.
func stagedOf(a *acquisition, idx int, found bool) *stagedRec {
	if !found {
		return nil
	}
	return a.stagedAt(idx)
}

// recordName names a record in an error message.
type recordName struct {
	tp     kshare.TopicPartition
	offset int64
}

func (n recordName) String() string {
	return fmt.Sprintf("%s/%d offset %d", n.tp.Topic, n.tp.Partition, n.offset)
}
