package producer

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/internal/txn"
)

// sendItem is a batch and its partition: one partition's part of a produce
// request, or a batch to fail.
type sendItem struct {
	part *partition
	b    *batch
}

// dispatchLoop is the producer's dispatcher goroutine: it wakes on new or
// full batches, completed requests, Flush and linger deadlines, and hands
// ready batches to per-request goroutines. It exits when the producer
// closes.
func (p *Producer) dispatchLoop() {
	defer close(p.loopDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	inflight := make(map[int32]int)
	done := make(chan int32, 64)
	for {
		select {
		case <-p.ctx.Done():
			timer.Stop()
			return
		case <-p.wake:
		case <-timer.C:
		case node := <-done:
			inflight[node]--
		drainDone:
			for {
				select {
				case node := <-done:
					inflight[node]--
				default:
					break drainDone
				}
			}
		}
		next := p.dispatch(inflight, done)
		timer.Stop()
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), 0))
		}
	}
}

// dispatch starts a request for every broker that has ready batches and
// room for another request in flight, fails batches of a transaction that
// can no longer commit, and returns when it next needs to look (a linger or
// retry deadline), or zero.
//
// The state is read once, at the start, so it may be stale by the time a
// partition is looked at: the failed transaction may have ended and the
// next one buffered records. dispatchIn therefore fails only the batches
// of transactions up to txnNum, the one the state concerns.
func (p *Producer) dispatch(inflight map[int32]int, done chan<- int32) time.Time {
	st, txnNum := p.txn.TxnState()
	return p.dispatchIn(st, txnNum, inflight, done)
}

// dispatchIn is dispatch for a state st read together with txnNum.
func (p *Producer) dispatchIn(st txn.State, txnNum uint64, inflight map[int32]int, done chan<- int32) time.Time {
	now := time.Now()
	var failErr error
	switch st {
	case txn.StateAbortableError, txn.StateFatalError:
		failErr = p.txn.Err()
	case txn.StateAborting:
		failErr = errs.Abortable("produce", errors.New("transaction aborted before the record was sent"))
	}
	flushing := p.flushing.Load() > 0 || st == txn.StateCommitting

	var next time.Time
	soon := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	reqs := make(map[int32][]sendItem)
	var toFail []sendItem
	needMeta := false

	p.eachPartition(func(part *partition) {
		part.mu.Lock()
		defer part.mu.Unlock()
		if len(part.batches) == 0 || part.inflight {
			return
		}
		if failErr != nil {
			n := 0
			for n < len(part.batches) && part.batches[n].txn <= txnNum {
				toFail = append(toFail, sendItem{part, part.batches[n]})
				n++
			}
			if n == len(part.batches) {
				part.batches = nil
				return
			}
			part.batches = part.batches[n:]
		}
		b := part.batches[0]
		if !b.retryAt.IsZero() && now.Before(b.retryAt) {
			soon(b.retryAt)
			return
		}
		ready := b.closed || len(part.batches) > 1 || flushing || p.cfg.linger == 0 ||
			!now.Before(b.created.Add(p.cfg.linger))
		if !ready {
			soon(b.created.Add(p.cfg.linger))
			return
		}
		leader := part.leader.Load()
		if leader < 0 {
			needMeta = true
			soon(now.Add(metadataRetry))
			return
		}
		if _, started := reqs[leader]; !started && inflight[leader] >= p.cfg.maxInflight {
			return
		}
		b.closed = true
		if !b.hasSeq {
			if part.seqPID != b.pid || part.seqEpoch != b.epoch {
				part.seq, part.seqPID, part.seqEpoch = 0, b.pid, b.epoch
			}
			b.seq = part.seq
			part.seq = nextSequence(part.seq, len(b.recs))
			b.hasSeq = true
		}
		part.inflight = true
		reqs[leader] = append(reqs[leader], sendItem{part, b})
	})

	for _, it := range toFail {
		p.finishFailed(it.part, it.b, failErr, false)
	}
	if needMeta && p.refreshing.CompareAndSwap(false, true) {
		p.sends.Add(1)
		go func() {
			defer p.sends.Done()
			defer p.refreshing.Store(false)
			p.refreshTopics(p.topicNames())
		}()
	}
	for node, items := range reqs {
		inflight[node]++
		p.sends.Add(1)
		go func() {
			defer p.sends.Done()
			p.send(node, items)
			select {
			case done <- node:
			case <-p.ctx.Done():
			}
		}()
	}
	return next
}

// send writes one produce request to node and settles each batch in it.
func (p *Producer) send(node int32, items []sendItem) {
	for _, it := range items {
		if it.b.wire == nil {
			it.b.build(p.compressor)
		}
	}
	if !p.txn.TV2() {
		parts := make(map[string][]int32)
		for _, it := range items {
			parts[it.part.topic.name] = append(parts[it.part.topic.name], it.part.id)
		}
		if err := p.txn.AddPartitions(p.ctx, parts); err != nil {
			// AddPartitions retried already and recorded the failure.
			for _, it := range items {
				p.finishFailed(it.part, it.b, err, true)
			}
			return
		}
	}

	req := kmsg.NewPtrProduceRequest()
	txnID := p.cfg.txnID
	req.TransactionID = &txnID
	req.Acks = -1
	req.TimeoutMillis = int32(p.cfg.produceTimeout / time.Millisecond)
	byTopic := make(map[*topic]int)
	for _, it := range items {
		t := it.part.topic
		i, ok := byTopic[t]
		if !ok {
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic, rt.TopicID = t.name, t.id
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
			byTopic[t] = i
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = it.part.id, it.b.wire
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	p.txn.MarkSent()
	verdicts := make([]retryLater, len(items))
	defer p.requeue(items, verdicts)
	kresp, err := p.cl.Broker(int(node)).Request(p.ctx, req)
	if err != nil {
		for i, it := range items {
			verdicts[i] = p.settle(it, 0, -1, fmt.Errorf("produce to node %d: %w", node, err))
		}
		return
	}
	resp := kresp.(*kmsg.ProduceResponse)
	type key struct {
		name string
		id   [16]byte
		part int32
	}
	answers := make(map[key]kmsg.ProduceResponseTopicPartition)
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			answers[key{t.Topic, t.TopicID, rp.Partition}] = rp
		}
	}
	for i, it := range items {
		t := it.part.topic
		rp, ok := answers[key{t.name, [16]byte{}, it.part.id}]
		if !ok {
			rp, ok = answers[key{"", t.id, it.part.id}]
		}
		if !ok {
			verdicts[i] = p.settle(it, kerr.UnknownServerError.Code, -1, fmt.Errorf("produce to node %d: %s/%d missing from the response: %w",
				node, t.name, it.part.id, kerr.UnknownServerError))
			continue
		}
		var perr error
		if rp.ErrorCode != 0 {
			perr = fmt.Errorf("produce to %s/%d at node %d: %w%s", t.name, it.part.id, node,
				kerr.ErrorForCode(rp.ErrorCode), kgoclient.Detail(rp.ErrorMessage))
		}
		verdicts[i] = p.settle(it, rp.ErrorCode, rp.BaseOffset, perr)
	}
}

// settle decides the fate of one batch after an attempt: written, retried
// (retriable errors, and stale-suspect answers while the coordinator moved,
// within the transaction deadline), or failed.
func (p *Producer) settle(it sendItem, code int16, baseOffset int64, err error) retryLater {
	if err == nil || code == kerr.DuplicateSequenceNumber.Code {
		if code != 0 {
			baseOffset = -1 // written by an earlier attempt; offset unknown
		}
		p.finishWritten(it, baseOffset)
		return retryLater{}
	}
	if (p.closing.Load() && p.ctx.Err() != nil) || errors.Is(err, kgo.ErrClientClosed) {
		p.finishFailed(it.part, it.b, errs.Abortable("produce", fmt.Errorf("the producer closed before the record's answer came: %w", err)), true)
		return retryLater{}
	}
	retriable := code == 0 || // transport error: sequence numbers make a resend safe
		code == kerr.ConcurrentTransactions.Code ||
		kerr.IsRetriable(kerr.ErrorForCode(code)) ||
		p.txn.ConfirmAnswer(p.ctx, code, &it.b.answers)
	st := p.txn.State()
	deadline := p.txn.Deadline()
	if !retriable || (st != txn.StateInTransaction && st != txn.StateCommitting) ||
		(!deadline.IsZero() && time.Now().After(deadline)) {
		if retriable {
			err = fmt.Errorf("gave up retrying within the transaction timeout: %w", err)
		}
		p.finishFailed(it.part, it.b, err, true)
		return retryLater{}
	}
	p.cfg.conn.Logger.Debug("retrying batch", "topic", it.part.topic.name, "partition", it.part.id, "err", err)
	it.b.attempts++
	it.b.retryAt = time.Now().Add(it.b.nextBackoff(p.ctx))
	return retryLater{retry: true, refresh: code != kerr.ConcurrentTransactions.Code}
}

// retryLater is settle's verdict for a batch to send again: the caller
// refreshes leaders if asked (once for all such batches of a request) and
// then hands the partition back to the dispatcher.
type retryLater struct{ retry, refresh bool }

// requeue makes the retried batches of a request sendable again, after one
// leader refresh for the topics that need it.
func (p *Producer) requeue(items []sendItem, verdicts []retryLater) {
	var topics []string
	seen := make(map[string]bool)
	for i, v := range verdicts {
		if name := items[i].part.topic.name; v.retry && v.refresh && !seen[name] {
			seen[name] = true
			topics = append(topics, name)
		}
	}
	p.refreshTopics(topics)
	for i, v := range verdicts {
		if v.retry {
			items[i].part.mu.Lock()
			items[i].part.inflight = false
			items[i].part.mu.Unlock()
		}
	}
}

// finishWritten resolves a written batch: offsets, promises, metrics.
// Promises run before the partition's next batch may be sent, which keeps
// them in order per partition.
func (p *Producer) finishWritten(it sendItem, baseOffset int64) {
	part, b := it.part, it.b
	var bytes int64
	for i, pr := range b.recs {
		r := pr.r
		if baseOffset >= 0 {
			r.Offset = baseOffset + int64(i)
		} else {
			r.Offset = -1
		}
		r.ProducerID, r.ProducerEpoch = b.pid, b.epoch
		bytes += int64(pr.size)
		pr.promise(r, nil)
	}
	p.metrics.produced(int64(len(b.recs)), bytes)
	p.retire(part, b, true)
}

// finishFailed fails every record of b with err, classified. The failure
// dooms b's transaction if it is still the current one, before the records
// count as resolved, so that a commit's flush that finds nothing
// outstanding also finds the transaction failed. inflight says whether b
// was the partition's batch in flight (and must be removed from its head);
// otherwise the caller already took it out of the partition.
func (p *Producer) finishFailed(part *partition, b *batch, err error, inflight bool) {
	cerr := p.txn.FailTxn(b.txn, "produce", err)
	if b.hasSeq {
		p.txn.MarkSequenceGap()
	}
	for _, pr := range b.recs {
		pr.promise(pr.r, cerr)
	}
	p.retire(part, b, inflight)
}

// retire forgets a resolved batch: it leaves the head of its partition if
// it was the batch in flight, and its records free their buffer slots.
func (p *Producer) retire(part *partition, b *batch, inflight bool) {
	if inflight {
		part.mu.Lock()
		part.batches = part.batches[1:]
		part.inflight = false
		part.mu.Unlock()
	}
	n := len(b.recs)
	part.buffered.Add(-int64(n))
	b.release()
	p.release(n)
}

// eachPartition calls fn for every partition of every loaded topic.
func (p *Producer) eachPartition(fn func(*partition)) {
	p.topicsMu.RLock()
	defer p.topicsMu.RUnlock()
	for _, t := range p.topics {
		t.mu.Lock()
		parts := t.parts
		t.mu.Unlock()
		for _, part := range parts {
			fn(part)
		}
	}
}

// release frees the buffer slots of n resolved records.
func (p *Producer) release(n int) {
	p.releaseSlots(n)
	p.doneRecords(int64(n))
}

// failQueued fails every buffered batch that is not in flight with err.
func (p *Producer) failQueued(err error) {
	var all []sendItem
	p.eachPartition(func(part *partition) {
		part.mu.Lock()
		defer part.mu.Unlock()
		keep := 0
		if part.inflight {
			keep = 1
		}
		if len(part.batches) > keep {
			for _, b := range part.batches[keep:] {
				all = append(all, sendItem{part, b})
			}
			part.batches = part.batches[:keep]
		}
	})
	for _, it := range all {
		p.finishFailed(it.part, it.b, err, false)
	}
}
