package shareconsumer

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/wire"
)

// Ack marks r, a record returned by Poll, with t (kshare.AckAccept,
// AckRelease or AckReject), in Explicit mode. The mark is sent by Commit,
// CommitAsync, the next Poll or Close; marking a record again before that
// replaces the mark. It fails with kshare.ErrUsage outside Explicit mode
// or for another type, ErrNotHeld (kshare.ErrUsage) for a record the
// consumer does not hold, ErrLockExpired (kshare.ErrAbortable) when the
// record's lock is gone (the broker will deliver it again; do not treat
// it as processed), and kshare.ErrClosed after Close.
func (c *Consumer) Ack(r *kgo.Record, t kshare.AckType) error {
	const op = "ack"
	if !c.made() {
		return errNotMade(op)
	}
	if c.cfg.mode != Explicit {
		return errWrongMode(op, c.cfg.mode)
	}
	if t != kshare.AckAccept && t != kshare.AckRelease && t != kshare.AckReject {
		return errs.Usage(op, fmt.Errorf("acknowledgement type %s: only ACCEPT, RELEASE and REJECT", t))
	}
	if r == nil {
		return fmt.Errorf("Ack of a nil record: %w", ErrNotHeld)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return errClosed(op)
	}
	a, idx, ok := c.held.find(kshare.TopicPartition{Topic: r.Topic, Partition: r.Partition}, r.Offset)
	if !ok {
		return fmt.Errorf("%s/%d offset %d (released or acknowledged since Poll returned it, forgotten after its lock ended, or never returned by Poll): %w", r.Topic, r.Partition, r.Offset, ErrNotHeld)
	}
	if !a.usable(time.Now()) {
		return fmt.Errorf("%s/%d offset %d: %w", r.Topic, r.Partition, r.Offset, ErrLockExpired)
	}
	if d := deliveryOf(r); d != nil && d != a.delivery && a.states[idx] != stBuffered {
		return fmt.Errorf("%s/%d offset %d: delivery %d ended, delivery %d holds it: %w", r.Topic, r.Partition, r.Offset, d.count, a.deliveries, ErrLockExpired)
	}
	switch a.states[idx] {
	case stDelivered, stDecided:
	case stBuffered:
		return fmt.Errorf("%s/%d offset %d was delivered again since Poll returned it: %w", r.Topic, r.Partition, r.Offset, ErrLockExpired)
	default:
		return fmt.Errorf("%s/%d offset %d is no longer held (released or acknowledged since Poll returned it, or never returned by Poll): %w", r.Topic, r.Partition, r.Offset, ErrNotHeld)
	}
	a.states[idx] = stDecided
	a.decisions[idx] = wire.AckType(t)
	c.decided[a] = struct{}{}
	return nil
}

// AckOffset marks the record at offset of topic's partition, as Poll
// returned it, with t: Ack for an application that keeps where its
// records came from rather than the records (the Java client's
// acknowledge(topic, partition, offset, type)). It marks the latest
// delivery the consumer holds at that offset, and fails as Ack does.
func (c *Consumer) AckOffset(topic string, partition int32, offset int64, t kshare.AckType) error {
	return c.Ack(&kgo.Record{Topic: topic, Partition: partition, Offset: offset}, t)
}

// sendDecidedLocked queues every mark made by Ack on the sessions; op, if
// set, learns the outcome. It reports whether anything was queued.
func (c *Consumer) sendDecidedLocked(op *ackOp) bool {
	now := time.Now()
	js := jobSet{op: op}
	released := false
	for a := range c.decided {
		delete(c.decided, a)
		if !a.usable(now) {
			continue
		}
		js.add(a, a.take(func(idx int) (wire.AckType, bool) {
			take := a.states[idx] == stDecided
			released = released || (take && a.decisions[idx] == wire.AckRelease)
			return a.decisions[idx], take
		}))
		c.held.compact(a.tp)
	}
	if released {
		// What the application gave back goes to the group, not to this
		// consumer's next fetch ahead (aheadWindowLocked).
		c.releasedSincePoll = true
	}
	c.queueLocked(js)
	return len(js.jobs) > 0
}

// Commit sends every mark made by Ack and waits for the brokers' answers,
// within ctx. It returns nil when every partition applied them; an
// *AckError (kshare.ErrAbortable) naming the partitions that did not,
// whose records come back to the group (a mark whose lock expired is not
// sent and not reported: the record is delivered again); a
// kshare.ErrAbortable error wrapping ctx's if ctx ends first (the marks
// are still sent; those that do not take effect come back); and
// kshare.ErrUsage outside Explicit mode or kshare.ErrClosed after Close.
func (c *Consumer) Commit(ctx context.Context) error {
	const op = "commit acknowledgements"
	if ctx == nil {
		return errNilContext(op)
	}
	o, err := c.commit(op, nil)
	if err != nil || o == nil {
		return err
	}
	select {
	case <-o.done:
		return o.result()
	case <-ctx.Done():
		return errs.Abortable(op, fmt.Errorf("waiting for the brokers' answers: %w", ctx.Err()))
	}
}

// CommitAsync sends every mark made by Ack and calls onDone (if not nil)
// once with what Commit would return. onDone runs on a consumer goroutine
// (or on the caller's, when there is nothing to send or the call fails) and
// must not block.
func (c *Consumer) CommitAsync(onDone func(error)) {
	o, err := c.commit("commit acknowledgements", onDone)
	if onDone != nil && (err != nil || o == nil) {
		onDone(err)
	}
}

func (c *Consumer) commit(op string, onDone func(error)) (*ackOp, error) {
	if !c.made() {
		return nil, errNotMade(op)
	}
	if c.cfg.mode != Explicit {
		return nil, errWrongMode(op, c.cfg.mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil, errClosed(op)
	}
	o := newAckOp(onDone)
	if !c.sendDecidedLocked(o) {
		return nil, nil
	}
	return o, nil
}

// doAck sends a ShareAcknowledge (acknowledgements, renewals, or the final
// one that closes the session) and applies its answer.
func (s *session) doAck(st step) {
	c := s.c
	resp, err := s.send(st.ack)
	now := time.Now()
	final := st.ack.ShareSessionEpoch == finalEpoch
	c.mu.Lock()
	var jobErr error
	var failJobs []*ackJob
	var ar *kmsg.ShareAcknowledgeResponse
	switch {
	case err != nil:
		jobErr = fmt.Errorf("ShareAcknowledge to node %d: %w", s.node, err)
		if c.bgCtx.Err() == nil && !final && st.gen == s.gen {
			failJobs = s.resetLocked(jobErr)
			s.needMeta = true
			s.backoffLocked(now)
		}
	case st.gen != s.gen:
		jobErr = fmt.Errorf("share session with node %d was reset: %w", s.node, ErrLockExpired)
	default:
		ar = resp.(*kmsg.ShareAcknowledgeResponse)
		if ar.ErrorCode != 0 {
			jobErr = fmt.Errorf("ShareAcknowledge to node %d: %w%s", s.node, kerr.ErrorForCode(ar.ErrorCode), kgoclient.Detail(ar.ErrorMessage))
			if !final {
				failJobs = s.resetLocked(jobErr)
				s.topLevelErrorLocked(ar.ErrorCode, jobErr, now)
			}
		}
	}
	if jobErr != nil {
		for _, srs := range st.renews.staged {
			for _, sr := range srs {
				sr.renewing = false
				if sr.forceSent {
					forcedDoneLocked(sr, jobErr)
				}
			}
		}
		s.renewRescanLocked()
		for _, h := range st.renews.held {
			for _, a := range h.acqs {
				a.renewing, a.renewal = false, nil
				a.askAgain() // unless the reset killed a
			}
		}
		c.mu.Unlock()
		failAll(st.jobs, jobErr)
		failAll(failJobs, jobErr)
		return
	}
	if final {
		s.epoch = openEpoch
		if !c.closing { // closed after a fence: it opens again
			clear(s.inSession)
			s.gen++
			s.dropHeldForCloseLocked()
		}
	} else {
		s.epoch = nextEpoch(st.ack.ShareSessionEpoch)
		s.bo.Reset()
	}
	failed := make(map[kshare.TopicPartition]error)
	answered := make(map[kshare.TopicPartition]bool)
	for _, t := range ar.Topics {
		name := c.topicNames[t.TopicID]
		for _, p := range t.Partitions {
			tp := kshare.TopicPartition{Topic: name, Partition: p.Partition}
			answered[tp] = true
			if p.ErrorCode == 0 {
				continue
			}
			failed[tp] = fmt.Errorf("node %d: %w%s", s.node, kerr.ErrorForCode(p.ErrorCode), kgoclient.Detail(p.ErrorMessage))
			switch p.ErrorCode {
			case kerr.NotLeaderForPartition.Code, kerr.FencedLeaderEpoch.Code, kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicID.Code:
				if !final {
					s.needMeta = true
					c.held.kill(func(a *acquisition) bool { return a.sess == s && a.tp == tp })
				}
			}
		}
	}
	for _, req := range st.ack.Topics {
		name := c.topicNames[req.TopicID]
		for _, p := range req.Partitions {
			tp := kshare.TopicPartition{Topic: name, Partition: p.Partition}
			if !answered[tp] {
				failed[tp] = errNoResponse
			}
		}
	}
	if !st.renews.empty() {
		s.applyRenewLocked(st, ar.AcquisitionLockTimeoutMillis, failed, now)
	}
	c.mu.Unlock()
	for _, j := range st.jobs {
		for tp := range j.parts {
			j.fail(tp, failed[tp])
		}
		s.finishJob(j)
	}
}

// finishJob reports a job's outcome; failures of acknowledgements that
// nobody waits for (Implicit mode, gaps) are logged instead.
func (s *session) finishJob(j *ackJob) {
	if j.op == nil {
		for tp, err := range j.failed {
			lvl := slog.LevelWarn
			if j.quiet {
				lvl = slog.LevelDebug
			}
			s.c.logger.Log(context.Background(), lvl, "share acknowledgement failed; the broker will deliver the records again",
				"topic", tp.Topic, "partition", tp.Partition, "err", err)
		}
	}
	j.finish()
}
