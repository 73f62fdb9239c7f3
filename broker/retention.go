package broker

// Keeping the logs bounded: retention.ms and retention.bytes on data
// topics, the log start offset that retention and DeleteRecords move, and
// the accounting behind the MaxBytes budget.
//
// Retention works on whole batches where Kafka works on whole segments:
// with cleanup.policy containing "delete" (the default), the head batch
// goes once its max timestamp is more than retention.ms old, and head
// batches go while the log without them still holds at least
// retention.bytes, Kafka's rule; as in Kafka, deletion stops at the first
// batch that may stay, so a batch with a future timestamp holds back those
// after it. retention.bytes is enforced as soon as an append passes it:
// memory, unlike Kafka's disk, is what the limit protects. retention.ms is
// checked at most once per RetentionCheckInterval (Kafka's
// log.retention.check.interval.ms), never sooner than an interval after
// the partition's creation (as Kafka's first check comes a while after
// start), and only when something is due: the timer is armed at the head
// batch's expiry.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// retentionPolicy is what a topic's configs say about deleting data.
type retentionPolicy struct {
	delete bool  // cleanup.policy contains "delete"
	ms     int64 // retention.ms; < 0 keeps data forever
	bytes  int64 // retention.bytes; < 0 for no size limit
}

// retentionPolicyOf reads a topic's configs, with Kafka's defaults for
// those not set. A value that does not parse (IncrementalAlterConfigs keeps
// topic configs unvalidated) counts as the default.
func retentionPolicyOf(configs map[string]string) retentionPolicy {
	pol := retentionPolicy{delete: true, ms: 7 * 24 * 3600 * 1000, bytes: -1}
	if v, ok := configs["cleanup.policy"]; ok {
		pol.delete = false
		for _, item := range strings.Split(v, ",") {
			if strings.TrimSpace(item) == "delete" {
				pol.delete = true
			}
		}
	}
	if v, ok := configs["retention.ms"]; ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			pol.ms = n
		}
	}
	if v, ok := configs["retention.bytes"]; ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			pol.bytes = n
		}
	}
	return pol
}

// afterAppend runs after every batch a partition stores: accounting, the
// watchers, and the checks that keep the log bounded.
func (c *Cluster) afterAppend(p *partition, b *storedBatch) {
	c.storedBytes += int64(len(b.raw))
	c.changed(p)
	if b.txn && !b.control && len(c.lateCopies) > 0 {
		c.lateCopyDue(p, b)
	}
	if p.topic.internal {
		c.maybeCompact(p)
		return
	}
	if !p.retention.armed() || p.overRetentionBytes() {
		c.armRetention(p, b.appendedAt)
	}
}

// overRetentionBytes reports whether retention.bytes lets the head batch
// go: the log without it still holds at least retention.bytes (Kafka's
// rule, so a log may stay up to a batch above the limit).
func (p *partition) overRetentionBytes() bool {
	pol := p.topic.retention
	return pol.delete && pol.bytes >= 0 && len(p.batches) > 0 && p.bytes-int64(len(p.batches[0].raw)) >= pol.bytes
}

// armRetention arms p's retention check at the earliest time something may
// be due, or disarms it when nothing can be.
func (c *Cluster) armRetention(p *partition, now time.Time) {
	pol := p.topic.retention
	var due time.Time
	switch {
	case p.deleted || p.topic.internal || !pol.delete || len(p.batches) == 0:
	case p.overRetentionBytes():
		// Memory, unlike Kafka's disk, is what the size limit is for:
		// it is enforced at once.
		due = now
	case pol.ms >= 0:
		due = time.UnixMilli(p.batches[0].maxTs).Add(time.Duration(pol.ms+1) * time.Millisecond)
		if earliest := p.lastRetention.Add(c.cfg.retentionCheckInterval); due.Before(earliest) {
			due = earliest
		}
	}
	if due.IsZero() {
		if p.retention != nil {
			c.disarm(p.retention)
		}
		return
	}
	if p.retention == nil {
		p.retention = newTimer(func(now time.Time) { c.enforceRetention(p, now) })
	}
	c.arm(p.retention, due)
}

// enforceRetention deletes the head batches retention allows to delete.
func (c *Cluster) enforceRetention(p *partition, now time.Time) {
	p.lastRetention = now
	c.stats.retentionRuns++
	pol := p.topic.retention
	nowMs := now.UnixMilli()
	size := p.bytes
	n := 0
	for ; n < len(p.batches); n++ {
		b := p.batches[n]
		byTime := pol.ms >= 0 && nowMs-b.maxTs > pol.ms
		bySize := pol.bytes >= 0 && size-int64(len(b.raw)) >= pol.bytes
		if !pol.delete || (!byTime && !bySize) {
			break
		}
		size -= int64(len(b.raw))
	}
	if n > 0 {
		next := p.next
		if n < len(p.batches) {
			next = p.batches[n].base
		}
		c.logger.Debug("retention deleted batches", "topic", p.topic.name, "partition", p.index,
			"batches", n, "bytes", p.bytes-size, "log_start", next)
		c.advanceLogStart(p, next)
	}
	c.armRetention(p, now)
}

// advanceLogStart moves p's log start offset forward to start (at most the
// high watermark) and drops the batches wholly before it.
func (c *Cluster) advanceLogStart(p *partition, start int64) {
	start = min(start, p.next)
	if start <= p.logStart {
		return
	}
	n := p.batchIndex(start)
	var freed int64
	for i := 0; i < n; i++ {
		freed += int64(len(p.batches[i].raw))
		p.batches[i] = nil // the array outlives the slice; let the batch go
	}
	p.batches = p.batches[n:]
	if len(p.batches) == 0 {
		p.batches = nil
	} else {
		p.tsIndex.dropBefore(p.batches[0].seq)
	}
	p.bytes -= freed
	c.storedBytes -= freed
	p.logStart = start
	if k := sort.Search(len(p.aborted), func(i int) bool { return p.aborted[i].last >= start }); k > 0 {
		p.aborted = append(p.aborted[:0:0], p.aborted[k:]...)
	}
	c.changed(p)
}

// partitionsDeleted releases what a deleted topic's partitions hold.
func (c *Cluster) partitionsDeleted(t *topic) {
	for _, p := range t.partitions {
		c.storedBytes -= p.bytes
		for _, tm := range []*timer{p.retention, p.producerExpiry, p.compaction} {
			if tm != nil {
				c.disarm(tm)
			}
		}
		c.changed(p)
	}
}

// checkBudget refuses a produce that would take the stored record bytes
// past the MaxBytes budget. The first refusal after a time within the
// budget is logged at WARN; the client sees POLICY_VIOLATION, which it does
// not retry, with the message naming the limit.
func (c *Cluster) checkBudget(batches []batchInfo) (*kerr.Error, string) {
	var n int64
	for _, b := range batches {
		n += int64(len(b.raw))
	}
	if c.withinBudget(n) {
		return nil, ""
	}
	return kerr.PolicyViolation, fmt.Sprintf("broker memory budget (MaxBytes / -max-bytes) of %d bytes reached: "+
		"%d bytes of records are stored and this %d-byte batch would pass it; free space with retention, "+
		"DeleteRecords or DeleteTopics, or raise the limit", c.cfg.maxBytes, c.storedBytes, n)
}

// withinBudget reports whether n more stored bytes fit the MaxBytes
// budget. Every write a client asks for checks it (produce, offset
// commits, markers sent by clients): only the coordinators' own writes,
// which let transactions and groups finish what they started, go past
// it. The first refusal after a time within the budget is logged at WARN.
func (c *Cluster) withinBudget(n int64) bool {
	if c.cfg.maxBytes <= 0 || c.storedBytes+n <= c.cfg.maxBytes {
		c.overBudget = false
		return true
	}
	if !c.overBudget {
		c.overBudget = true
		c.logger.Warn("memory budget reached: refusing client writes until space is freed",
			"max_bytes", c.cfg.maxBytes, "stored_bytes", c.storedBytes)
	}
	return false
}
