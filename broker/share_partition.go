package broker

// The share-partition state machine, kept by the leader of each data
// partition for every share group that reads it (KIP-932).
//
// The in-flight window is [start, end): offsets before start are done
// (ACKNOWLEDGED or ARCHIVED), offsets from end on have never been handed
// out. Inside the window every offset has a state:
//
//	AVAILABLE     may be acquired; delivery count < the delivery limit
//	ACQUIRED      held by one member until its lock deadline
//	ACKNOWLEDGED  accepted; never delivered again
//	ARCHIVED      rejected, past the delivery limit, or a record of an
//	              aborted transaction under read_committed
//	TX_PENDING    acknowledgement staged in a transaction (KIP-1289): no
//	              lock, cannot be acquired, acknowledged or staged again,
//	              until a marker on the __share_group_state partition
//	              resolves it
//
// Transitions (limit = share.delivery.count.limit):
//
//	AVAILABLE -> ACQUIRED                       ShareFetch; delivery count + 1
//	ACQUIRED  -> ACKNOWLEDGED                   ACCEPT
//	ACQUIRED  -> ARCHIVED                       REJECT, GAP
//	ACQUIRED  -> AVAILABLE | ARCHIVED (limit)   RELEASE, lock expiry, the
//	                                            member's share session
//	                                            closing (epoch -1, or its
//	                                            connection's close); the
//	                                            delivery count stays
//	ACQUIRED  -> ACQUIRED                       RENEW: a new lock deadline
//	ACQUIRED  -> TX_PENDING                     TxnShareAcknowledge
//	TX_PENDING -> ACKNOWLEDGED | ARCHIVED       COMMIT of ACCEPT | REJECT or GAP
//	TX_PENDING -> AVAILABLE | ARCHIVED (limit)  ABORT; the delivery count stays
//
// "(limit)" means a record whose delivery count has reached the limit is
// ARCHIVED instead of AVAILABLE, so a record whose transactions keep
// aborting is archived after `limit` deliveries.
//
// As in Kafka, share.isolation.level decides how far the window grows: to
// the high watermark (read_uncommitted, the default: records of open and
// aborted transactions are delivered) or to the last stable offset
// (read_committed: records of aborted transactions are ARCHIVED as the
// window reaches them). Control records are acquired like any offset, so
// the member acknowledges them (GAP), as Kafka hands them out.
// share.partition.max.record.locks bounds the window: no new batch is
// acquired while the window holds that many offsets.

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

type shareRecordState uint8

const (
	shareAvailable shareRecordState = iota
	shareAcquired
	shareAcknowledged
	shareArchived
	shareTxPending
)

var shareRecordStateNames = [...]string{"AVAILABLE", "ACQUIRED", "ACKNOWLEDGED", "ARCHIVED", "TX_PENDING"}

func (s shareRecordState) String() string {
	if int(s) < len(shareRecordStateNames) {
		return shareRecordStateNames[s]
	}
	return fmt.Sprintf("shareRecordState(%d)", uint8(s))
}

// shareRecord is one offset of the in-flight window.
type shareRecord struct {
	state      shareRecordState
	deliveries int16
	member     string       // ACQUIRED: the holder
	deadline   time.Time    // ACQUIRED: the lock deadline
	pid        int64        // TX_PENDING: the staging producer
	epoch      int16        // TX_PENDING: its epoch (-1 once reloaded after a leader move)
	ack        wire.AckType // TX_PENDING: what commits
}

// persisted is the form of r written to __share_group_state.
func (r *shareRecord) persisted() persistedRecord {
	switch r.state {
	case shareAcknowledged:
		return persistedRecord{state: persistAcknowledged, deliveries: r.deliveries}
	case shareArchived:
		return persistedRecord{state: persistArchived, deliveries: r.deliveries}
	}
	return persistedRecord{state: persistAvailable, deliveries: r.deliveries}
}

// sharePartition is the live state of one share-partition at the leader of
// its data partition. It is valid only while that node leads the partition
// at the epoch it was loaded in.
type sharePartition struct {
	key        shareKey
	p          *partition
	leader     int32
	epoch      int32
	stateEpoch int32

	start int64
	recs  []shareRecord // offsets start .. start+len(recs)-1
	buf   []shareRecord // the array recs lives in (share_window.go)

	acquired     int // records ACQUIRED
	available    int // records AVAILABLE
	nextDeadline time.Time

	// Offsets changed since the last write to __share_group_state.
	dirtyLo, dirtyHi int64
	persistedStart   int64
	// left holds the final states of changed offsets that the start offset
	// passed since the last write: the next update names them too, so that
	// the state log says how every record ended (ACKNOWLEDGED or
	// ARCHIVED), not only that the start offset passed it.
	left []shareStateBatch

	locks *timer // fires at nextDeadline while records are acquired

	// statePart is the __share_group_state partition of key.
	statePart *partition
	// pendingBy bounds, per producer, the offsets it has TX_PENDING here,
	// so that its marker looks there instead of at the whole window.
	pendingBy map[int64]offsetSpan
	// dead lists the records archived by REJECT or at the delivery limit
	// since the last flush, for the group's dead-letter queue
	// (share_dlq.go).
	dead []deadRecord
}

// offsetSpan is an inclusive range of offsets.
type offsetSpan struct{ first, last int64 }

func (s offsetSpan) widen(first, last int64) offsetSpan {
	return offsetSpan{min(s.first, first), max(s.last, last)}
}

// notePending records that pid has offsets first..last TX_PENDING.
func (sp *sharePartition) notePending(pid, first, last int64) {
	if sp.pendingBy == nil {
		sp.pendingBy = make(map[int64]offsetSpan)
	}
	if s, ok := sp.pendingBy[pid]; ok {
		sp.pendingBy[pid] = s.widen(first, last)
		return
	}
	sp.pendingBy[pid] = offsetSpan{first, last}
}

func (sp *sharePartition) end() int64 { return sp.start + int64(len(sp.recs)) }

func (sp *sharePartition) current() bool {
	return !sp.p.deleted && sp.p.leader == sp.leader && sp.p.leaderEpoch == sp.epoch
}

func (sp *sharePartition) markDirty(off int64) {
	if sp.dirtyLo > sp.dirtyHi {
		sp.dirtyLo, sp.dirtyHi = off, off
		return
	}
	sp.dirtyLo = min(sp.dirtyLo, off)
	sp.dirtyHi = max(sp.dirtyHi, off)
}

// set replaces the record at off, keeping the counters right.
func (sp *sharePartition) set(off int64, r shareRecord) {
	i := off - sp.start
	old := sp.recs[i]
	switch old.state {
	case shareAcquired:
		sp.acquired--
	case shareAvailable:
		sp.available--
	}
	switch r.state {
	case shareAcquired:
		sp.acquired++
		if sp.nextDeadline.IsZero() || r.deadline.Before(sp.nextDeadline) {
			sp.nextDeadline = r.deadline
		}
	case shareAvailable:
		sp.available++
	}
	if old.persisted() != r.persisted() {
		sp.markDirty(off)
	}
	sp.recs[i] = r
}

// grow appends a record at end.
func (sp *sharePartition) grow(r shareRecord) {
	off := sp.end()
	sp.recs, sp.buf = appendWindow(sp.recs, sp.buf, shareRecord{state: shareArchived})
	sp.set(off, r)
	sp.markDirty(off)
}

// release returns a record to AVAILABLE, or ARCHIVED once it has been
// delivered limit times.
func (sp *sharePartition) release(off int64, deliveries int16, limit int32) {
	if int32(deliveries) >= limit {
		sp.set(off, shareRecord{state: shareArchived, deliveries: deliveries})
		sp.deadLetter(off, deliveries, false)
		return
	}
	sp.set(off, shareRecord{state: shareAvailable, deliveries: deliveries})
}

// advance moves the start offset past the done records at its head,
// keeping the final states of those changed since the last write in left.
func (sp *sharePartition) advance() {
	n := 0
	for n < len(sp.recs) && (sp.recs[n].state == shareAcknowledged || sp.recs[n].state == shareArchived) {
		if off := sp.start + int64(n); off >= sp.dirtyLo && off <= sp.dirtyHi {
			sp.left = appendStateBatch(sp.left, off, sp.recs[n].persisted())
		}
		n++
	}
	if n == 0 {
		return
	}
	sp.recs = dropWindow(sp.recs, sp.buf, n)
	sp.start += int64(n)
}

// appendStateBatch adds offset off in persisted state r to batches, which
// are in offset order, coalescing runs.
func appendStateBatch(batches []shareStateBatch, off int64, r persistedRecord) []shareStateBatch {
	if n := len(batches); n > 0 && batches[n-1].Last == off-1 && batches[n-1].State == r.state && batches[n-1].Deliveries == r.deliveries {
		batches[n-1].Last = off
		return batches
	}
	return append(batches, shareStateBatch{First: off, Last: off, State: r.state, Deliveries: r.deliveries})
}

// takeUpdate returns the update record for the changes since the last one,
// or nil when nothing persisted changed.
func (sp *sharePartition) takeUpdate() *shareStateValue {
	if sp.dirtyLo > sp.dirtyHi && sp.start == sp.persistedStart {
		return nil
	}
	v := &shareStateValue{Kind: shareKindUpdate, StateEpoch: sp.stateEpoch, StartOffset: sp.start, Batches: sp.left}
	sp.left = nil
	lo, hi := max(sp.dirtyLo, sp.start), min(sp.dirtyHi, sp.end()-1)
	for o := lo; o <= hi && sp.dirtyLo <= sp.dirtyHi; o++ {
		v.Batches = appendStateBatch(v.Batches, o, sp.recs[o-sp.start].persisted())
	}
	sp.dirtyLo, sp.dirtyHi = 1, 0
	sp.persistedStart = sp.start
	return v
}

// newLiveSharePartition builds the live state from the persisted state and
// the pending staged acknowledgements: what was ACQUIRED when leadership
// moved comes back AVAILABLE (with the delivery counted), TX_PENDING stays
// pending.
func newLiveSharePartition(key shareKey, p *partition, ps *sharePersisted, pending map[int64][]sharePending, limit int32) *sharePartition {
	sp := &sharePartition{
		key:            key,
		p:              p,
		leader:         p.leader,
		epoch:          p.leaderEpoch,
		stateEpoch:     ps.stateEpoch,
		start:          ps.start,
		dirtyLo:        1,
		persistedStart: ps.start,
	}
	last := ps.last()
	for _, stagings := range pending {
		for _, staging := range stagings {
			for _, b := range staging.batches {
				last = max(last, b.Last)
			}
		}
	}
	sp.recs = make([]shareRecord, last-sp.start+1)
	sp.buf = sp.recs
	sp.available = len(sp.recs)
	for i, r := range ps.recs {
		switch r.state {
		case persistAcknowledged:
			sp.recs[i] = shareRecord{state: shareAcknowledged, deliveries: r.deliveries}
			sp.available--
		case persistArchived:
			sp.recs[i] = shareRecord{state: shareArchived, deliveries: r.deliveries}
			sp.available--
		default:
			sp.recs[i].deliveries = r.deliveries
		}
	}
	for pid, stagings := range pending {
		for _, staging := range stagings {
			for _, b := range staging.batches {
				sp.notePending(pid, b.First, b.Last)
				for o := max(b.First, sp.start); o <= b.Last; o++ {
					if sp.recs[o-sp.start].state == shareAvailable {
						sp.available--
					}
					sp.recs[o-sp.start] = shareRecord{state: shareTxPending, deliveries: b.Deliveries, pid: pid, epoch: staging.epoch, ack: b.Ack}
				}
			}
		}
	}
	for i := range sp.recs {
		if r := sp.recs[i]; r.state == shareAvailable && int32(r.deliveries) >= limit {
			sp.set(sp.start+int64(i), shareRecord{state: shareArchived, deliveries: r.deliveries})
		}
	}
	sp.advance()
	return sp
}

// acquireLimits bounds one acquisition.
type acquireLimits struct {
	maxRecords int
	maxBytes   int
	lock       time.Duration
	limit      int32
	// readCommitted stops the window at the last stable offset and
	// archives records of aborted transactions.
	readCommitted bool
	// maxLocks is share.partition.max.record.locks: no new batch is
	// acquired while the window holds this many offsets.
	maxLocks int
	// wholeBatches is ShareFetch's batch-optimized acquire mode (KIP-1206,
	// Kafka's default): maxRecords is a soft limit, and a batch whose
	// records are being acquired is acquired to its end, as Kafka does.
	// Otherwise (record-limit mode) acquisition stops at maxRecords.
	wholeBatches bool
}

// upTo is the offset the window may grow to.
func (sp *sharePartition) upTo(lim acquireLimits) int64 {
	if lim.readCommitted {
		return sp.p.lastStableOffset()
	}
	return sp.p.endOffset()
}

// acquire hands up to maxRecords AVAILABLE records to member: first those
// already in the window, lowest offset first, then new records (extend).
// It returns the acquired ranges (consecutive offsets with one delivery
// count) and the stored batches that hold them. Offsets are taken in
// increasing order (the window's, then the new ones past it), so the
// ranges grow as they are taken.
func (sp *sharePartition) acquire(member string, lim acquireLimits, now time.Time) ([]kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, []*storedBatch) {
	deadline := now.Add(lim.lock)
	sp.archiveDeleted()
	var ranges []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	taken := 0
	note := func(off int64, deliveries int16) {
		taken++
		if n := len(ranges); n > 0 && ranges[n-1].LastOffset == off-1 && ranges[n-1].DeliveryCount == deliveries {
			ranges[n-1].LastOffset = off
			return
		}
		ar := kmsg.NewShareFetchResponseTopicPartitionAcquiredRecord()
		ar.FirstOffset, ar.LastOffset, ar.DeliveryCount = off, off, deliveries
		ranges = append(ranges, ar)
	}
	acquired := func(deliveries int16) shareRecord {
		return shareRecord{state: shareAcquired, deliveries: deliveries, member: member, deadline: deadline}
	}
	for i := 0; i < len(sp.recs) && sp.available > 0 && taken < lim.maxRecords; i++ {
		r := sp.recs[i]
		if r.state != shareAvailable {
			continue
		}
		off := sp.start + int64(i)
		if int32(r.deliveries) >= lim.limit {
			sp.set(off, shareRecord{state: shareArchived, deliveries: r.deliveries})
			continue
		}
		sp.set(off, acquired(r.deliveries+1))
		note(off, r.deliveries+1)
	}
	sp.extend(lim, func() int { return taken }, func(off int64) {
		sp.grow(acquired(1))
		note(off, 1)
	})
	sp.advance()
	if taken == 0 {
		return nil, nil
	}
	return ranges, sp.batchesHolding(ranges)
}

// extend grows the window over new records up to upTo, archiving records
// of aborted transactions under read_committed and handing the rest
// (control records included) to take, which grows the window by the
// record, until taken() reaches maxRecords, maxBytes of batches are used
// or, at a batch boundary, the window holds maxLocks offsets.
func (sp *sharePartition) extend(lim acquireLimits, taken func() int, take func(off int64)) {
	p := sp.p
	upTo := sp.upTo(lim)
	if sp.end() < p.logStart {
		if len(sp.recs) > 0 {
			return // records in flight below the log start hold the window back
		}
		sp.start = p.logStart
	}
	if sp.end() >= upTo || taken() >= lim.maxRecords {
		return
	}
	var aborted []abortedTxn
	if lim.readCommitted {
		aborted = p.abortedIn(sp.end(), upTo)
	}
	bytes := 0
	for i := p.batchIndex(sp.end()); i < len(p.batches) && taken() < lim.maxRecords; i++ {
		b := p.batches[i]
		if b.base >= upTo || (taken() > 0 && bytes+len(b.raw) > lim.maxBytes) {
			return
		}
		if sp.end() <= b.base && len(sp.recs) >= lim.maxLocks {
			return
		}
		bytes += len(b.raw)
		skip := !b.control && b.txn && batchAborted(b, aborted)
		// A fetch carries whole stored batches: records of a batch left
		// for later fetches would travel, and be decoded, again with
		// each of them.
		for off := max(b.base, sp.end()); off <= b.last && (taken() < lim.maxRecords || lim.wholeBatches); off++ {
			if skip {
				sp.grow(shareRecord{state: shareArchived})
				continue
			}
			take(off)
		}
	}
}

// archiveDeleted archives the AVAILABLE records below the log start: their
// batches are gone (retention, DeleteRecords), so they can never be
// delivered.
func (sp *sharePartition) archiveDeleted() {
	for i := 0; i < len(sp.recs) && sp.start+int64(i) < sp.p.logStart; i++ {
		if r := sp.recs[i]; r.state == shareAvailable {
			sp.set(sp.start+int64(i), shareRecord{state: shareArchived, deliveries: r.deliveries})
		}
	}
	sp.advance()
}

// batchAborted reports whether a transactional batch belongs to one of the
// aborted transactions.
func batchAborted(b *storedBatch, aborted []abortedTxn) bool {
	for _, a := range aborted {
		if a.pid == b.pid && a.first <= b.base && b.last <= a.last {
			return true
		}
	}
	return false
}

// batchesHolding returns the stored batches that hold the ranges, which
// are in offset order.
func (sp *sharePartition) batchesHolding(ranges []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) []*storedBatch {
	var out []*storedBatch
	for _, r := range ranges {
		o := r.FirstOffset
		if n := len(out); n > 0 && out[n-1].last >= o {
			o = out[n-1].last + 1
		}
		for i := sp.p.batchIndex(o); i < len(sp.p.batches) && sp.p.batches[i].base <= r.LastOffset; i++ {
			out = append(out, sp.p.batches[i])
		}
	}
	return out
}

// shareAck is one acknowledged offset range with one type per offset (or
// one for the whole range).
type shareAck struct {
	first, last int64
	types       []wire.AckType
}

func (a shareAck) typeAt(off int64) wire.AckType {
	if len(a.types) == 1 {
		return a.types[0]
	}
	return a.types[off-a.first]
}

// checkHeld reports, for acknowledging or staging, whether every offset of
// acks is ACQUIRED by member with its lock unexpired.
func (sp *sharePartition) checkHeld(member string, acks []shareAck, now time.Time) (*kerr.Error, string) {
	for _, a := range acks {
		if a.first < sp.start || a.last >= sp.end() {
			return kerr.InvalidRecordState, fmt.Sprintf("offsets %d-%d are outside the in-flight window %d-%d", a.first, a.last, sp.start, sp.end()-1)
		}
		for off := a.first; off <= a.last; off++ {
			r := &sp.recs[off-sp.start]
			switch {
			case r.state != shareAcquired:
				return kerr.InvalidRecordState, fmt.Sprintf("offset %d is %s, not ACQUIRED", off, r.state)
			case r.member != member:
				return kerr.InvalidRecordState, fmt.Sprintf("offset %d is acquired by another member", off)
			case !now.Before(r.deadline):
				return kerr.InvalidRecordState, fmt.Sprintf("the acquisition lock of offset %d has expired", off)
			}
		}
	}
	return nil, ""
}

// acknowledge applies acknowledgements of member's records, all or none.
// As in Kafka, offsets before the start offset are done and ignored, an
// offset past the last one handed out is INVALID_REQUEST, and any other
// offset not ACQUIRED by member under an unexpired lock fails the whole
// partition with INVALID_RECORD_STATE.
func (sp *sharePartition) acknowledge(member string, acks []shareAck, lock time.Duration, limit int32, now time.Time) (*kerr.Error, string) {
	acks = sp.dropDone(acks)
	for _, a := range acks {
		if a.last >= sp.end() {
			return kerr.InvalidRequest, fmt.Sprintf("offsets %d-%d reach past the last offset handed out, %d", a.first, a.last, sp.end()-1)
		}
	}
	if err, msg := sp.checkHeld(member, acks, now); err != nil {
		return err, msg
	}
	for _, a := range acks {
		for off := a.first; off <= a.last; off++ {
			r := sp.recs[off-sp.start]
			switch a.typeAt(off) {
			case wire.AckAccept:
				sp.set(off, shareRecord{state: shareAcknowledged, deliveries: r.deliveries})
			case wire.AckRelease:
				sp.release(off, r.deliveries, limit)
			case wire.AckReject, wire.AckGap:
				sp.set(off, shareRecord{state: shareArchived, deliveries: r.deliveries})
				if a.typeAt(off) == wire.AckReject {
					sp.deadLetter(off, r.deliveries, true)
				}
			case wire.AckRenew:
				r.deadline = now.Add(lock)
				sp.set(off, r)
			}
		}
	}
	sp.advance()
	return nil, ""
}

// dropDone removes the offsets before the start offset from acks.
func (sp *sharePartition) dropDone(acks []shareAck) []shareAck {
	out := acks[:0:0]
	for _, a := range acks {
		switch {
		case a.last < sp.start:
			continue
		case a.first < sp.start:
			if len(a.types) > 1 {
				a.types = a.types[sp.start-a.first:]
			}
			a.first = sp.start
		}
		out = append(out, a)
	}
	return out
}

// stage marks acknowledged records TX_PENDING for producer pid at epoch;
// the caller has checked them with checkHeld and written the staged record.
func (sp *sharePartition) stage(acks []shareAck, pid int64, epoch int16) {
	for _, a := range acks {
		sp.notePending(pid, a.first, a.last)
		for off := a.first; off <= a.last; off++ {
			r := sp.recs[off-sp.start]
			sp.set(off, shareRecord{state: shareTxPending, deliveries: r.deliveries, pid: pid, epoch: epoch, ack: a.typeAt(off)})
		}
	}
}

// stagedBy reports whether every offset of acks is already TX_PENDING for
// producer pid at epoch with the same acknowledgement: a retried
// TxnShareAcknowledge whose first attempt was applied and whose answer was
// lost.
func (sp *sharePartition) stagedBy(acks []shareAck, pid int64, epoch int16) bool {
	if len(acks) == 0 {
		return false
	}
	for _, a := range acks {
		if a.first < sp.start || a.last >= sp.end() {
			return false
		}
		for off := a.first; off <= a.last; off++ {
			r := sp.recs[off-sp.start]
			if r.state != shareTxPending || r.pid != pid || r.epoch != epoch || r.ack != a.typeAt(off) {
				return false
			}
		}
	}
	return true
}

// staged lists the staged batches of acks: runs of one type and one
// delivery count.
func (sp *sharePartition) staged(acks []shareAck) []shareStagedBatch {
	var out []shareStagedBatch
	for _, a := range acks {
		for off := a.first; off <= a.last; off++ {
			t, d := a.typeAt(off), sp.recs[off-sp.start].deliveries
			if n := len(out); n > 0 && out[n-1].Last == off-1 && out[n-1].Ack == t && out[n-1].Deliveries == d {
				out[n-1].Last = off
				continue
			}
			out = append(out, shareStagedBatch{First: off, Last: off, Ack: t, Deliveries: d})
		}
	}
	return out
}

// resolve applies a transaction outcome to the records pid staged.
func (sp *sharePartition) resolve(pid int64, commit bool, limit int32) int {
	span, ok := sp.pendingBy[pid]
	if !ok {
		return 0
	}
	delete(sp.pendingBy, pid)
	n := 0
	for off := max(span.first, sp.start); off <= min(span.last, sp.end()-1); off++ {
		r := sp.recs[off-sp.start]
		if r.state != shareTxPending || r.pid != pid {
			continue
		}
		n++
		switch {
		case commit && r.ack == wire.AckAccept:
			sp.set(off, shareRecord{state: shareAcknowledged, deliveries: r.deliveries})
		case commit && (r.ack == wire.AckReject || r.ack == wire.AckGap):
			sp.set(off, shareRecord{state: shareArchived, deliveries: r.deliveries})
			if r.ack == wire.AckReject {
				sp.deadLetter(off, r.deliveries, true)
			}
		default:
			sp.release(off, r.deliveries, limit)
		}
	}
	sp.advance()
	return n
}

// expire releases records whose lock deadline has passed.
func (sp *sharePartition) expire(now time.Time, limit int32) int {
	if sp.acquired == 0 || now.Before(sp.nextDeadline) {
		return 0
	}
	n := 0
	sp.nextDeadline = time.Time{}
	for i := range sp.recs {
		r := sp.recs[i]
		if r.state != shareAcquired {
			continue
		}
		if now.Before(r.deadline) {
			if sp.nextDeadline.IsZero() || r.deadline.Before(sp.nextDeadline) {
				sp.nextDeadline = r.deadline
			}
			continue
		}
		sp.release(sp.start+int64(i), r.deliveries, limit)
		n++
	}
	sp.advance()
	return n
}

// releaseMember releases every record member holds (its share session
// closed, or the session's connection did), keeping delivery counts.
func (sp *sharePartition) releaseMember(member string, limit int32) int {
	if sp.acquired == 0 {
		return 0
	}
	n := 0
	for i := range sp.recs {
		if r := sp.recs[i]; r.state == shareAcquired && r.member == member {
			sp.release(sp.start+int64(i), r.deliveries, limit)
			n++
		}
	}
	sp.advance()
	return n
}

// hasWork reports whether an acquisition under lim could find a record
// now.
func (sp *sharePartition) hasWork(lim acquireLimits) bool {
	return sp.available > 0 || sp.canGrow(lim)
}

// canGrow reports whether extend could take a new offset: one is there
// to take, and the window is below maxLocks or in the middle of a batch.
func (sp *sharePartition) canGrow(lim acquireLimits) bool {
	if sp.end() >= sp.upTo(lim) || (sp.end() < sp.p.logStart && len(sp.recs) > 0) {
		return false
	}
	if len(sp.recs) < lim.maxLocks {
		return true
	}
	i := sp.p.batchIndex(sp.end())
	return i < len(sp.p.batches) && sp.p.batches[i].base < sp.end()
}
