package shareconsumer

import (
	"context"
	"fmt"
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

// dueRenewalsLocked returns the staged records of this session whose locks
// should be renewed now (less than half the lock duration left), and when
// the next one falls due. A staged record whose deadline already passed is
// given up: its lock is gone.
func (s *session) dueRenewalsLocked(now time.Time) (map[kshare.TopicPartition][]*stagedRec, time.Time) {
	if s.c.cfg.mode != Transactional {
		return nil, time.Time{}
	}
	ahead := s.renewAheadLocked()
	if !s.renewStale && (s.renewAt.IsZero() || now.Before(s.renewAt)) {
		return nil, s.renewAt
	}
	s.renewScans++
	var due map[kshare.TopicPartition][]*stagedRec
	var next time.Time
	for tp, p := range s.c.held.parts {
		for _, a := range p.acqs {
			if a.sess != s || a.dead || a.staged == nil {
				continue
			}
			for idx := range a.staged {
				sr := a.stagedAt(idx)
				if sr == nil || sr.stopped || sr.renewing {
					continue
				}
				if !now.Before(sr.deadline) {
					sr.stopped = true
					continue
				}
				at := sr.deadline.Add(-ahead)
				if now.Before(at) {
					if next.IsZero() || at.Before(next) {
						next = at
					}
					continue
				}
				if due == nil {
					due = make(map[kshare.TopicPartition][]*stagedRec)
				}
				due[tp] = append(due[tp], sr)
			}
		}
	}
	// What is due now is renewed (or probed for) by this step; until the
	// step has marked it renewing, scan again.
	s.renewAt, s.renewStale = next, len(due) > 0
	return due, next
}

// renewRescanLocked makes the next step scan the staged records again:
// something may be due for renewal sooner than the last scan found.
func (s *session) renewRescanLocked() { s.renewStale = true }

// renewDueByLocked tells the session that a record whose lock ends at
// deadline was staged: its renewal falls due half a lock duration before.
func (s *session) renewDueByLocked(deadline time.Time) {
	at := deadline.Add(-s.renewAheadLocked())
	if s.renewAt.IsZero() || at.Before(s.renewAt) {
		s.renewAt = at
	}
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
func (s *session) renewStepLocked(now time.Time, due map[kshare.TopicPartition][]*stagedRec) step {
	merged := make(map[kshare.TopicPartition]*jobPart, len(due))
	for tp, srs := range due {
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
		due[tp] = srs
		p := &jobPart{topicID: srs[0].acq.topicID}
		for _, sr := range srs {
			sr.renewing = true
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
func (s *session) renewUnsupportedLocked(due map[kshare.TopicPartition][]*stagedRec) {
	for _, srs := range due {
		for _, sr := range srs {
			sr.stopped = true
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

// applyRenewLocked records the outcome of a RENEW request: renewed records
// get a new deadline from the time the request was sent; records the broker
// would not renew are TX_PENDING (their transaction's acknowledgement
// arrived first) or lost, and are not renewed again.
func (s *session) applyRenewLocked(st step, lockMillis int32, failed map[kshare.TopicPartition]error) {
	lock := s.lockDur
	if lockMillis > 0 {
		lock = time.Duration(lockMillis) * time.Millisecond
	}
	s.renewRescanLocked()
	for tp, srs := range st.renews {
		err := failed[tp]
		for _, sr := range srs {
			sr.renewing = false
			if err != nil {
				sr.stopped = true
				continue
			}
			sr.deadline = st.sentAt.Add(lock)
		}
		if err != nil {
			s.c.logger.Debug("lock renewal refused; the records are in a transaction at the broker or lost",
				"topic", tp.Topic, "partition", tp.Partition, "err", err)
		}
	}
}

// renewHint explains, in a staging error, why a lock may have run out.
func (c *Consumer) renewHintLocked(a *acquisition) string {
	if c.renewMissing[a.sess.node] {
		return fmt.Sprintf(" (broker %d cannot renew locks: it lacks ShareAcknowledge v2, KIP-1222)", a.sess.node)
	}
	return ""
}
