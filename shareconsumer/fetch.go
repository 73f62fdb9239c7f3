package shareconsumer

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/wire"
)

// defaultLockDuration is assumed when a broker announces no lock duration
// (ShareFetch v0); it is Kafka's group.share.record.lock.duration.ms.
const defaultLockDuration = 30 * time.Second

// maxAcquiredSpan bounds one AcquiredRecords range that the consumer
// tracks offset by offset; a broker never locks more at once than its
// in-flight limit, far below this.
const maxAcquiredSpan = 1 << 22

// decode decodes the record batches of every partition that acquired
// records, without the consumer's lock: decompression is the costly part
// of a fetch.
func (s *session) decode(fr *kmsg.ShareFetchResponse) map[kshare.TopicPartition]kgo.FetchPartition {
	c := s.c
	names := make(map[[16]byte]string, len(fr.Topics))
	c.mu.Lock()
	for _, t := range fr.Topics {
		names[t.TopicID] = c.topicNames[t.TopicID]
	}
	c.mu.Unlock()
	out := make(map[kshare.TopicPartition]kgo.FetchPartition)
	for ti := range fr.Topics {
		t := &fr.Topics[ti]
		name := names[t.TopicID]
		if name == "" {
			continue
		}
		for pi := range t.Partitions {
			rp := &t.Partitions[pi]
			if rp.ErrorCode != 0 || len(rp.AcquiredRecords) == 0 {
				continue
			}
			fake := kmsg.FetchResponseTopicPartition{
				Partition:        rp.Partition,
				HighWatermark:    -1,
				LastStableOffset: -1,
				LogStartOffset:   -1,
				RecordBatches:    rp.Records,
			}
			fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: name, Partition: rp.Partition}, &fake, c.decomp, nil)
			out[kshare.TopicPartition{Topic: name, Partition: rp.Partition}] = fp
		}
	}
	return out
}

// applyFetchLocked applies a successful ShareFetch answer: the session
// epoch moves on, the partitions listed join the session and the forgotten
// ones leave it, acquired records become acquisitions and the session's
// buffered fetch, offsets without a record are acknowledged GAP, and the
// carried acknowledgements get their per-partition results (the caller
// finishes the jobs once the lock is released).
func (s *session) applyFetchLocked(st step, fr *kmsg.ShareFetchResponse, decoded map[kshare.TopicPartition]kgo.FetchPartition, now time.Time) {
	c := s.c
	s.bo.Reset()
	s.epoch = nextEpoch(st.fetch.ShareSessionEpoch)
	for _, t := range st.fetch.Topics {
		name := c.topicNames[t.TopicID]
		for _, p := range t.Partitions {
			s.inSession[kshare.TopicPartition{Topic: name, Partition: p.Partition}] = struct{}{}
		}
	}
	for _, t := range st.fetch.ForgottenTopicsData {
		name := c.topicNames[t.TopicID]
		for _, p := range t.Partitions {
			delete(s.inSession, kshare.TopicPartition{Topic: name, Partition: p})
		}
	}
	if fr.AcquisitionLockTimeoutMillis > 0 {
		if d := time.Duration(fr.AcquisitionLockTimeoutMillis) * time.Millisecond; d != s.lockDur {
			s.lockDur = d
			s.renewRescanLocked()
		}
	} else if s.lockDur == 0 {
		s.lockDur = defaultLockDuration
	}
	deadline := st.sentAt.Add(s.lockDur)

	answered := make(map[kshare.TopicPartition]int16)
	res := &fetchResult{}
	gaps := &ackJob{}
	for ti := range fr.Topics {
		t := &fr.Topics[ti]
		name, ok := c.topicNames[t.TopicID]
		if !ok {
			c.logger.Warn("ShareFetch answered a topic id the consumer does not know", "node", s.node, "topic_id", fmt.Sprintf("%x", t.TopicID))
			continue
		}
		for pi := range t.Partitions {
			rp := &t.Partitions[pi]
			tp := kshare.TopicPartition{Topic: name, Partition: rp.Partition}
			answered[tp] = rp.AcknowledgeErrorCode
			if rp.ErrorCode != 0 {
				s.partitionErrorLocked(tp, "ShareFetch", rp.ErrorCode, rp.ErrorMessage, now)
				continue
			}
			if len(rp.AcquiredRecords) == 0 {
				c.noteFirstFetchLocked(tp, -1)
				continue
			}
			first := rp.AcquiredRecords[0].FirstOffset
			for _, ar := range rp.AcquiredRecords {
				first = min(first, ar.FirstOffset)
			}
			c.noteFirstFetchLocked(tp, first)
			epoch := int32(-1)
			if known, ok := st.epochs[tp]; ok && known.id == t.TopicID {
				epoch = known.epoch
			}
			s.acquireLocked(tp, t.TopicID, rp, decoded[tp], deadline, epoch, res, gaps)
		}
	}
	// A partition that joined the session with this request and is not in
	// the answer had nothing to hand out.
	for _, t := range st.fetch.Topics {
		name := c.topicNames[t.TopicID]
		for _, p := range t.Partitions {
			if tp := (kshare.TopicPartition{Topic: name, Partition: p.Partition}); !answeredTP(answered, tp) {
				c.noteFirstFetchLocked(tp, -1)
			}
		}
	}
	for _, j := range st.jobs {
		for tp := range j.parts {
			code, ok := answered[tp]
			switch {
			case !ok:
				j.fail(tp, errNoResponse)
			case code != 0:
				j.fail(tp, kerr.ErrorForCode(code))
			}
		}
	}
	if len(gaps.parts) > 0 {
		s.outbox = append(s.outbox, gaps)
	}
	if len(res.groups) > 0 {
		s.buffered = res
		// Renewed until Poll takes them (dueRenewalsLocked).
		s.renewDueByLocked(deadline)
		c.signalReady()
		c.startEagerRoundLocked()
	}
	if c.slow && len(res.groups) == 0 {
		c.passTurnLocked(s) // nothing here: the Poll asks the next leader
	}
}

// acquireLocked turns the AcquiredRecords of one partition into
// acquisitions holding the decoded records that fall inside them. Decoded
// records outside every range were not acquired by this member and are
// dropped; acquired offsets without a record (control records, compacted
// gaps) are acknowledged GAP at once, or RELEASE when a batch failed to
// decode so that the broker delivers it again.
func (s *session) acquireLocked(tp kshare.TopicPartition, id [16]byte, rp *kmsg.ShareFetchResponseTopicPartition, fp kgo.FetchPartition, deadline time.Time, leaderEpoch int32, res *fetchResult, gaps *ackJob) {
	c := s.c
	ranges := append([]kmsg.ShareFetchResponseTopicPartitionAcquiredRecord(nil), rp.AcquiredRecords...)
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].FirstOffset < ranges[j].FirstOffset })
	gapType := wire.AckGap
	if fp.Err != nil {
		gapType = wire.AckRelease
		c.logger.Warn("share fetch batch failed to decode; releasing its offsets", "topic", tp.Topic, "partition", tp.Partition, "err", fp.Err)
	}
	recs := fp.Records
	ri := 0
	prevLast := int64(-1)
	for _, ar := range ranges {
		span := ar.LastOffset - ar.FirstOffset + 1
		if ar.FirstOffset < 0 || span <= 0 || span > maxAcquiredSpan || ar.FirstOffset <= prevLast {
			c.logger.Warn("ignoring a malformed AcquiredRecords range", "topic", tp.Topic, "partition", tp.Partition,
				"first", ar.FirstOffset, "last", ar.LastOffset)
			continue
		}
		prevLast = ar.LastOffset
		d := &delivery{count: max(ar.DeliveryCount, 1)}
		tagged := context.WithValue(context.Background(), deliveryKey{}, d)
		a := &acquisition{
			delivery:    d,
			tp:          tp,
			topicID:     id,
			sess:        s,
			first:       ar.FirstOffset,
			deliveries:  max(ar.DeliveryCount, 1),
			deadline:    deadline,
			lockDur:     s.lockDur,
			leaderEpoch: leaderEpoch,
			states:      make([]recState, span),
		}
		if c.cfg.mode == Explicit {
			a.decisions = make([]wire.AckType, span)
		}
		g := acqRecords{acq: a}
		var gapBatches []wire.AcknowledgementBatch
		addGap := func(first, last int64) {
			gapBatches = append(gapBatches, wire.AcknowledgementBatch{FirstOffset: first, LastOffset: last, AcknowledgeType: gapType})
		}
		next := ar.FirstOffset
		for ri < len(recs) && recs[ri].Offset < ar.FirstOffset {
			ri++
		}
		for ri < len(recs) && recs[ri].Offset <= ar.LastOffset {
			r := recs[ri]
			ri++
			if r.Offset < next {
				continue // a duplicate in the batches; keep the first
			}
			if r.Offset > next {
				addGap(next, r.Offset-1)
			}
			a.set(int(r.Offset-a.first), stBuffered)
			r.Context = tagged
			g.recs = append(g.recs, r)
			next = r.Offset + 1
		}
		if next <= ar.LastOffset {
			addGap(next, ar.LastOffset)
		}
		gaps.add(tp, id, gapBatches)
		c.held.add(a)
		if len(g.recs) > 0 {
			res.groups = append(res.groups, g)
		}
	}
}

// partitionErrorLocked handles a partition-level error of a ShareFetch or
// ShareAcknowledge. Leadership errors mean the locks of the partition at
// this node are gone and the leader must be looked up again; other errors
// reach Poll.
func (s *session) partitionErrorLocked(tp kshare.TopicPartition, api string, code int16, msg *string, now time.Time) {
	err := fmt.Errorf("%s %s/%d at node %d: %w%s", api, tp.Topic, tp.Partition, s.node, kerr.ErrorForCode(code), kgoclient.Detail(msg))
	switch code {
	case kerr.NotLeaderForPartition.Code, kerr.FencedLeaderEpoch.Code, kerr.UnknownTopicOrPartition.Code,
		kerr.UnknownTopicID.Code, kerr.LeaderNotAvailable.Code, kerr.KafkaStorageError.Code:
		s.c.logger.Debug("partition moved or unavailable; refreshing metadata", "err", err)
		s.needMeta = true
		s.c.held.kill(func(a *acquisition) bool { return a.sess == s && a.tp == tp })
		s.backoffLocked(now)
	default:
		s.c.logger.Warn("share partition error", "err", err)
		s.c.queueErrLocked(err)
		s.backoffLocked(now)
	}
}

func answeredTP(answered map[kshare.TopicPartition]int16, tp kshare.TopicPartition) bool {
	_, ok := answered[tp]
	return ok
}
