package shareconsumer

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/wire"
)

// renewVersion is the ShareAcknowledge version that carries RENEW
// acknowledgements (KIP-1222, Kafka 4.2).
const renewVersion = 2

// renewals is what one RENEW request of a session renews: per partition
// either records of one staging unit or the unstaged records of one
// acquisition, never both, since the broker refuses a partition's RENEW
// as a whole.
type renewals struct {
	staged map[kshare.TopicPartition][]*stagedRec
	held   map[kshare.TopicPartition]*heldRenewal
}

// heldRenewal is the renewal of the unstaged records of one acquisition:
// fetched ahead and waiting for Poll, or returned by Poll and not staged
// yet (RenewHeldLocks). acqs is that acquisition and the parts Poll split
// off it while the RENEW travelled.
type heldRenewal struct {
	acqs []*acquisition
	offs []int64
	// buffered says that acqs hold records fetched ahead of Poll: several
	// of a partition's ranges may then share the RENEW.
	buffered bool
}

func (r renewals) empty() bool { return len(r.staged) == 0 && len(r.held) == 0 }

// dueRenewalsLocked returns the records of this session whose locks should
// be renewed now (less than half the lock duration left), and when the
// next one falls due: records fetched ahead and waiting for Poll (in every
// mode: the application has not seen them, and a lock that ran out would
// use up one of their deliveries), records staged in a transaction or
// checkpoint, and, with RenewHeldLocks, records Poll returned that are not
// staged yet, since the application holds them while it works on them and
// stages them later. A record whose deadline already passed is given up:
// its lock is gone.
//
// The records are scanned only when one falls due (renewAt: a fetch, Stage,
// and Poll for held records, tell the session when) or something changed
// (renewStale).
func (s *session) dueRenewalsLocked(now time.Time) (renewals, time.Time) {
	var due renewals
	ahead := s.renewAheadLocked()
	if !s.renewStale && (s.renewAt.IsZero() || now.Before(s.renewAt)) {
		return due, s.renewAt
	}
	s.renewScans++
	idle := s.c.idleLocked(now)
	var next time.Time
	// check says whether a lock ending at deadline is to be renewed now
	// (renew) or is gone (expired); otherwise it keeps next at the
	// earliest time a lock falls due.
	check := func(deadline time.Time) (renew, expired bool) {
		if !now.Before(deadline) {
			return false, true
		}
		at := deadline.Add(-ahead)
		if now.Before(at) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			return false, false
		}
		return true, false
	}
	for tp, p := range s.c.held.parts {
		for _, a := range p.acqs {
			if a.sess != s || a.staged == nil {
				continue
			}
			if a.dead {
				for idx := range a.staged {
					if sr := a.stagedAt(idx); sr != nil && sr.force != nil {
						forcedDoneLocked(sr, fmt.Errorf("lock lost: %w", ErrLockExpired))
					}
				}
				continue
			}
			for idx := range a.staged {
				sr := a.stagedAt(idx)
				if sr != nil && sr.stopped && !sr.renewing && sr.force != nil {
					forcedDoneLocked(sr, fmt.Errorf("lock renewal refused: %w", ErrLockExpired))
				}
				if sr == nil || sr.stopped || sr.renewing {
					continue
				}
				renew, expired := check(sr.deadline)
				sr.stopped = expired
				if sr.force != nil {
					if expired {
						forcedDoneLocked(sr, fmt.Errorf("lock ended at %s: %w", sr.deadline.Format(time.RFC3339Nano), ErrLockExpired))
					} else {
						renew = true // a commit waits for this renewal
					}
				}
				if !renew {
					continue
				}
				if due.staged == nil {
					due.staged = make(map[kshare.TopicPartition][]*stagedRec)
				}
				due.staged[tp] = append(due.staged[tp], sr)
			}
		}
		if due.staged[tp] != nil {
			continue // one kind of renewal per partition and request
		}
		renewHeld := s.c.cfg.renewHeld && s.c.cfg.mode == Transactional
		for _, a := range p.acqs {
			if a.sess != s {
				continue
			}
			if len(a.asked) > 0 {
				if err := s.c.renewBlockedLocked(a, now); err != nil {
					settleAskedLocked(a, err)
				}
			}
			if a.dead || a.renewStopped || a.renewing {
				continue
			}
			switch {
			case a.holds(stBuffered):
				if idle {
					continue // released instead (releaseIdleLocked)
				}
				// Records fetched ahead cannot be staged meanwhile, so
				// those of several ranges go in one RENEW; one due
				// takes the partition's others along.
				if h := due.held[tp]; h != nil && h.buffered && now.Before(a.deadline) {
					h.acqs = append(h.acqs, a)
					continue
				}
			case (a.handover || len(a.asked) > 0) && a.holds(stDelivered):
				// Records Poll returned that waited for it, or that Renew
				// asked for: one RENEW now.
				if now.Before(a.deadline) { // due now
					if due.held == nil {
						due.held = make(map[kshare.TopicPartition]*heldRenewal)
					}
					if due.held[tp] == nil {
						due.held[tp] = &heldRenewal{acqs: []*acquisition{a}}
					}
					continue
				}
				a.handover = false
			case a.holds(stResolving):
				// A ledger round looks them up, or kept them for the next
				// Poll: renewed like records fetched ahead (a lookup may
				// wait for an open transaction), and, like them, left to
				// run out once the application stops polling.
				if idle {
					continue
				}
			case !renewHeld || !a.holds(stDelivered):
				continue
			}
			renew, expired := check(a.deadline)
			a.renewStopped = expired
			if expired {
				s.c.metrics.RenewalsRefused += int64(a.live)
			}
			if !renew {
				continue
			}
			if due.held == nil {
				due.held = make(map[kshare.TopicPartition]*heldRenewal)
			}
			if due.held[tp] == nil {
				due.held[tp] = &heldRenewal{acqs: []*acquisition{a}, buffered: a.holds(stBuffered)}
			}
		}
		if h := due.held[tp]; h != nil && h.buffered {
			// The partition's other fetched-ahead ranges, due or not,
			// ride along.
			for _, a := range p.acqs {
				if a.sess == s && !a.dead && !a.renewStopped && !a.renewing && a.holds(stBuffered) && !slices.Contains(h.acqs, a) && now.Before(a.deadline) {
					h.acqs = append(h.acqs, a)
				}
			}
		}
	}
	// What is due now is renewed (or probed for) by this step; until the
	// step has marked it renewing, scan again.
	s.renewAt, s.renewStale = next, !due.empty()
	return due, next
}

// renewRescanLocked makes the next step scan the staged records again:
// something may be due for renewal sooner than the last scan found.
func (s *session) renewRescanLocked() { s.renewStale = true }

// renewDueByLocked tells the session that a record whose lock ends at
// deadline was staged (or, with RenewHeldLocks, handed to the
// application): its renewal falls due half a lock duration before. It
// reports whether that moved the session's next renewal earlier, so that
// its goroutine must be woken to wait for the new time.
func (s *session) renewDueByLocked(deadline time.Time) bool {
	at := deadline.Add(-s.renewAheadLocked())
	if s.renewAt.IsZero() || at.Before(s.renewAt) {
		s.renewAt = at
		return true
	}
	return false
}

// renewAheadLocked is how long before its lock ends a staged record is
// renewed: half the lock duration.
func (s *session) renewAheadLocked() time.Duration {
	if s.lockDur == 0 {
		return defaultLockDuration / 2
	}
	return s.lockDur / 2
}

// renewStepLocked builds a ShareAcknowledge that renews the due records.
// RENEW is sent on its own request: the broker takes it only with
// IsRenewAck set, and a ShareFetch carrying it could not fetch.
func (s *session) renewStepLocked(now time.Time, due renewals) step {
	merged := make(map[kshare.TopicPartition]*jobPart, len(due.staged)+len(due.held))
	for tp, h := range due.held {
		sort.Slice(h.acqs, func(i, j int) bool { return h.acqs[i].first < h.acqs[j].first })
		p := &jobPart{topicID: h.acqs[0].topicID}
		for _, a := range h.acqs {
			a.renewing, a.renewal = true, h
			a.sendAsked()
			for i, st := range a.states {
				if !st.unstaged() {
					continue
				}
				off := a.first + int64(i)
				h.offs = append(h.offs, off)
				if n := len(p.batches); n > 0 && p.batches[n-1].LastOffset == off-1 {
					p.batches[n-1].LastOffset = off
					continue
				}
				p.batches = append(p.batches, wire.AcknowledgementBatch{FirstOffset: off, LastOffset: off, AcknowledgeType: wire.AckRenew})
			}
		}
		merged[tp] = p
	}
	for tp, srs := range due.staged {
		sort.Slice(srs, func(i, j int) bool { return srs[i].off < srs[j].off })
		// One staging unit per partition per request: the broker refuses a
		// partition's RENEW as a whole, and a unit whose commit lands while
		// the RENEW is in flight must not stop the renewal of the others.
		// The rest are due again on the next step.
		unit := srs[0].unit
		kept := srs[:0]
		for _, sr := range srs {
			if sr.unit == unit {
				kept = append(kept, sr)
			}
		}
		srs = kept
		due.staged[tp] = srs
		p := &jobPart{topicID: srs[0].acq.topicID}
		for _, sr := range srs {
			sr.renewing = true
			sr.forceSent = sr.force != nil
			if n := len(p.batches); n > 0 && p.batches[n-1].LastOffset == sr.off-1 {
				p.batches[n-1].LastOffset = sr.off
				continue
			}
			p.batches = append(p.batches, wire.AcknowledgementBatch{FirstOffset: sr.off, LastOffset: sr.off, AcknowledgeType: wire.AckRenew})
		}
		merged[tp] = p
	}
	req := s.newAckRequest(s.epoch, merged)
	req.IsRenewAck = true
	return step{kind: stepAck, ack: req, renews: due, gen: s.gen, sentAt: now}
}

// renewUnsupportedLocked gives up renewing on a broker without RENEW: the
// records keep the lock they have, and staging them after it ends fails
// with ErrLockExpired.
func (s *session) renewUnsupportedLocked(due renewals) {
	for _, srs := range due.staged {
		for _, sr := range srs {
			sr.stopped = true
			forcedDoneLocked(sr, errCannotRenew(s.node))
		}
	}
	for _, h := range due.held {
		for _, a := range h.acqs {
			a.renewStopped = true
			settleAskedLocked(a, errCannotRenew(s.node))
		}
	}
	if !s.c.renewWarned {
		s.c.renewWarned = true
		s.c.logger.Warn("broker cannot renew acquisition locks (needs ShareAcknowledge v2, KIP-1222); records held in a transaction or checkpoint keep only their first lock",
			"node", s.node)
	}
}

// probeRenew asks the session's broker, once, whether it serves RENEW.
func (s *session) probeRenew() {
	c := s.c
	ctx, cancel := context.WithTimeout(c.bgCtx, requestGrace)
	defer cancel()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName = "kshare" // ApiVersions v3+ refuses empty names
	req.ClientSoftwareVersion = "0"
	resp, err := c.cl.Broker(int(s.node)).Request(ctx, req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		if ar := resp.(*kmsg.ApiVersionsResponse); ar.ErrorCode != 0 {
			err = kerr.ErrorForCode(ar.ErrorCode)
		}
	}
	if err != nil {
		c.logger.Debug("ApiVersions for the RENEW check failed", "node", s.node, "err", err)
		s.backoffLocked(time.Now())
		return
	}
	s.renewCap = -1
	for _, k := range resp.(*kmsg.ApiVersionsResponse).ApiKeys {
		if k.ApiKey == kmsg.ShareAcknowledge.Int16() && k.MaxVersion >= renewVersion {
			s.renewCap = 1
		}
	}
	if s.renewCap < 0 {
		c.renewMissing[s.node] = true
	}
}

// applyRenewLocked records the outcome of a RENEW request answered at
// answered: renewed records get a new deadline from the time the request
// was sent; staged records the broker would not renew are TX_PENDING
// (their transaction's acknowledgement arrived first) or lost, and are not
// renewed again. Delivered records it would not renew are lost too, unless
// one of them was staged while the request travelled (its transaction may
// have reached the broker first): the others are then renewed again
// without it.
//
// A success answered after the lock's end, as known when the RENEW was
// sent, proves nothing (lateRenewal): those records are taken as lost.
func (s *session) applyRenewLocked(st step, lockMillis int32, failed map[kshare.TopicPartition]error, answered time.Time) {
	lock := s.lockDur
	if lockMillis > 0 {
		lock = time.Duration(lockMillis) * time.Millisecond
	}
	s.renewRescanLocked()
	for tp, h := range st.renews.held {
		err := failed[tp]
		staged := false
		for _, a := range h.acqs {
			a.renewing, a.renewal, a.handover = false, nil, false
			staged = staged || a.stagedSince(h.offs)
		}
		if err == nil {
			for _, a := range h.acqs {
				n := int64(0)
				for _, off := range h.offs {
					if a.contains(off) {
						n++
					}
				}
				if lateRenewal(answered, a.deadline) {
					a.renewStopped = true
					settleAskedLocked(a, lateRenewalErr(answered, a.deadline))
					s.c.metrics.RenewalsRefused += n
					s.c.logger.Debug("lock renewal of unstaged records not trusted",
						"topic", tp.Topic, "partition", tp.Partition, "err", lateRenewalErr(answered, a.deadline))
					continue
				}
				a.deadline = st.sentAt.Add(lock)
				settleAskedLocked(a, nil)
				s.c.metrics.LocksRenewed += n
			}
			continue
		}
		if staged {
			for _, a := range h.acqs {
				a.askAgain() // renewed again without the staged
			}
		} else {
			for _, a := range h.acqs {
				a.renewStopped = true
				settleAskedLocked(a, fmt.Errorf("the leader refused the renewal (%w): %w", err, ErrLockExpired))
			}
			s.c.metrics.RenewalsRefused += int64(len(h.offs))
		}
		s.c.logger.Debug("lock renewal of unstaged records refused",
			"topic", tp.Topic, "partition", tp.Partition, "err", err)
	}
	for tp, srs := range st.renews.staged {
		err := failed[tp]
		for _, sr := range srs {
			if err == nil && lateRenewal(answered, sr.deadline) {
				err = lateRenewalErr(answered, sr.deadline)
			}
		}
		for _, sr := range srs {
			sr.renewing = false
			if sr.forceSent {
				// The answer a commit waits for: this RENEW was built
				// after the commit asked.
				forcedDoneLocked(sr, err)
			}
			if err != nil {
				sr.stopped = true
				continue
			}
			sr.deadline = st.sentAt.Add(lock)
		}
		if err == nil {
			s.c.metrics.LocksRenewed += int64(len(srs))
		} else {
			s.c.metrics.RenewalsRefused += int64(len(srs))
		}
		if err != nil {
			s.c.logger.Debug("lock renewal refused; the records are in a transaction at the broker or lost",
				"topic", tp.Topic, "partition", tp.Partition, "err", err)
		}
	}
}

// errCannotRenew is the failure of a renewal that node cannot make.
func errCannotRenew(node int32) error {
	return fmt.Errorf("node %d cannot renew locks (it lacks ShareAcknowledge v2, KIP-1222): %w", node, ErrLockExpired)
}

// renewGuard is how long before a lock's known end a RENEW must be
// answered for its success to count: the broker's lock timer may fire a
// tick early, and its clock may run a little faster than ours.
const renewGuard = 10 * time.Millisecond

// lateRenewal reports whether a RENEW answered at answered came too late
// to prove anything about a lock that, as known when it was sent, ended
// at deadline. The lock may have run out at the leader before the RENEW
// got there, and Apache Kafka (4.4) answers a RENEW, as any
// acknowledgement, of offsets below the share-partition start offset with
// success without looking at them: once another member had been handed
// the records and acknowledged them, the late success would say that the
// records are still held. An answer before the known end proves it,
// since the leader's lock ends no sooner (it started when the leader took
// the request that set it, after the consumer sent it).
//
// Both clocks must say the answer was in time: the monotonic one, which
// a wall-clock step does not move, and the wall clock, which counts what
// the monotonic one may not (a host suspended, a process restored from a
// checkpoint), while the leader's lock ran on.
func lateRenewal(answered, deadline time.Time) bool {
	d := deadline.Add(-renewGuard)
	return !answered.Before(d) || !answered.Round(0).Before(d.Round(0))
}

// lateRenewalErr is the failure of a renewal lateRenewal does not trust.
func lateRenewalErr(answered, deadline time.Time) error {
	return fmt.Errorf("the RENEW was answered at %s, after the lock's end at %s known when it was sent, so its success does not prove that the lock was still held (a leader answers an acknowledgement of records another member has acknowledged since with success): %w",
		answered.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano), ErrLockExpired)
}

// renewHint explains, in a staging error, why a lock may have run out.
func (c *Consumer) renewHintLocked(a *acquisition) string {
	if c.renewMissing[a.sess.node] {
		return fmt.Sprintf(" (broker %d cannot renew locks: it lacks ShareAcknowledge v2, KIP-1222)", a.sess.node)
	}
	return ""
}
