package broker

// The share coordinator: the persisted state of share-partitions in
// __share_group_state.
//
// Each node serves the __share_group_state partitions it leads (shards);
// the state of a partition is the replay of its log. A share-partition (a
// group's view of one data partition) lives in the partition
// CoordinatorPartition(2, "group:topicId:partition"). Every record has
//
//	key   = JSON {"group":"g","topicId":"<base64url topic id>","partition":0}
//	value = JSON shareStateValue, or null (a tombstone: the group was deleted)
//
// with value kinds:
//
//	{"kind":"snapshot","stateEpoch":1,"startOffset":10,"batches":[...]}
//	    the whole state: replaces what was there. Written when a
//	    share-partition is initialized and every shareSnapshotEvery updates.
//	{"kind":"update","stateEpoch":1,"startOffset":12,"batches":[...]}
//	    a delta: the start offset moves forward, the listed offsets take the
//	    listed states. Ignored unless stateEpoch matches the current state.
//	{"kind":"staged","stateEpoch":1,"staged":[{"first":5,"last":7,"ack":1,"deliveries":2}]}
//	    transactional acknowledgements (KIP-1289), written in a
//	    transactional batch with the producer's id and epoch. They stay
//	    pending until a control record of that producer follows: COMMIT
//	    applies them (ACCEPT -> ACKNOWLEDGED, REJECT -> ARCHIVED, RELEASE ->
//	    AVAILABLE), ABORT makes them AVAILABLE. Either way the delivery
//	    count is the one staged.
//
// A batch is {"first":a,"last":b,"state":s,"deliveries":n}; s is Kafka's
// RecordState number (0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED). An offset at
// or after startOffset that no batch names is AVAILABLE with no deliveries.
// ACQUIRED records are persisted as AVAILABLE with their delivery count
// (acquisitions are written, so a new leader counts the delivery in flight
// when leadership moved); TX_PENDING records are persisted the same way, and
// their staged acknowledgement sits in the pending transactional record.
//
// The data partition's leader owns the live state (share_partition.go) and
// writes every change here through writeState; the live path and replay
// apply records with the same functions, so a new leader of a
// __share_group_state partition rebuilds exactly the state the old one had.
// Compaction (compaction.go) rewrites the log as one snapshot per
// share-partition plus the staged acknowledgements still pending
// (liveRecords, at the end of this file).

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/kshare-go/kshare/wire"
)

// shareKey identifies one share-partition.
type shareKey struct {
	group     string
	topicID   [16]byte
	partition int32
}

func (k shareKey) String() string { return shareStateKey(k.group, k.topicID, k.partition) }

// Persisted record states, numbered as Kafka's RecordState.
const (
	persistAvailable    int8 = 0
	persistAcknowledged int8 = 2
	persistArchived     int8 = 4
)

// Kinds of shareStateValue.
const (
	shareKindSnapshot = "snapshot"
	shareKindUpdate   = "update"
	shareKindStaged   = "staged"
)

// shareSnapshotEvery bounds how many updates follow a snapshot of one
// share-partition before the next snapshot is written.
const shareSnapshotEvery = 64

type shareStateBatch struct {
	First      int64 `json:"first"`
	Last       int64 `json:"last"`
	State      int8  `json:"state"`
	Deliveries int16 `json:"deliveries"`
}

type shareStagedBatch struct {
	First      int64        `json:"first"`
	Last       int64        `json:"last"`
	Ack        wire.AckType `json:"ack"`
	Deliveries int16        `json:"deliveries"`
}

type shareStateRecordKey struct {
	Group     string `json:"group"`
	TopicID   string `json:"topicId"`
	Partition int32  `json:"partition"`
}

type shareStateValue struct {
	Kind        string             `json:"kind"`
	StateEpoch  int32              `json:"stateEpoch"`
	StartOffset int64              `json:"startOffset,omitempty"`
	Batches     []shareStateBatch  `json:"batches,omitempty"`
	Staged      []shareStagedBatch `json:"staged,omitempty"`
}

// encodeShareStateKey writes the key as encoding/json would
// (json_append.go).
func encodeShareStateKey(k shareKey) []byte {
	id := uuidString(k.topicID) // base64url: plain
	b := make([]byte, 0, 48+len(k.group)+len(id))
	b = append(b, `{"group":`...)
	b, plain := appendPlainString(b, k.group)
	if !plain {
		b, _ = json.Marshal(shareStateRecordKey{Group: k.group, TopicID: id, Partition: k.partition}) // strings and ints always marshal
		return b
	}
	b = append(b, `,"topicId":"`...)
	b = append(b, id...)
	b = append(b, `","partition":`...)
	b = strconv.AppendInt(b, int64(k.partition), 10)
	return append(b, '}')
}

func decodeShareStateKey(raw []byte) (shareKey, error) {
	var rk shareStateRecordKey
	if err := json.Unmarshal(raw, &rk); err != nil {
		return shareKey{}, fmt.Errorf("share state key: %w", err)
	}
	id, err := base64.RawURLEncoding.DecodeString(rk.TopicID)
	if err != nil || len(id) != 16 {
		return shareKey{}, fmt.Errorf("share state key: bad topic id %q", rk.TopicID)
	}
	return shareKey{group: rk.Group, topicID: [16]byte(id), partition: rk.Partition}, nil
}

// encodeShareStateValue writes v as encoding/json would (a test checks
// that): this runs for every change of a share-partition, and reflection
// was a visible part of the share path's profile.
func encodeShareStateValue(v *shareStateValue) []byte {
	if v == nil {
		return nil
	}
	b := make([]byte, 0, 64+48*(len(v.Batches)+len(v.Staged)))
	b = append(b, `{"kind":`...)
	b = strconv.AppendQuote(b, v.Kind) // one of the kind constants: plain ASCII
	b = append(b, `,"stateEpoch":`...)
	b = strconv.AppendInt(b, int64(v.StateEpoch), 10)
	if v.StartOffset != 0 {
		b = append(b, `,"startOffset":`...)
		b = strconv.AppendInt(b, v.StartOffset, 10)
	}
	b = appendStateList(b, "batches", v.Batches, func(b []byte, x shareStateBatch) []byte {
		return appendStateRange(b, x.First, x.Last, "state", int64(x.State), x.Deliveries)
	})
	b = appendStateList(b, "staged", v.Staged, func(b []byte, x shareStagedBatch) []byte {
		return appendStateRange(b, x.First, x.Last, "ack", int64(x.Ack), x.Deliveries)
	})
	return append(b, '}')
}

// appendStateList appends ,"<name>":[...] unless xs is empty (omitempty).
func appendStateList[T any](b []byte, name string, xs []T, each func([]byte, T) []byte) []byte {
	if len(xs) == 0 {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":[`...)
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = each(b, x)
	}
	return append(b, ']')
}

// appendStateRange appends {"first":f,"last":l,"<name>":v,"deliveries":d}.
func appendStateRange(b []byte, first, last int64, name string, v int64, deliveries int16) []byte {
	b = append(b, `{"first":`...)
	b = strconv.AppendInt(b, first, 10)
	b = append(b, `,"last":`...)
	b = strconv.AppendInt(b, last, 10)
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	b = strconv.AppendInt(b, v, 10)
	b = append(b, `,"deliveries":`...)
	b = strconv.AppendInt(b, int64(deliveries), 10)
	return append(b, '}')
}

// decodeShareStateValue returns nil for a tombstone.
func decodeShareStateValue(raw []byte) (*shareStateValue, error) {
	if raw == nil {
		return nil, nil
	}
	v := new(shareStateValue)
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("share state value: %w", err)
	}
	switch v.Kind {
	case shareKindSnapshot, shareKindUpdate, shareKindStaged:
		return v, nil
	}
	return nil, fmt.Errorf("share state value: unknown kind %q", v.Kind)
}

// persistedRecord is one offset's persisted state.
type persistedRecord struct {
	state      int8
	deliveries int16
}

// sharePersisted is the persisted state of one share-partition.
type sharePersisted struct {
	stateEpoch int32
	start      int64
	// recs holds offsets start .. start+len(recs)-1; an offset past them,
	// or one no record named, is AVAILABLE with no deliveries (the zero
	// persistedRecord).
	recs    []persistedRecord
	buf     []persistedRecord // the array recs lives in (share_window.go)
	updates int               // since the last snapshot
}

// maxPersistedSpan bounds how far past its start offset a share-partition's
// state may name an offset. The broker writes only offsets of the live
// window (share.partition.max.record.locks, at most 4000, plus the rest of
// one batch), so a record beyond is damage, refused rather than allocated.
const maxPersistedSpan = 1 << 22

// set gives offsets first..last the persisted state r; offsets before the
// start offset are done and ignored.
func (sp *sharePersisted) set(first, last int64, r persistedRecord) error {
	first = max(first, sp.start)
	if last < first {
		return nil
	}
	if last-sp.start >= maxPersistedSpan {
		return fmt.Errorf("offset %d is more than %d past the start offset %d", last, maxPersistedSpan, sp.start)
	}
	for int64(len(sp.recs)) <= last-sp.start {
		sp.recs, sp.buf = appendWindow(sp.recs, sp.buf, persistedRecord{})
	}
	for o := first; o <= last; o++ {
		sp.recs[o-sp.start] = r
	}
	return nil
}

// at returns the persisted state of offset o (at or after start).
func (sp *sharePersisted) at(o int64) persistedRecord {
	if i := o - sp.start; i >= 0 && i < int64(len(sp.recs)) {
		return sp.recs[i]
	}
	return persistedRecord{}
}

func (r persistedRecord) done() bool {
	return r.state == persistAcknowledged || r.state == persistArchived
}

// advance moves the start offset past the ACKNOWLEDGED and ARCHIVED
// offsets at its head and forgets what lies before it.
func (sp *sharePersisted) advance() {
	n := 0
	for n < len(sp.recs) && sp.recs[n].done() {
		n++
	}
	sp.drop(n)
}

// drop forgets the first n offsets.
func (sp *sharePersisted) drop(n int) {
	if n > 0 {
		sp.recs = dropWindow(sp.recs, sp.buf, n)
		sp.start += int64(n)
	}
}

func (sp *sharePersisted) moveStart(start int64) {
	if start <= sp.start {
		return
	}
	n := int(min(start-sp.start, int64(len(sp.recs))))
	sp.drop(n)
	sp.start = start
}

// batches lists the persisted offsets as coalesced batches, by offset.
// Offsets AVAILABLE with no deliveries are left out (as they are when no
// record names them), except the last, which keeps the window's end.
func (sp *sharePersisted) batches() []shareStateBatch {
	var out []shareStateBatch
	for i, r := range sp.recs {
		if r == (persistedRecord{}) && i < len(sp.recs)-1 {
			continue
		}
		o := sp.start + int64(i)
		if n := len(out); n > 0 && out[n-1].Last == o-1 && out[n-1].State == r.state && out[n-1].Deliveries == r.deliveries {
			out[n-1].Last = o
			continue
		}
		out = append(out, shareStateBatch{First: o, Last: o, State: r.state, Deliveries: r.deliveries})
	}
	return out
}

// last returns the highest persisted offset, or start-1.
func (sp *sharePersisted) last() int64 { return sp.start + int64(len(sp.recs)) - 1 }

// sharePending is one transactional write of staged acknowledgements that
// no marker has resolved yet.
type sharePending struct {
	key     shareKey
	epoch   int16
	batches []shareStagedBatch
}

// shareStateShard is one node's state of one __share_group_state partition.
type shareStateShard struct {
	parts map[shareKey]*sharePersisted
	// epochs is the last state epoch of every key ever initialized here,
	// so a share-partition initialized again after a deletion starts a new
	// epoch and stale updates of the old one are ignored.
	epochs  map[shareKey]int32
	pending map[int64][]sharePending // by producer id
}

func newShareStateShard() *shareStateShard {
	return &shareStateShard{
		parts:   make(map[shareKey]*sharePersisted),
		epochs:  make(map[shareKey]int32),
		pending: make(map[int64][]sharePending),
	}
}

// errShareStaleWrite reports a record for a state epoch that is no longer
// current; replay ignores such records as the live path does.
var errShareStaleWrite = errors.New("share state record for a stale state epoch")

// apply applies one record; pid >= 0 for a record of a transactional batch.
func (st *shareStateShard) apply(key shareKey, v *shareStateValue, pid int64, epoch int16) error {
	if v == nil {
		delete(st.parts, key)
		for id, entries := range st.pending {
			kept := entries[:0]
			for _, e := range entries {
				if e.key != key {
					kept = append(kept, e)
				}
			}
			if len(kept) == 0 {
				delete(st.pending, id)
			} else {
				st.pending[id] = kept
			}
		}
		return nil
	}
	if (v.Kind == shareKindStaged) != (pid >= 0) {
		return fmt.Errorf("share state %s record in a batch with producer id %d", v.Kind, pid)
	}
	if v.Kind == shareKindSnapshot {
		sp := &sharePersisted{stateEpoch: v.StateEpoch, start: v.StartOffset}
		for _, b := range v.Batches {
			if err := sp.set(b.First, b.Last, persistedRecord{state: b.State, deliveries: b.Deliveries}); err != nil {
				return fmt.Errorf("share state snapshot: %w", err)
			}
		}
		st.parts[key] = sp
		if v.StateEpoch > st.epochs[key] {
			st.epochs[key] = v.StateEpoch
		}
		return nil
	}
	sp := st.parts[key]
	if sp == nil || sp.stateEpoch != v.StateEpoch {
		return errShareStaleWrite
	}
	if v.Kind == shareKindStaged {
		st.pending[pid] = append(st.pending[pid], sharePending{key: key, epoch: epoch, batches: v.Staged})
		return nil
	}
	sp.moveStart(v.StartOffset)
	for _, b := range v.Batches {
		if err := sp.set(b.First, b.Last, persistedRecord{state: b.State, deliveries: b.Deliveries}); err != nil {
			return fmt.Errorf("share state update: %w", err)
		}
	}
	sp.advance()
	sp.updates++
	return nil
}

// resolve applies a transaction marker of producer pid: every pending
// staged acknowledgement of pid takes its outcome. It returns the
// share-partitions it changed.
func (st *shareStateShard) resolve(pid int64, commit bool) []shareKey {
	entries := st.pending[pid]
	delete(st.pending, pid)
	var keys []shareKey
	for _, e := range entries {
		sp := st.parts[e.key]
		if sp == nil {
			continue
		}
		for _, b := range e.batches {
			state := persistAvailable
			if commit {
				switch b.Ack {
				case wire.AckAccept:
					state = persistAcknowledged
				case wire.AckReject, wire.AckGap:
					state = persistArchived
				}
			}
			// Staged offsets were checked against the live window
			// when they were written: set cannot refuse them.
			_ = sp.set(b.First, b.Last, persistedRecord{state: state, deliveries: b.Deliveries})
		}
		sp.advance()
		keys = append(keys, e.key)
	}
	return keys
}

// pendingFor returns the unresolved stagings of key, by producer id, each
// with the producer epoch that staged it: a leader that loads the
// share-partition (after a move) must recognise the retry of a staging its
// predecessor applied, whose answer was lost.
func (st *shareStateShard) pendingFor(key shareKey) map[int64][]sharePending {
	var out map[int64][]sharePending
	for pid, entries := range st.pending {
		for _, e := range entries {
			if e.key != key {
				continue
			}
			if out == nil {
				out = make(map[int64][]sharePending)
			}
			out[pid] = append(out[pid], e)
		}
	}
	return out
}

// loadShareState replays a __share_group_state partition. A record that
// does not decode is logged and skipped: the broker wrote every record
// itself, so that only happens if the log was damaged.
func (sc *shareCoordinator) loadShareState(p *partition, node int32) *shareStateShard {
	st := newShareStateShard()
	for _, b := range p.batches {
		recs, err := decodeRecords(b.raw)
		if err != nil {
			sc.c.logger.Error("skipping undecodable share state batch", "partition", p.index, "offset", b.base, "err", err)
			continue
		}
		if b.control {
			if len(recs) == 1 && len(recs[0].key) >= 4 {
				st.resolve(b.pid, int16(binary.BigEndian.Uint16(recs[0].key[2:])) == controlCommit)
			}
			continue
		}
		pid := int64(-1)
		if b.txn {
			pid = b.pid
		}
		for _, r := range recs {
			key, err := decodeShareStateKey(r.key)
			if err != nil {
				sc.c.logger.Error("skipping share state record", "partition", p.index, "offset", b.base, "err", err)
				continue
			}
			v, err := decodeShareStateValue(r.value)
			if err == nil {
				err = st.apply(key, v, pid, b.epoch)
			}
			if err != nil && !errors.Is(err, errShareStaleWrite) {
				sc.c.logger.Error("skipping share state record", "partition", p.index, "offset", b.base, "key", key.String(), "err", err)
			}
		}
	}
	sc.c.logger.Debug("share state loaded", "partition", p.index, "node", node, "share_partitions", len(st.parts), "pending_producers", len(st.pending))
	return st
}

// liveRecords lists the records that rebuild the share state of p's
// serving shard, for compaction: a fresh snapshot of every share-partition,
// then the staged acknowledgements still waiting for their transaction's
// marker, as records of that producer (a staged record needs its
// share-partition's snapshot before it). The snapshots replace the
// snapshot-and-updates chains, so each share-partition's update count
// starts again; state epochs of deleted share-partitions are forgotten with
// their tombstones, so one initialized again later starts at epoch 1.
func (sc *shareCoordinator) liveRecords(p *partition) ([]keptRecord, func(), bool) {
	sh, err := sc.states.lookup(p.leader, p.index)
	if err != nil || !sh.current() {
		return nil, nil, false
	}
	st := sh.state
	keys := make([]shareKey, 0, len(st.parts))
	for key := range st.parts {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var kept []keptRecord
	for _, key := range keys {
		ps := st.parts[key]
		v := &shareStateValue{Kind: shareKindSnapshot, StateEpoch: ps.stateEpoch, StartOffset: ps.start, Batches: ps.batches()}
		kept = append(kept, keptRecord{order: int64(len(kept)), rec: kv{key: encodeShareStateKey(key), value: encodeShareStateValue(v)}, pid: -1, epoch: -1})
	}
	pids := make([]int64, 0, len(st.pending))
	for pid := range st.pending {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, pid := range pids {
		for _, e := range st.pending[pid] {
			ps := st.parts[e.key]
			if ps == nil {
				continue
			}
			v := &shareStateValue{Kind: shareKindStaged, StateEpoch: ps.stateEpoch, Staged: e.batches}
			kept = append(kept, keptRecord{order: int64(len(kept)), rec: kv{key: encodeShareStateKey(e.key), value: encodeShareStateValue(v)}, pid: pid, epoch: e.epoch})
		}
	}
	return kept, func() {
		for _, ps := range st.parts {
			ps.updates = 0
		}
		for key := range st.epochs {
			if st.parts[key] == nil {
				delete(st.epochs, key)
			}
		}
	}, true
}
