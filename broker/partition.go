package broker

import (
	"container/list"
	"encoding/binary"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// partition is one partition's log and producer state, owned by the loop.
// There is one copy: the leader's.
type partition struct {
	c           *Cluster // nil only for partitions built by unit tests
	topic       *topic
	index       int32
	leader      int32
	leaderEpoch int32
	epochStarts []epochStart
	deleted     bool

	// The log: batches in offset order. Batches leave only at the head
	// (retention, DeleteRecords, compaction), which moves logStart; it
	// may sit inside the first batch after DeleteRecords, as in Kafka.
	batches  []*storedBatch
	logStart int64
	next     int64 // the next offset; also the high watermark (no replication)
	bytes    int64 // the size of the batches in the log
	appended int64 // bytes ever appended: batch i starts at batches[i].startBytes
	nextSeq  int64 // the append number of the next batch
	tsIndex  maxTree

	producers   map[int64]*producerState
	producerLRU list.List // producers without an open transaction, least recently written first
	openTxns    []openTxn // open transactions by first offset; closed ones are skipped lazily
	aborted     []abortedTxn

	watchers    map[partitionWatcher]struct{}
	changedMark bool

	retention      *timer
	lastRetention  time.Time
	producerExpiry *timer
	compactedBytes int64 // a coordinator partition's size after its last compaction
	compacting     bool
	compaction     *timer
}

type epochStart struct {
	epoch int32
	start int64
}

// storedBatch is a batch in the log; raw carries its assigned base offset
// and the leader epoch it was written in, and is never written to again:
// answers read it off the loop.
type storedBatch struct {
	base, last int64
	raw        []byte
	pid        int64
	epoch      int16
	txn        bool
	control    bool
	maxTs      int64
	appendedAt time.Time
	seq        int64 // append number, the batch's position in the timestamp index
	startBytes int64 // partition.appended before this batch
}

// producerState is what a leader knows of one producer id: its epoch, the
// last batches it wrote (to spot retries), its open transaction here, and
// the coordinator epoch of the last marker it saw.
type producerState struct {
	pid              int64
	epoch            int16
	recent           []seqEntry
	txnFirst         int64  // first offset of the open transaction; -1 for none
	txnID            string // the transactional id the open transaction's batches were verified under
	coordinatorEpoch int32
	lastWrite        time.Time
	lru              *list.Element // in partition.producerLRU unless a transaction is open
}

type seqEntry struct {
	firstSeq, lastSeq int32
	base, last        int64
}

const maxRecentBatches = 5

type abortedTxn struct {
	pid         int64
	first, last int64
}

// openTxn is a transaction opened at a partition: pid's first offset.
type openTxn struct {
	pid   int64
	first int64
}

// controlMarker describes a transaction marker written to a partition.
type controlMarker struct {
	pid              int64
	epoch            int16
	commit           bool
	coordinatorEpoch int32
	offset           int64
}

func newPartition(t *topic, index, leader int32) *partition {
	return &partition{
		topic:       t,
		index:       index,
		leader:      leader,
		epochStarts: []epochStart{{epoch: 0, start: 0}},
		producers:   make(map[int64]*producerState),
	}
}

func (p *partition) endOffset() int64 { return p.next }

// lastStableOffset is the first offset of the earliest open transaction
// (never below the log start), or the high watermark if none is open.
// Transactions open in offset order, so the earliest is at the head of
// openTxns once the closed ones there are skipped: O(1) amortized.
func (p *partition) lastStableOffset() int64 {
	if p.pruneOpenTxns() {
		return max(p.openTxns[0].first, p.logStart)
	}
	return p.next
}

// pruneOpenTxns drops the closed transactions at the head of openTxns and
// reports whether one is still open.
func (p *partition) pruneOpenTxns() bool {
	for len(p.openTxns) > 0 {
		o := p.openTxns[0]
		if ps := p.producers[o.pid]; ps != nil && ps.txnFirst == o.first {
			return true
		}
		p.openTxns[0] = openTxn{}
		p.openTxns = p.openTxns[1:]
	}
	p.openTxns = nil
	return false
}

func (p *partition) producer(pid int64) *producerState {
	ps := p.producers[pid]
	if ps == nil {
		ps = &producerState{pid: pid, epoch: -1, txnFirst: -1, coordinatorEpoch: -1}
		p.producers[pid] = ps
	}
	return ps
}

// store appends raw at the next offset and returns the stored batch.
func (p *partition) store(raw []byte, lastDelta int32, pid int64, epoch int16, txn, control bool, maxTs int64, now time.Time) *storedBatch {
	b := &storedBatch{
		base:       p.next,
		last:       p.next + int64(lastDelta),
		raw:        raw,
		pid:        pid,
		epoch:      epoch,
		txn:        txn,
		control:    control,
		maxTs:      maxTs,
		appendedAt: now,
		seq:        p.nextSeq,
		startBytes: p.appended,
	}
	binary.BigEndian.PutUint64(raw[offBaseOffset:], uint64(b.base))
	binary.BigEndian.PutUint32(raw[offLeaderEpoch:], uint32(p.leaderEpoch))
	if len(p.batches) == 0 {
		p.tsIndex.dropBefore(b.seq)
	}
	p.batches = append(p.batches, b)
	p.tsIndex.push(maxTs)
	p.nextSeq++
	p.next = b.last + 1
	p.bytes += int64(len(raw))
	p.appended += int64(len(raw))
	if txn && !control && pid >= 0 {
		if ps := p.producer(pid); ps.txnFirst < 0 {
			ps.txnFirst = b.base
			p.pruneOpenTxns() // closed ones go here too, read or not
			p.openTxns = append(p.openTxns, openTxn{pid: pid, first: b.base})
		}
	}
	if p.c != nil {
		p.c.afterAppend(p, b)
	}
	return b
}

// appendProduced checks a client batch against the producer's state and
// appends it. It returns the base offset; for a retried batch already in the
// log it returns the original base offset and dup = true.
func (p *partition) appendProduced(b batchInfo, now time.Time) (base int64, dup bool, err *kerr.Error) {
	if b.pid >= 0 && b.epoch >= 0 {
		ps := p.producers[b.pid]
		if ps != nil && b.epoch < ps.epoch {
			return 0, false, kerr.InvalidProducerEpoch
		}
		sameEpoch := ps != nil && b.epoch == ps.epoch
		var expect int32
		if sameEpoch {
			for _, e := range ps.recent {
				if e.firstSeq == b.firstSeq && e.lastSeq == b.lastSeq() {
					return e.base, true, nil
				}
			}
			if n := len(ps.recent); n > 0 {
				expect = int32((int64(ps.recent[n-1].lastSeq) + 1) % (1 << 31))
			}
		}
		// A producer this partition holds no state for (new here, or its
		// state expired) may start at any sequence, as in Kafka.
		known := ps != nil && ps.epoch >= 0
		if known && b.firstSeq != expect {
			return 0, false, kerr.OutOfOrderSequenceNumber
		}
	}
	// The batch is stored where the request's frame holds it, without a
	// copy: a frame is never reused (conn.go), and the full slice
	// expression keeps appends away from the frame's next bytes.
	raw := b.raw[:len(b.raw):len(b.raw)]
	sb := p.store(raw, b.lastDelta, b.pid, b.epoch, b.txn, false, b.maxTs, now)
	if b.pid >= 0 && b.epoch >= 0 {
		ps := p.producer(b.pid)
		if b.epoch > ps.epoch {
			ps.epoch = b.epoch
			ps.recent = ps.recent[:0]
		}
		ps.recent = append(ps.recent, seqEntry{firstSeq: b.firstSeq, lastSeq: b.lastSeq(), base: sb.base, last: sb.last})
		if len(ps.recent) > maxRecentBatches {
			ps.recent = ps.recent[1:]
		}
		p.touchProducer(ps, now)
	}
	return sb.base, false, nil
}

// appendInternal writes records the broker itself produces (coordinator
// state). A transactional write (pid >= 0) joins that producer's open
// transaction at this partition; it is refused with INVALID_PRODUCER_EPOCH
// for an epoch older than the producer's current one.
func (p *partition) appendInternal(recs []kv, pid int64, epoch int16, now time.Time) (int64, *kerr.Error) {
	txn := pid >= 0
	if txn {
		ps := p.producer(pid)
		if epoch < ps.epoch {
			return 0, kerr.InvalidProducerEpoch
		}
		if epoch > ps.epoch {
			ps.epoch = epoch
			ps.recent = ps.recent[:0]
		}
	}
	raw := buildBatch(recs, pid, epoch, -1, txn, false, now)
	base := p.store(raw, int32(len(recs)-1), pid, epoch, txn, false, now.UnixMilli(), now).base
	if txn {
		p.touchProducer(p.producers[pid], now)
	}
	return base, nil
}

// markerCheck is the KIP-1228 validation of a transaction marker against
// the producer's state at this leader.
type markerCheck struct {
	pid              int64
	epoch            int16
	commit           bool
	coordinatorEpoch int32
	// strict applies the TV2 rule: markerEpoch must exceed the current
	// epoch. Otherwise the legacy rule: markerEpoch >= current.
	strict bool
}

// appendMarker validates and writes a marker. A rejected marker writes
// nothing. A strict marker whose epoch equals the current one while no
// transaction is open here is a retry of a marker already written: success,
// nothing written twice (written = false).
func (p *partition) appendMarker(m markerCheck, now time.Time) (cm controlMarker, written bool, err *kerr.Error) {
	ps := p.producers[m.pid]
	if ps != nil {
		if m.coordinatorEpoch < ps.coordinatorEpoch {
			return cm, false, kerr.TransactionCoordinatorFenced
		}
		switch {
		case m.strict && m.epoch == ps.epoch && ps.txnFirst < 0:
			return cm, false, nil
		case m.strict && m.epoch <= ps.epoch, !m.strict && m.epoch < ps.epoch:
			return cm, false, kerr.InvalidProducerEpoch
		}
	}
	raw := buildMarkerBatch(m.pid, m.epoch, m.commit, m.coordinatorEpoch, now)
	sb := p.store(raw, 0, m.pid, m.epoch, true, true, now.UnixMilli(), now)
	ps = p.producer(m.pid)
	if !m.commit && ps.txnFirst >= 0 {
		p.aborted = append(p.aborted, abortedTxn{pid: m.pid, first: ps.txnFirst, last: sb.base})
	}
	ps.txnFirst = -1
	if m.epoch != ps.epoch {
		ps.epoch = m.epoch
		ps.recent = ps.recent[:0]
	}
	ps.coordinatorEpoch = m.coordinatorEpoch
	p.touchProducer(ps, now)
	return controlMarker{pid: m.pid, epoch: m.epoch, commit: m.commit, coordinatorEpoch: m.coordinatorEpoch, offset: sb.base}, true, nil
}

// batchIndex returns the index of the first batch whose last offset is at
// or after offset.
func (p *partition) batchIndex(offset int64) int {
	return sort.Search(len(p.batches), func(i int) bool { return p.batches[i].last >= offset })
}

// read returns whole batches from offset up to limit (exclusive), at most
// maxBytes of them, or one batch past that when minOne is set and the
// first does not fit (Kafka's rule for the first partition of a fetch
// that has data, KIP-74).
func (p *partition) read(offset, limit int64, maxBytes int32, minOne bool) []*storedBatch {
	var out []*storedBatch
	var size int32
	for i := p.batchIndex(offset); i < len(p.batches); i++ {
		b := p.batches[i]
		if b.base >= limit {
			break
		}
		if (len(out) > 0 || !minOne) && int64(size)+int64(len(b.raw)) > int64(maxBytes) {
			break
		}
		out = append(out, b)
		size += int32(len(b.raw))
	}
	return out
}

// batchesBefore returns how many batches start before offset.
func (p *partition) batchesBefore(offset int64) int {
	return sort.Search(len(p.batches), func(i int) bool { return p.batches[i].base >= offset })
}

// bytesBetween returns the size of the batches that hold offsets from
// `from` up to limit (exclusive): what a fetch from `from` could read.
// O(log n), from the batches' running byte counts.
func (p *partition) bytesBetween(from, limit int64) int64 {
	i, j := p.batchIndex(from), p.batchesBefore(limit)
	if i >= j {
		return 0
	}
	end := p.appended
	if j < len(p.batches) {
		end = p.batches[j].startBytes
	}
	return end - p.batches[i].startBytes
}

// abortedIn returns the aborted transactions that overlap [from, to].
// They are kept in marker order, so those ending before from are skipped
// by a binary search.
func (p *partition) abortedIn(from, to int64) []abortedTxn {
	var out []abortedTxn
	for _, a := range p.aborted[sort.Search(len(p.aborted), func(i int) bool { return p.aborted[i].last >= from }):] {
		if a.first <= to {
			out = append(out, a)
		}
	}
	return out
}

// firstBatchAtTime returns the index of the first batch, in offset order,
// whose max timestamp reaches ts, or -1.
func (p *partition) firstBatchAtTime(ts int64) int {
	if len(p.batches) == 0 {
		return -1
	}
	first := p.batches[0].seq
	seq := p.tsIndex.firstAtLeast(first, ts)
	if seq < 0 {
		return -1
	}
	return int(seq - first)
}

// maxTimestampBatch returns the index of the first batch holding the
// largest max timestamp, or -1 for an empty log.
func (p *partition) maxTimestampBatch() int {
	if len(p.batches) == 0 {
		return -1
	}
	return p.firstBatchAtTime(p.tsIndex.maxFrom(p.batches[0].seq))
}

// offsetForEpoch answers OffsetForLeaderEpoch: the end offset of the
// largest epoch <= epoch, and that epoch.
func (p *partition) offsetForEpoch(epoch int32) (int32, int64) {
	for i := len(p.epochStarts) - 1; i >= 0; i-- {
		if p.epochStarts[i].epoch <= epoch {
			if i+1 < len(p.epochStarts) {
				return p.epochStarts[i].epoch, p.epochStarts[i+1].start
			}
			return p.epochStarts[i].epoch, p.next
		}
	}
	return -1, -1
}

// checkLeader reports the error for a request to this partition at node,
// with the client's idea of the leader epoch (-1 for none).
func (p *partition) checkLeader(node int32, clientEpoch int32) *kerr.Error {
	switch {
	case p.deleted:
		return kerr.UnknownTopicOrPartition
	case p.leader != node:
		return kerr.NotLeaderForPartition
	case clientEpoch >= 0 && clientEpoch < p.leaderEpoch:
		return kerr.FencedLeaderEpoch
	case clientEpoch > p.leaderEpoch:
		return kerr.UnknownLeaderEpoch
	}
	return nil
}

// leaderEpoch is the leader epoch the batch was written in.
func (b *storedBatch) leaderEpoch() int32 {
	return int32(binary.BigEndian.Uint32(b.raw[offLeaderEpoch:]))
}
