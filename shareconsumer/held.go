package shareconsumer

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/wire"
)

// recState is where one acquired offset stands, as the consumer sees it.
type recState uint8

const (
	// stFree: nothing left to do for the offset (no record there, already
	// acknowledged, forgotten, or superseded by a newer acquisition).
	stFree recState = iota
	// stBuffered: fetched, waiting for Poll.
	stBuffered
	// stResolving: taken by Poll in ledger mode and being looked up in the
	// claim ledger (ledgerRound): not returned yet, so the application
	// cannot stage, release or see it.
	stResolving
	// stDelivered: returned by Poll, no decision yet.
	stDelivered
	// stDecided: Explicit mode, marked by Ack, acknowledgement not sent.
	stDecided
	// stStaged: Transactional mode, handed to a transaction (Tracker.Stage)
	// and not yet resolved.
	stStaged
)

// delivery identifies one acquisition of records (one AcquiredRecords
// range), and the parts Poll split off it, to the *kgo.Record values Poll
// returned from it: each record's Context carries it (deliveryOf), so that
// a record of an ended delivery is told from the newer delivery of its
// offset.
type delivery struct{ count int16 }

// deliveryKey is the Context key of a record's delivery.
type deliveryKey struct{}

// deliveryOf returns the delivery r came from, or nil for a record that
// did not come from this package's Poll.
func deliveryOf(r *kgo.Record) *delivery {
	if r.Context == nil {
		return nil
	}
	d, _ := r.Context.Value(deliveryKey{}).(*delivery)
	return d
}

// acquisition is one AcquiredRecords range of one ShareFetch response: the
// offsets a leader locked for this member in one go, with one delivery count
// and one lock deadline.
type acquisition struct {
	delivery   *delivery
	tp         kshare.TopicPartition
	topicID    [16]byte
	sess       *session
	first      int64
	deliveries int16
	deadline   time.Time
	lockDur    time.Duration
	// leaderEpoch is the partition's leader epoch known before the
	// ShareFetch that acquired the records was sent (-1: unknown), no
	// later than the epoch of the leader that acquired them; a ledger
	// commit compares it with the leader's after the renewal.
	leaderEpoch int32
	states      []recState
	decisions   []wire.AckType // Explicit mode: the type Ack gave each offset
	// staged holds, by index, the staging of each offset in state
	// stStaged (Transactional mode; nil until one is staged). Kept with
	// the acquisition rather than in a map by offset: staging and
	// resolving a transaction's records were map inserts, growths and
	// deletes for every record.
	staged []*stagedRec
	live   int // offsets not stFree
	// dead is set when the lock is known to be lost (session reset, leader
	// moved, member fenced); the records must not be acknowledged.
	dead bool
	// renewing is set while a RENEW of its unstaged records (fetched
	// ahead, or delivered with RenewHeldLocks) is in flight, as part of
	// renewal; renewStopped once the broker refused one or cannot renew:
	// the records keep the lock they have.
	renewing     bool
	renewal      *heldRenewal
	renewStopped bool
	// handover is set when Poll returns records that waited for it until
	// less than 7/8 of their lock was left: one RENEW gives the
	// application a whole lock from Poll, renewed further only with
	// RenewHeldLocks.
	handover bool
	// asked holds the Renew calls waiting for a RENEW of the acquisition's
	// delivered records that is not built yet; askedSent those that the
	// RENEW in flight answers.
	asked, askedSent []*renewCall
}

// holds reports whether a holds an offset in state st. An acquisition is
// never part buffered and part delivered or resolving (Poll splits it), so
// holding stBuffered also says that a holds nothing the application has
// seen.
func (a *acquisition) holds(st recState) bool { return slices.Contains(a.states, st) }

// unseen reports whether an offset in state st was fetched and not yet
// returned by Poll: fetched ahead, or being looked up in the ledger.
func (st recState) unseen() bool { return st == stBuffered || st == stResolving }

// unstaged reports whether an offset in state st is held and not handed
// to a transaction or marked by Ack: fetched ahead, looked up in the
// ledger, or returned by Poll.
func (st recState) unstaged() bool {
	return st == stBuffered || st == stResolving || st == stDelivered
}

// stagedSince reports whether one of offs, buffered or delivered when a
// RENEW of them was sent, has been staged (or freed) since: a transaction
// may have reached the broker before the RENEW.
func (a *acquisition) stagedSince(offs []int64) bool {
	for _, off := range offs {
		if !a.contains(off) {
			continue
		}
		if !a.states[off-a.first].unstaged() {
			return true
		}
	}
	return false
}

func (a *acquisition) last() int64 { return a.first + int64(len(a.states)) - 1 }

func (a *acquisition) contains(off int64) bool { return off >= a.first && off <= a.last() }

// usable reports whether the lock of the acquisition still stands.
func (a *acquisition) usable(now time.Time) bool { return !a.dead && now.Before(a.deadline) }

func (a *acquisition) set(idx int, st recState) {
	switch {
	case a.states[idx] == stFree && st != stFree:
		a.live++
	case a.states[idx] != stFree && st == stFree:
		a.live--
	}
	a.states[idx] = st
}

// take frees the offsets for which pick returns true and returns them as
// acknowledgement batches, consecutive offsets of one type merged.
func (a *acquisition) take(pick func(idx int) (wire.AckType, bool)) []wire.AcknowledgementBatch {
	var out []wire.AcknowledgementBatch
	for i, st := range a.states {
		if st == stFree {
			continue
		}
		t, ok := pick(i)
		if !ok {
			continue
		}
		a.set(i, stFree)
		off := a.first + int64(i)
		if n := len(out); n > 0 && out[n-1].LastOffset == off-1 && out[n-1].AcknowledgeType == t {
			out[n-1].LastOffset = off
			continue
		}
		out = append(out, wire.AcknowledgementBatch{FirstOffset: off, LastOffset: off, AcknowledgeType: t})
	}
	return out
}

// stagedRec is one record handed to a transaction in Transactional mode.
type stagedRec struct {
	unit     *acktrack.Set // the Stage call it belongs to
	acq      *acquisition
	off      int64
	deadline time.Time // lock deadline, moved forward by renewals
	renewing bool      // a RENEW is in flight
	// stopped is set when a renewal failed: the record is TX_PENDING at
	// the broker (its lock no longer runs) or its lock is gone.
	stopped bool
	// ledger: a claim ledger carries the record's acknowledgement; on
	// commit the consumer sends it (plain ShareAcknowledge).
	ledger bool
	// force is the commit-time renewal (tracker.Renew) waiting for this
	// record's next RENEW; forceSent says that the RENEW in flight was
	// built after force was set, so that its answer is the one force
	// waits for.
	force     *renewWaiter
	forceSent bool
}

// stagedAt returns the staging of the offset at idx, if it is staged.
func (a *acquisition) stagedAt(idx int) *stagedRec {
	if a.staged == nil || a.states[idx] != stStaged {
		return nil
	}
	return a.staged[idx]
}

// partState is what the consumer holds in one partition.
type partState struct {
	acqs []*acquisition
}

// heldSet is every record the consumer holds. All of it is guarded by the
// consumer's mutex.
type heldSet struct {
	parts map[kshare.TopicPartition]*partState
}

func (h *heldSet) part(tp kshare.TopicPartition) *partState {
	if h.parts == nil {
		h.parts = make(map[kshare.TopicPartition]*partState)
	}
	p := h.parts[tp]
	if p == nil {
		p = &partState{}
		h.parts[tp] = p
	}
	return p
}

// find returns the acquisition holding offset off of tp and the offset's
// index in it. Only one acquisition holds an offset: a newer one frees it
// in the older.
func (h *heldSet) find(tp kshare.TopicPartition, off int64) (*acquisition, int, bool) {
	f := finder{p: h.parts[tp]}
	return f.find(off)
}

// finder finds offsets of one partition, remembering the acquisition it
// found last: a transaction's records come partition by partition, mostly
// in offset order, so most lookups end there (Acks and Stage look every
// record up).
type finder struct {
	p    *partState
	last *acquisition
}

func (f *finder) find(off int64) (*acquisition, int, bool) {
	if a := f.last; a != nil && a.contains(off) {
		if idx := int(off - a.first); a.states[idx] != stFree {
			return a, idx, true // the holder: a newer acquisition would have freed it here
		}
	}
	if f.p == nil {
		return nil, 0, false
	}
	for i := len(f.p.acqs) - 1; i >= 0; i-- {
		a := f.p.acqs[i]
		if a.contains(off) {
			idx := int(off - a.first)
			if a.states[idx] != stFree {
				f.last = a
				return a, idx, true
			}
		}
	}
	return nil, 0, false
}

// add registers a new acquisition. The broker locked its offsets for us
// anew, so any older hold of them (an expired lock, an aborted transaction)
// is over: it is freed, and a staged record of it is dropped, so that its
// transaction's Resolve leaves the new hold alone.
func (h *heldSet) add(a *acquisition) {
	p := h.part(a.tp)
	for _, old := range p.acqs {
		lo, hi := max(old.first, a.first), min(old.last(), a.last())
		for off := lo; off <= hi; off++ {
			idx := int(off - old.first)
			if old.states[idx] == stFree {
				continue
			}
			if old.staged != nil {
				if sr := old.staged[idx]; sr != nil {
					forcedDoneLocked(sr, fmt.Errorf("delivered again while staged: %w", ErrLockExpired))
				}
				old.staged[idx] = nil
			}
			old.set(idx, stFree)
		}
	}
	p.acqs = append(p.acqs, a)
	h.compact(a.tp)
}

// split cuts a at offset at: a keeps the offsets before at, and the
// returned acquisition, registered beside it, takes at and the rest, with
// the same lock, delivery count and session. Poll splits an acquisition
// of buffered records that would take it past MaxPollRecords, so that an
// acquisition is never part delivered and part waiting for Poll: the two
// parts are renewed on their own terms. A RENEW in flight for a covers the
// new part too.
func (h *heldSet) split(a *acquisition, at int64) *acquisition {
	idx := int(at - a.first)
	b := &acquisition{
		delivery:     a.delivery,
		tp:           a.tp,
		topicID:      a.topicID,
		sess:         a.sess,
		first:        at,
		deliveries:   a.deliveries,
		deadline:     a.deadline,
		lockDur:      a.lockDur,
		leaderEpoch:  a.leaderEpoch,
		states:       append([]recState(nil), a.states[idx:]...),
		dead:         a.dead,
		renewing:     a.renewing,
		renewal:      a.renewal,
		renewStopped: a.renewStopped,
		handover:     a.handover,
	}
	if a.decisions != nil {
		b.decisions = append([]wire.AckType(nil), a.decisions[idx:]...)
		a.decisions = a.decisions[:idx:idx]
	}
	if a.staged != nil {
		b.staged = append([]*stagedRec(nil), a.staged[idx:]...)
		for _, sr := range b.staged {
			if sr != nil {
				sr.acq = b
			}
		}
		a.staged = a.staged[:idx:idx]
	}
	for _, st := range b.states {
		if st != stFree {
			b.live++
		}
	}
	a.live -= b.live
	a.states = a.states[:idx:idx]
	if a.renewal != nil {
		a.renewal.acqs = append(a.renewal.acqs, b)
	}
	p := h.part(a.tp)
	p.acqs = append(p.acqs, b)
	return b
}

// compact drops the acquisitions of tp with nothing left, and tp itself
// when it holds nothing.
func (h *heldSet) compact(tp kshare.TopicPartition) {
	p := h.parts[tp]
	if p == nil {
		return
	}
	kept := p.acqs[:0]
	for _, a := range p.acqs {
		if a.live > 0 {
			kept = append(kept, a)
		}
	}
	clear(p.acqs[len(kept):])
	p.acqs = kept
	if len(p.acqs) == 0 { // a staged offset keeps its acquisition
		delete(h.parts, tp)
	}
}

// sweep forgets what can no longer be acknowledged: offsets of dead or
// expired acquisitions, except staged ones, which wait for their
// transaction's Resolve. An expired acquisition is kept for one more lock
// duration, so that acknowledging its records in that time fails with
// ErrLockExpired rather than ErrNotHeld. unseen is called with the count
// of records fetched ahead that expired before Poll returned them.
func (h *heldSet) sweep(now time.Time, unseen func(tp kshare.TopicPartition, n int)) {
	for tp, p := range h.parts {
		for _, a := range p.acqs {
			if now.Before(a.deadline.Add(a.lockDur)) {
				continue
			}
			n := 0
			for i, st := range a.states {
				if st != stFree && st != stStaged {
					if st == stBuffered {
						n++
					}
					a.set(i, stFree)
				}
			}
			if n > 0 && !a.dead {
				unseen(tp, n)
			}
		}
		h.compact(tp)
	}
}

// kill marks every acquisition for which match returns true as dead: the
// broker no longer holds those locks for us.
func (h *heldSet) kill(match func(*acquisition) bool) {
	for _, p := range h.parts {
		for _, a := range p.acqs {
			if match(a) {
				a.dead = true
				settleAskedLocked(a, errLockLost)
				// A commit waiting for these locks' renewal learns now
				// that they are gone.
				for idx := range a.staged {
					if sr := a.stagedAt(idx); sr != nil && sr.force != nil {
						forcedDoneLocked(sr, fmt.Errorf("lock lost: %w", ErrLockExpired))
					}
				}
			}
		}
	}
}

// lockDeadline is the deadline of the record at idx of a: a staged record's
// renewals move it.
func (h *heldSet) lockDeadline(a *acquisition, idx int) time.Time {
	if sr := a.stagedAt(idx); sr != nil {
		return sr.deadline
	}
	return a.deadline
}

// sortedBatches sorts batches by first offset; batches of one partition
// never overlap, since every offset is acknowledged once.
func sortedBatches(b []wire.AcknowledgementBatch) []wire.AcknowledgementBatch {
	sort.Slice(b, func(i, j int) bool { return b[i].FirstOffset < b[j].FirstOffset })
	return b
}
