package broker

// Compaction of the coordinator logs (__transaction_state,
// __consumer_offsets, __share_group_state), so that their size follows the
// live state instead of its history.
//
// A coordinator partition is compacted once its log reaches twice its
// size after the previous compaction plus a margin (1 MiB), so the log
// stays within about twice the live state and each compaction's O(live)
// cost is paid for by as many appended bytes: O(1) amortized per record.
// Compaction runs from a timer, after the request that crossed the line.
//
// The coordinator leading the partition lists the records that rebuild its
// state (compactors, registered by each coordinator): its live keys, and
// the records of transactions still open there. They are appended again
// at the end of the log in their original order, through the same append
// path as any coordinator write, and the log start then moves past
// everything before them that is older than a minute (compactKeep).
// Replaying the compacted log therefore yields the state the whole log
// yielded: the kept recent records come first and the rewritten ones
// after them replace what they set (a snapshot replaces its share-partition,
// a later record of a key wins, a staged acknowledgement kept twice
// resolves twice to the same state); decided transactional records come
// back as plain ones (their markers are gone with them), undecided ones as
// records of the same producer and epoch, whose marker is still to come.
// Keeping the last minute as it was written lets a reader that follows a
// coordinator log (the examples' verification follows __share_group_state
// to learn how each record ended) keep up, as Kafka's coordinator logs,
// compacted by segment and pruned every few minutes, let it.

import (
	"sort"
	"time"
)

// keptRecord is one record a coordinator carries through a compaction.
type keptRecord struct {
	order int64 // sorts the records as the original log had them
	rec   kv
	pid   int64 // >= 0: a record of pid's transaction, still open here
	epoch int16
	// moved, if set, learns the record's new offset.
	moved func(offset int64)
}

// compactor lists the records that rebuild the state a coordinator keeps
// for p; ok is false when no coordinator serves p's current leader. done,
// if set, runs once the compacted log is in place.
type compactor func(p *partition) (kept []keptRecord, done func(), ok bool)

// compactBatchRecords bounds the records of one rewritten batch.
const compactBatchRecords = 500

// onCompact registers the compactor of a coordinator topic.
func (c *Cluster) onCompact(topic string, fn compactor) {
	c.compactors[topic] = func(p *partition, now time.Time) { c.compact(p, fn, now) }
}

// compactionDue reports whether p's log has grown enough to compact: to
// twice its size after the last compaction, plus the margin.
func (c *Cluster) compactionDue(p *partition) bool {
	return !p.compacting && p.bytes >= p.compactedBytes+max(p.compactedBytes, c.cfg.compactMinBytes)
}

// maybeCompact arms p's compaction once its log reached the threshold.
func (c *Cluster) maybeCompact(p *partition) {
	run := c.compactors[p.topic.name]
	if run == nil || !c.compactionDue(p) {
		return
	}
	if p.compaction == nil {
		p.compaction = newTimer(func(now time.Time) { run(p, now) })
	}
	if !p.compaction.armed() {
		c.arm(p.compaction, time.Time{}) // at once, after the event at hand
	}
}

// compact rewrites p's live records and drops everything before them.
func (c *Cluster) compact(p *partition, list compactor, now time.Time) {
	if p.deleted || !c.compactionDue(p) {
		return
	}
	before, beforeBatches := p.bytes, len(p.batches)
	kept, done, ok := list(p)
	if !ok || !openTxnsIntact(p, kept) {
		c.logger.Warn("coordinator log not compacted", "topic", p.topic.name, "partition", p.index, "served", ok)
		p.compactedBytes = p.bytes // try again once it doubles
		return
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].order < kept[j].order })
	cut := c.compactionCut(p, now)
	// The first record of each open transaction in the kept history: its
	// start stays there, so that the last stable offset does not pass it.
	keptFirst := make(map[int64]int64)
	for i := p.batchIndex(cut); i < len(p.batches); i++ {
		if b := p.batches[i]; b.txn && !b.control {
			if _, seen := keptFirst[b.pid]; !seen {
				keptFirst[b.pid] = b.base
			}
		}
	}
	p.compacting = true // the rewrite itself must not schedule another
	defer func() { p.compacting = false }()
	firstOf := make(map[int64]int64)
	for i := 0; i < len(kept); {
		j := i + 1
		for j < len(kept) && j-i < compactBatchRecords && kept[j].pid == kept[i].pid && kept[j].epoch == kept[i].epoch {
			j++
		}
		recs := make([]kv, 0, j-i)
		for _, k := range kept[i:j] {
			recs = append(recs, k.rec)
		}
		base, err := p.appendInternal(recs, kept[i].pid, kept[i].epoch, now)
		if err != nil {
			// openTxnsIntact checked every producer epoch, so this is a
			// bug; keep the old log, which still holds everything.
			c.logger.Error("coordinator log compaction failed; log kept", "topic", p.topic.name, "partition", p.index, "err", err)
			p.compactedBytes = p.bytes
			return
		}
		if pid := kept[i].pid; pid >= 0 {
			if _, seen := firstOf[pid]; !seen {
				firstOf[pid] = base
			}
		}
		for n, k := range kept[i:j] {
			if k.moved != nil {
				k.moved(base + int64(n))
			}
		}
		i = j
	}
	c.advanceLogStart(p, cut)
	for pid, first := range keptFirst {
		firstOf[pid] = first // before any rewritten record of pid
	}
	reopenTxns(p, cut, firstOf)
	if done != nil {
		done()
	}
	p.compactedBytes = p.bytes
	c.stats.compactions++
	c.logger.Debug("coordinator log compacted", "topic", p.topic.name, "partition", p.index,
		"bytes_before", before, "bytes_after", p.bytes, "batches_before", beforeBatches, "batches_after", len(p.batches))
}

// compactKeepBytes bounds the recent records a compaction keeps as they
// were appended, per partition: a flood of coordinator writes does not
// keep more than this past its compaction.
const compactKeepBytes = 4 << 20

// compactionCut returns where p's log starts after a compaction: past
// every record but those appended within compactKeep, of which it keeps
// the newest up to compactKeepBytes (and, under a MaxBytes budget, a
// sixteenth of the budget).
func (c *Cluster) compactionCut(p *partition, now time.Time) int64 {
	cut := p.next
	if c.cfg.compactKeep <= 0 {
		return cut
	}
	limit := int64(compactKeepBytes)
	if c.cfg.maxBytes > 0 {
		limit = min(limit, c.cfg.maxBytes/16)
	}
	since := now.Add(-c.cfg.compactKeep)
	var kept int64
	for i := len(p.batches) - 1; i >= 0; i-- {
		b := p.batches[i]
		if b.appendedAt.Before(since) || kept+int64(len(b.raw)) > limit {
			break
		}
		kept += int64(len(b.raw))
		cut = b.base
	}
	return cut
}

// openTxnsIntact reports whether every kept transactional record can be
// written again as its producer's: the producer's transaction is open here
// at that epoch.
func openTxnsIntact(p *partition, kept []keptRecord) bool {
	for _, k := range kept {
		if k.pid < 0 {
			continue
		}
		if ps := p.producers[k.pid]; ps == nil || ps.epoch != k.epoch || ps.txnFirst < 0 {
			return false
		}
	}
	return true
}

// reopenTxns points the transactions open at p whose first offset was cut
// away at their first record the log still holds, kept as written or
// rewritten (firstOf), or at the cut when there is none, so that the last
// stable offset stays inside the log and before every record of theirs.
func reopenTxns(p *partition, cut int64, firstOf map[int64]int64) {
	p.openTxns = p.openTxns[:0]
	for pid, ps := range p.producers {
		if ps.txnFirst < 0 {
			continue
		}
		if ps.txnFirst < cut {
			ps.txnFirst = cut
			if first, ok := firstOf[pid]; ok {
				ps.txnFirst = first
			}
		}
		p.openTxns = append(p.openTxns, openTxn{pid: pid, first: ps.txnFirst})
	}
	sort.Slice(p.openTxns, func(i, j int) bool { return p.openTxns[i].first < p.openTxns[j].first })
}
