package shareconsumer

import (
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/internal/retry"
	"github.com/kshare-go/kshare/wire"
)

// Share session epochs (KIP-932): 0 opens a session, -1 closes it, and
// every other request carries the next epoch, wrapping to 1.
const (
	openEpoch  int32 = 0
	finalEpoch int32 = -1
)

func nextEpoch(e int32) int32 {
	if e == 1<<31-1 {
		return 1
	}
	return e + 1
}

// requestGrace is added to MaxWait to bound one share request: a healthy
// broker answers within MaxWait plus the round trip.
const requestGrace = 15 * time.Second

// ackMaxWait caps the MaxWait of a ShareFetch that carries
// acknowledgements.
const ackMaxWait = 500 * time.Millisecond

// session is the share session with one partition leader, and the
// goroutine that owns it: it alone sends ShareFetch and ShareAcknowledge to
// that leader, one at a time, as the broker requires. Fields are guarded by
// the consumer's mutex.
type session struct {
	c    *Consumer
	node int32
	wake chan struct{}

	want      map[kshare.TopicPartition]struct{} // assigned partitions this node leads
	inSession map[kshare.TopicPartition]struct{} // partitions the broker's session holds
	epoch     int32
	gen       uint64 // bumped at every reset; answers to older requests are stale
	buffered  *fetchResult
	outbox    []*ackJob
	retryAt   time.Time
	bo        backoff.BackOff
	needMeta  bool
	lockDur   time.Duration
	renewCap  int8 // 0 unknown, 1 ShareAcknowledge v2 (RENEW), -1 not
	// renewAt is when a staged record of this session is due for renewal
	// next (zero: none), as the last scan found; renewStale forces a scan
	// sooner (records staged, a renewal given up, the lock duration
	// changed). Without it every step of the session scanned every staged
	// record.
	renewAt    time.Time
	renewStale bool
	// aheadGen is the Poll (Consumer.pollGen) for which the session last
	// fetched ahead of the application.
	aheadGen uint64
	// closeOnFence asks for the session to be closed (final epoch) and
	// opened again: the member was fenced.
	closeOnFence bool
	// steps and renewScans count the session's steps and its full scans
	// of the staged records, so that tests can assert that scans do not
	// grow with steps.
	steps, renewScans int
}

// fetchResult is one ShareFetch's records, grouped by acquisition.
type fetchResult struct {
	groups []acqRecords
}

type acqRecords struct {
	acq  *acquisition
	recs []*kgo.Record
}

// sessionLocked returns the session with node, starting it if needed; nil
// once the consumer is closing.
func (c *Consumer) sessionLocked(node int32) *session {
	if s := c.sessions[node]; s != nil {
		return s
	}
	if c.closing {
		return nil
	}
	s := &session{
		c:          c,
		node:       node,
		wake:       make(chan struct{}, 1),
		want:       make(map[kshare.TopicPartition]struct{}),
		inSession:  make(map[kshare.TopicPartition]struct{}),
		bo:         retry.NewBackoff(),
		renewStale: true,
	}
	c.sessions[node] = s
	c.sessOrder = append(c.sessOrder, s)
	c.sessWG.Add(1)
	go s.run()
	return s
}

func (s *session) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

type stepKind int

const (
	stepWait stepKind = iota
	stepMeta
	stepProbe
	stepFetch
	stepAck
	stepClose
	stepFail
	stepExit
)

// step is what the session does next, decided under the consumer's mutex
// and carried out without it.
type step struct {
	kind   stepKind
	until  time.Time // stepWait: zero waits for a wake-up only
	fetch  *kmsg.ShareFetchRequest
	ack    *kmsg.ShareAcknowledgeRequest
	jobs   []*ackJob
	renews renewals
	epochs map[kshare.TopicPartition]topicEpoch // stepFetch: the leader epochs known when it was sent
	gen    uint64
	sentAt time.Time
	err    error // stepFail: why jobs fail
}

func (s *session) run() {
	defer s.c.sessWG.Done()
	defer s.failOutbox(errConsumerClosing)
	for {
		s.c.mu.Lock()
		st := s.nextLocked(time.Now())
		s.c.mu.Unlock()
		switch st.kind {
		case stepExit:
			return
		case stepWait:
			if !s.sleep(st.until) {
				return
			}
		case stepMeta:
			s.refreshMeta()
		case stepProbe:
			s.probeRenew()
		case stepFetch:
			s.doFetch(st)
		case stepAck:
			s.doAck(st)
		case stepClose:
			s.doAck(st)
			return
		case stepFail:
			failAll(st.jobs, st.err)
		}
		if s.c.bgCtx.Err() != nil {
			return
		}
	}
}

// sleep waits for a wake-up or until (if set); false when the consumer is
// being torn down.
func (s *session) sleep(until time.Time) bool {
	var timer <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-s.wake:
	case <-timer:
	case <-s.c.bgCtx.Done():
		return false
	}
	return true
}

// failOutbox fails every queued job; the session is going away.
func (s *session) failOutbox(err error) {
	s.c.mu.Lock()
	jobs := s.outbox
	s.outbox = nil
	s.c.mu.Unlock()
	for _, j := range jobs {
		j.failAll(err)
	}
}

// nextLocked decides the next step: close when the consumer closes; renew
// locks that are due; fetch when no fetch is buffered (carrying queued
// acknowledgements) or when partitions must leave the session; otherwise
// send queued acknowledgements on their own; otherwise wait.
func (s *session) nextLocked(now time.Time) step {
	c := s.c
	s.steps++
	if c.closing {
		if s.epoch == openEpoch {
			return step{kind: stepExit}
		}
		return s.closeStepLocked(now)
	}
	if now.Before(s.retryAt) {
		return step{kind: stepWait, until: s.retryAt}
	}
	if s.closeOnFence {
		s.closeOnFence = false
		if s.epoch != openEpoch {
			// The member was fenced: the final epoch releases what it
			// held here; the session opens again after.
			return s.ackStepLocked(now, finalEpoch)
		}
	}
	if s.needMeta {
		s.needMeta = false
		return step{kind: stepMeta}
	}
	due, nextDue := s.dueRenewalsLocked(now)
	if !due.empty() && s.epoch != openEpoch {
		switch s.renewCap {
		case 0:
			return step{kind: stepProbe}
		case 1:
			return s.renewStepLocked(now, due)
		default:
			s.renewUnsupportedLocked(due)
		}
	}
	idle := c.idleLocked(now)
	if idle && s.buffered != nil {
		s.releaseIdleLocked()
	}
	if idle {
		c.releaseIdleRoundLocked()
	}
	// A ShareFetch fetches every partition of the session, so none goes
	// out while a fetch is still buffered; leaving partitions waits too.
	// While a Poll waits, the session long-polls its leader. Otherwise it
	// fetches ahead of the application once per Poll, without waiting at
	// the leader, and only when it can renew what it fetched until Poll
	// takes it: a consumer that stops polling does not keep taking
	// records (those it released among them) from the group.
	if forget := s.forgetLocked(); s.buffered == nil && (len(s.want) > 0 || len(forget) > 0) {
		switch {
		case c.polling && c.slow && (c.fetcherLocked() != s || c.bufferedLocked()):
			// An application slower than MaxPollInterval: one leader at
			// a time, and none while records wait for the Poll, so that
			// no answer comes in that the Poll does not take.
		case c.polling:
			return s.fetchStepLocked(now, forget, true)
		case idle || c.slow || s.renewCap < 0 || s.aheadGen == c.pollGen || !s.aheadWindowLocked(now):
			// Wait for a Poll.
		case s.renewCap == 0:
			return step{kind: stepProbe}
		default:
			s.aheadGen = c.pollGen
			return s.fetchStepLocked(now, forget, false)
		}
	}
	if len(s.outbox) > 0 {
		if s.epoch == openEpoch {
			// No session, so no lock of it stands: there is nothing
			// these acknowledgements could still apply to.
			jobs := s.outbox
			s.outbox = nil
			return step{kind: stepFail, jobs: jobs, err: fmt.Errorf("share session with node %d is not open: %w", s.node, ErrLockExpired)}
		}
		return s.ackStepLocked(now, s.epoch)
	}
	until := nextDue
	if (s.buffered != nil || c.round != nil) && !c.polling && !c.lastPoll.IsZero() {
		// What it fetched ahead, or a round looked up, goes back if no
		// Poll comes by then.
		if at := c.lastPoll.Add(c.cfg.maxPollInterval); at.After(now) && (until.IsZero() || at.Before(until)) {
			until = at
		}
	}
	return step{kind: stepWait, until: until}
}

// aheadWindowLocked reports whether the session may still fetch ahead of
// the application for the Poll that last returned: within a quarter lock
// of it, and only while the application has given no records back since
// (Release, an aborted transaction, a checkpoint dropped). A fetch ahead
// acquires whatever the leader has, and a late one, or one after a
// release, would take back the records this consumer just gave up (their
// locks ran out, or it released them) and hold them, renewed, for an
// application that may not poll again soon: the group would not get them.
func (s *session) aheadWindowLocked(now time.Time) bool {
	c := s.c
	window := s.lockDur / 4
	if window == 0 {
		window = defaultLockDuration / 4
	}
	return !c.releasedSincePoll && now.Before(c.lastPoll.Add(window))
}

// idleLocked reports whether no Poll waits and the application has not
// polled yet, or not for MaxPollInterval: records fetched ahead of it go
// back to the group, and no more are fetched until it polls. A consumer
// fetches nothing before its first Poll, so that one created long before
// it is used holds no records from the group. A Poll waiting for a ledger
// round is a Poll that waits (it only stops the sessions' long polls):
// the round's records stay renewed however long the lookup takes.
func (c *Consumer) idleLocked(now time.Time) bool {
	return !c.polling && !c.inPoll && (c.lastPoll.IsZero() || now.Sub(c.lastPoll) >= c.cfg.maxPollInterval)
}

// noteSlowLocked notes that n records fetched ahead (of node's session, or
// -1 for a ledger round's) were released for an application that stopped
// polling: each release costs the records a delivery (the leader counted
// it when it handed them out), and an application that keeps polling this
// slowly must not pay it again and again, so from now on the consumer
// fetches only while a Poll waits.
func (c *Consumer) noteSlowLocked(node int32, n int) {
	if n == 0 || c.slow {
		return
	}
	c.slow = true
	c.logger.Warn("no Poll for the max poll interval: the records fetched ahead of the application are released (each release counts towards their delivery limit); from now on the consumer fetches only while a Poll waits, from one leader at a time",
		"node", node, "records", n, "max_poll_interval", c.cfg.maxPollInterval)
}

// releaseIdleLocked gives back the records the session fetched ahead for
// an application that stopped polling (MaxPollInterval): without Polls
// nothing bounds how long renewals would hold them from the group.
func (s *session) releaseIdleLocked() {
	c := s.c
	js := jobSet{quiet: true}
	n := 0
	now := time.Now()
	for _, g := range s.buffered.groups {
		a := g.acq
		if !a.usable(now) {
			if !a.dead { // expired unseen: nothing to release
				expired := 0
				for _, st := range a.states {
					if st == stBuffered {
						expired++
					}
				}
				c.noteExpiredUnseenLocked(expired, a.tp.Topic, a.tp.Partition, now)
			}
			a.take(func(idx int) (wire.AckType, bool) { return 0, a.states[idx] == stBuffered })
			c.held.compact(a.tp)
			continue
		}
		js.add(a, a.take(func(idx int) (wire.AckType, bool) {
			if a.states[idx] != stBuffered {
				return 0, false
			}
			n++
			return wire.AckRelease, true
		}))
		c.held.compact(a.tp)
	}
	s.buffered = nil
	c.metrics.ReleasedUnseen += int64(n)
	c.queueLocked(js)
	c.noteSlowLocked(s.node, n)
}

// fetcherLocked returns the session whose turn it is to fetch for a
// waiting Poll when the application is slow (Consumer.slow): the next one
// from fetchTurn that has partitions to fetch.
func (c *Consumer) fetcherLocked() *session {
	n := len(c.sessOrder)
	for i := range n {
		if s := c.sessOrder[(c.fetchTurn+i)%n]; len(s.want) > 0 {
			return s
		}
	}
	return nil
}

// bufferedLocked reports whether a session holds records for Poll.
func (c *Consumer) bufferedLocked() bool {
	for _, s := range c.sessOrder {
		if s.buffered != nil {
			return true
		}
	}
	return false
}

// passTurnLocked gives the turn to fetch for a slow application to the
// session after s, and wakes it.
func (c *Consumer) passTurnLocked(s *session) {
	n := len(c.sessOrder)
	for i, t := range c.sessOrder {
		if t == s {
			c.fetchTurn = (i + 1) % n
			break
		}
	}
	if next := c.fetcherLocked(); next != nil {
		next.poke()
	}
}

// forgetLocked lists the partitions in the broker's session that this
// session no longer wants.
func (s *session) forgetLocked() []kshare.TopicPartition {
	if s.epoch == openEpoch {
		return nil
	}
	var out []kshare.TopicPartition
	for tp := range s.inSession {
		if _, ok := s.want[tp]; !ok {
			out = append(out, tp)
		}
	}
	return out
}

// drainOutboxLocked moves every queued job into req-building form: the
// batches of each partition, sorted, with the jobs that own them.
func (s *session) drainOutboxLocked() ([]*ackJob, map[kshare.TopicPartition]*jobPart) {
	jobs := s.outbox
	s.outbox = nil
	if len(jobs) == 0 {
		return nil, nil
	}
	merged := make(map[kshare.TopicPartition]*jobPart)
	for _, j := range jobs {
		if j.quiet {
			s.dropHeldLocked(j)
		}
		for tp, p := range j.parts {
			m := merged[tp]
			if m == nil {
				m = &jobPart{topicID: p.topicID}
				merged[tp] = m
			}
			m.batches = append(m.batches, p.batches...)
		}
	}
	for _, m := range merged {
		sortedBatches(m.batches)
	}
	return jobs, merged
}

// dropHeldLocked removes from a release job every offset that the
// consumer holds again: a newer delivery of the record, which the release
// must not touch.
func (s *session) dropHeldLocked(j *ackJob) {
	for tp, p := range j.parts {
		var kept []wire.AcknowledgementBatch
		f := finder{p: s.c.held.parts[tp]}
		for _, b := range p.batches {
			start := b.FirstOffset
			for off := b.FirstOffset; off <= b.LastOffset+1; off++ {
				held := false
				if off <= b.LastOffset {
					_, _, held = f.find(off)
				}
				if off > b.LastOffset || held {
					if off > start {
						kept = append(kept, wire.AcknowledgementBatch{FirstOffset: start, LastOffset: off - 1, AcknowledgeType: b.AcknowledgeType})
					}
					start = off + 1
				}
			}
		}
		p.batches = kept
		if len(kept) == 0 {
			delete(j.parts, tp)
		}
	}
}

// fetchStepLocked builds the next ShareFetch; long says whether the
// leader may hold it for MaxWait when it has nothing to hand out.
func (s *session) fetchStepLocked(now time.Time, forget []kshare.TopicPartition, long bool) step {
	c := s.c
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID = &c.cfg.group
	req.MemberID = &c.memberID
	req.ShareSessionEpoch = s.epoch
	req.MaxWaitMillis = int32(c.cfg.maxWait / time.Millisecond)
	req.MinBytes = 1
	req.MaxBytes = c.cfg.maxBytes
	req.MaxRecords = c.cfg.maxRecords
	req.BatchSize = c.cfg.maxRecords
	req.ShareAcquireMode = int8(c.cfg.acquireMode) // a v1 broker ignores it
	topics := make(map[[16]byte]int)
	addPart := func(tp kshare.TopicPartition, id [16]byte) *kmsg.ShareFetchRequestTopicPartition {
		ti, ok := topics[id]
		if !ok {
			ti = len(req.Topics)
			topics[id] = ti
			req.Topics = append(req.Topics, kmsg.ShareFetchRequestTopic{TopicID: id})
		}
		t := &req.Topics[ti]
		for i := range t.Partitions {
			if t.Partitions[i].Partition == tp.Partition {
				return &t.Partitions[i]
			}
		}
		t.Partitions = append(t.Partitions, kmsg.ShareFetchRequestTopicPartition{Partition: tp.Partition})
		return &t.Partitions[len(t.Partitions)-1]
	}
	for tp := range s.want {
		if _, ok := s.inSession[tp]; ok && s.epoch != openEpoch {
			continue // incremental session: already fetching it
		}
		if id, ok := c.topicIDs[tp.Topic]; ok {
			addPart(tp, id)
		}
	}
	var jobs []*ackJob
	if s.epoch != openEpoch {
		var merged map[kshare.TopicPartition]*jobPart
		jobs, merged = s.drainOutboxLocked()
		for tp, m := range merged {
			p := addPart(tp, m.topicID)
			p.AcknowledgementBatches = toFetchBatches(m.batches)
			_, wanted := s.want[tp]
			_, in := s.inSession[tp]
			if !in && !wanted {
				// Listing a partition adds it to the session; one
				// that is here only for its acknowledgements leaves
				// it again in the same request.
				forget = append(forget, tp)
			}
		}
	}
	forgotten := make(map[[16]byte]int)
	for _, tp := range forget {
		id, ok := c.topicIDs[tp.Topic]
		if !ok {
			continue
		}
		fi, ok := forgotten[id]
		if !ok {
			fi = len(req.ForgottenTopicsData)
			forgotten[id] = fi
			req.ForgottenTopicsData = append(req.ForgottenTopicsData, kmsg.ShareFetchRequestForgottenTopicsData{TopicID: id})
		}
		req.ForgottenTopicsData[fi].Partitions = append(req.ForgottenTopicsData[fi].Partitions, tp.Partition)
	}
	switch {
	case len(s.want) == 0 || !long:
		req.MaxWaitMillis = 0 // only leaving partitions or acknowledging, or fetching ahead
	case len(jobs) > 0 && c.cfg.maxWait > ackMaxWait:
		// The broker holds the acknowledgements' answer as long as the
		// fetch; keep a waiting Commit short.
		req.MaxWaitMillis = int32(ackMaxWait / time.Millisecond)
	}
	if !s.renewAt.IsZero() {
		// A renewal due while the leader holds the fetch would wait for
		// its answer, and a short lock could run out meanwhile.
		if d := s.renewAt.Sub(now); d < time.Duration(req.MaxWaitMillis)*time.Millisecond {
			req.MaxWaitMillis = int32(max(d, 0) / time.Millisecond)
		}
	}
	return step{kind: stepFetch, fetch: req, jobs: jobs, epochs: c.leaderEpochs, gen: s.gen, sentAt: now}
}

func toFetchBatches(b []wire.AcknowledgementBatch) []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch {
	out := make([]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch, len(b))
	for i, x := range b {
		out[i] = kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{
			FirstOffset: x.FirstOffset, LastOffset: x.LastOffset, AcknowledgeTypes: []int8{int8(x.AcknowledgeType)},
		}
	}
	return out
}

func toAckBatches(b []wire.AcknowledgementBatch) []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch {
	out := make([]kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch, len(b))
	for i, x := range b {
		out[i] = kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{
			FirstOffset: x.FirstOffset, LastOffset: x.LastOffset, AcknowledgeTypes: []int8{int8(x.AcknowledgeType)},
		}
	}
	return out
}

// newAckRequest builds a ShareAcknowledge of merged batches.
func (s *session) newAckRequest(epoch int32, merged map[kshare.TopicPartition]*jobPart) *kmsg.ShareAcknowledgeRequest {
	c := s.c
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID = &c.cfg.group
	req.MemberID = &c.memberID
	req.ShareSessionEpoch = epoch
	topics := make(map[[16]byte]int)
	for tp, m := range merged {
		ti, ok := topics[m.topicID]
		if !ok {
			ti = len(req.Topics)
			topics[m.topicID] = ti
			req.Topics = append(req.Topics, kmsg.ShareAcknowledgeRequestTopic{TopicID: m.topicID})
		}
		req.Topics[ti].Partitions = append(req.Topics[ti].Partitions, kmsg.ShareAcknowledgeRequestTopicPartition{
			Partition: tp.Partition, AcknowledgementBatches: toAckBatches(m.batches),
		})
	}
	return req
}

func (s *session) ackStepLocked(now time.Time, epoch int32) step {
	jobs, merged := s.drainOutboxLocked()
	return step{kind: stepAck, ack: s.newAckRequest(epoch, merged), jobs: jobs, gen: s.gen, sentAt: now}
}

func (s *session) closeStepLocked(now time.Time) step {
	st := s.ackStepLocked(now, finalEpoch)
	st.kind = stepClose
	return st
}

// send issues req to the session's broker, bounded by MaxWait plus a grace
// period and by the consumer's lifetime.
func (s *session) send(req kmsg.Request) (kmsg.Response, error) {
	ctx, cancel := context.WithTimeout(s.c.bgCtx, s.c.cfg.maxWait+requestGrace)
	defer cancel()
	return s.c.cl.Broker(int(s.node)).Request(ctx, req)
}

// resetLocked ends the session after an error: the broker ties records to
// the session, so every lock of it is gone. Queued acknowledgements fail.
func (s *session) resetLocked(cause error) []*ackJob {
	s.epoch = openEpoch
	s.gen++
	clear(s.inSession)
	s.buffered = nil
	s.c.held.kill(func(a *acquisition) bool { return a.sess == s })
	jobs := s.outbox
	s.outbox = nil
	s.c.logger.Debug("share session reset", "node", s.node, "err", cause)
	return jobs
}

// dropHeldForCloseLocked forgets what the session holds and has buffered:
// it is about to be closed with the final epoch (the member was fenced),
// which releases every record of it at the leader.
func (s *session) dropHeldForCloseLocked() {
	s.buffered = nil
	s.c.held.kill(func(a *acquisition) bool { return a.sess == s })
}

// backoffLocked delays the next request of the session.
func (s *session) backoffLocked(now time.Time) {
	s.retryAt = now.Add(s.bo.NextBackOff())
}

// doFetch sends a ShareFetch and applies its answer.
func (s *session) doFetch(st step) {
	c := s.c
	resp, err := s.send(st.fetch)
	var decoded map[kshare.TopicPartition]kgo.FetchPartition
	var fr *kmsg.ShareFetchResponse
	if err == nil {
		fr = resp.(*kmsg.ShareFetchResponse)
		if fr.ErrorCode == 0 {
			decoded = s.decode(fr)
		}
	}
	now := time.Now()
	c.mu.Lock()
	var failJobs []*ackJob
	var jobErr error
	switch {
	case err != nil:
		if c.bgCtx.Err() != nil {
			c.mu.Unlock()
			failAll(st.jobs, errConsumerClosing)
			return
		}
		jobErr = fmt.Errorf("ShareFetch to node %d: %w", s.node, err)
		if st.gen == s.gen {
			failJobs = s.resetLocked(jobErr)
		}
		s.needMeta = true
		s.backoffLocked(now)
	case st.gen != s.gen:
		jobErr = fmt.Errorf("share session with node %d was reset: %w", s.node, ErrLockExpired)
		if fr.ErrorCode == 0 && s.epoch == openEpoch {
			// The session was reset (the member fenced) while this
			// fetch was at the leader, which answered it: the leader
			// keeps that session, and the records it acquired for the
			// member in it, and a new session (epoch 0) would not
			// release them. Close it with the final epoch, which
			// releases them; it opens again after.
			s.epoch = nextEpoch(st.fetch.ShareSessionEpoch)
			s.closeOnFence = true
		}
	case fr.ErrorCode != 0:
		jobErr = fmt.Errorf("ShareFetch to node %d: %w%s", s.node, kerr.ErrorForCode(fr.ErrorCode), kgoclient.Detail(fr.ErrorMessage))
		failJobs = s.resetLocked(jobErr)
		s.topLevelErrorLocked(fr.ErrorCode, jobErr, now)
	default:
		s.applyFetchLocked(st, fr, decoded, now)
		if s.closeOnFence {
			// The member was fenced while the fetch was at the leader:
			// the session closes next, releasing what it acquired.
			s.dropHeldForCloseLocked()
		}
	}
	if jobErr != nil && c.slow && c.fetcherLocked() == s {
		// A leader that fails does not keep the turn to fetch for a
		// slow application: the others' partitions would wait for it.
		c.passTurnLocked(s)
	}
	c.mu.Unlock()
	if jobErr != nil {
		failAll(st.jobs, jobErr)
		failAll(failJobs, jobErr)
		return
	}
	for _, j := range st.jobs {
		s.finishJob(j)
	}
}

// topLevelErrorLocked decides what follows a request-level error: a lost
// session reopens at once; anything else waits, and errors the consumer
// cannot fix reach Poll.
func (s *session) topLevelErrorLocked(code int16, err error, now time.Time) {
	switch code {
	case kerr.ShareSessionNotFound.Code, kerr.InvalidShareSessionEpoch.Code:
		return
	case kerr.UnknownMemberID.Code, kerr.FencedMemberEpoch.Code:
		// The heartbeat loop rejoins; the session reopens after it.
		s.backoffLocked(now)
		s.c.pokeHeartbeat()
	case kerr.NotLeaderForPartition.Code, kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicID.Code:
		s.needMeta = true
		s.backoffLocked(now)
	default:
		s.backoffLocked(now)
		s.c.queueErrLocked(err)
	}
}

func failAll(jobs []*ackJob, err error) {
	for _, j := range jobs {
		j.failAll(err)
	}
}
