package broker

// The transaction coordinator.
//
// Each node serves the __transaction_state partitions it leads. The state
// of a partition is the replay of its log: every transition of a
// transaction is one record, key = the transactional id (UTF-8 bytes),
// value = a JSON object (txnRecord):
//
//	{"producerId":1000,"prevProducerId":-1,"nextProducerId":-1,
//	 "epoch":3,"lastEpoch":2,"timeoutMs":60000,"state":"Ongoing",
//	 "partitions":{"orders":[0,2]},"tv":2,"startMs":1700000000000,
//	 "updateMs":1700000000100}
//
// state is one of Kafka's names (Empty, Ongoing, PrepareCommit,
// PrepareAbort, CompleteCommit, CompleteAbort); tv is the transaction
// version of the request that made the transition (0 for the TV0/TV1 APIs,
// 2 for EndTxn v5 and the partition leaders' implicit adds); startMs is -1
// when no transaction has started. The last record of an id wins; a record
// with a null value deletes it. A record is written before the in-memory
// state changes, through shard.append, which fails with NOT_COORDINATOR
// once the node no longer leads the partition.
//
// Kafka's PrepareEpochFence is an in-memory pending state that is never
// written; here a fence is one atomic step on the run loop that writes
// PrepareAbort at the fenced epoch, so no transaction is ever seen in it.
//
// Each transactional id has one timer (timers.go), armed at whatever is due
// next for it: the transaction timeout while Ongoing, the next marker
// resend while prepared, its expiry otherwise. An id with no transaction in
// progress expires TransactionalIDExpiration (Kafka's
// transactional.id.expiration.ms, 7 days) after its last update: a
// tombstone is written and the id is forgotten, as Kafka's Dead state
// does. Idle ids cost nothing until then. The log is compacted to one
// record per live id (compaction.go).
//
// A new leader replays the log; a transaction it finds in PrepareCommit or
// PrepareAbort is completed at once, by sending its markers again.
// Markers are idempotent at the leaders (KIP-1228), so sending them twice
// is safe.

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare/wire"
)

// txnState is the state of one transactional id, as Kafka names it.
type txnState int8

const (
	txnEmpty txnState = iota
	txnOngoing
	txnPrepareCommit
	txnPrepareAbort
	txnCompleteCommit
	txnCompleteAbort
)

var txnStateNames = [...]string{
	txnEmpty:          "Empty",
	txnOngoing:        "Ongoing",
	txnPrepareCommit:  "PrepareCommit",
	txnPrepareAbort:   "PrepareAbort",
	txnCompleteCommit: "CompleteCommit",
	txnCompleteAbort:  "CompleteAbort",
}

func (s txnState) String() string {
	if s >= 0 && int(s) < len(txnStateNames) {
		return txnStateNames[s]
	}
	return fmt.Sprintf("txnState(%d)", int8(s))
}

func (s txnState) preparing() bool { return s == txnPrepareCommit || s == txnPrepareAbort }

func (s txnState) complete() bool { return s == txnCompleteCommit || s == txnCompleteAbort }

// parseTxnState maps a state name to a state this coordinator can hold.
// known is true as well for the names Kafka knows that never occur here
// (PrepareEpochFence, Dead), so a filter naming them is not "unknown".
func parseTxnState(name string) (s txnState, holdable, known bool) {
	for i, n := range txnStateNames {
		if n == name {
			return txnState(i), true, true
		}
	}
	return 0, false, name == "PrepareEpochFence" || name == "Dead"
}

// Transaction versions as WriteTxnMarkers v2 carries them.
const (
	txnVersionLegacy int8 = 0 // TV0/TV1: EndTxn v0-4, client AddPartitionsToTxn
	txnVersion2      int8 = 2 // TV2: EndTxn v5+, implicit adds by partition leaders
)

// epochExhausted reports whether an epoch leaves no room for another bump
// (Kafka's isEpochExhausted: the last usable epoch is MaxInt16-1, and
// MaxInt16 is kept for the bump that carries the final markers).
func epochExhausted(epoch int16) bool { return epoch >= math.MaxInt16-1 }

// txnPartition names one partition of a transaction.
type txnPartition struct {
	topic     string
	partition int32
}

// txnMeta is the state of one transactional id. The fields up to updateMs
// are persisted; the rest is the coordinator's working state for markers.
type txnMeta struct {
	id             string
	producerID     int64
	prevProducerID int64 // the id before the last rotation; -1 for none
	nextProducerID int64 // the id a prepared TV2 transaction rotates to; -1 for none
	epoch          int16
	lastEpoch      int16
	timeoutMs      int32
	state          txnState
	partitions     map[txnPartition]struct{}
	tv             int8
	startMs        int64
	updateMs       int64
	// epochKept: the last transaction ended with EndTxn below v5 and
	// kept its epoch (transaction version 1), so no leader may start a
	// transaction at this epoch (addPartitions).
	epochKept bool

	// pending holds the partitions of a prepared transaction whose marker
	// is not written yet; retry paces marker resends.
	pending map[txnPartition]struct{}
	retryAt time.Time
	retry   *backoff.ExponentialBackOff
}

// next returns a copy of m's persisted fields for the next transition.
func (m *txnMeta) next(now time.Time) *txnMeta {
	n := &txnMeta{
		id:             m.id,
		producerID:     m.producerID,
		prevProducerID: m.prevProducerID,
		nextProducerID: m.nextProducerID,
		epoch:          m.epoch,
		lastEpoch:      m.lastEpoch,
		timeoutMs:      m.timeoutMs,
		state:          m.state,
		partitions:     make(map[txnPartition]struct{}, len(m.partitions)),
		tv:             m.tv,
		startMs:        m.startMs,
		updateMs:       now.UnixMilli(),
		epochKept:      m.epochKept,
	}
	for tp := range m.partitions {
		n.partitions[tp] = struct{}{}
	}
	return n
}

// sortedPartitions returns a set of partitions in topic, partition order.
func sortedPartitions(set map[txnPartition]struct{}) []txnPartition {
	out := make([]txnPartition, 0, len(set))
	for tp := range set {
		out = append(out, tp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	return out
}

// txnRecord is the JSON value of a __transaction_state record.
type txnRecord struct {
	ProducerID     int64              `json:"producerId"`
	PrevProducerID int64              `json:"prevProducerId"`
	NextProducerID int64              `json:"nextProducerId"`
	Epoch          int16              `json:"epoch"`
	LastEpoch      int16              `json:"lastEpoch"`
	TimeoutMs      int32              `json:"timeoutMs"`
	State          string             `json:"state"`
	Partitions     map[string][]int32 `json:"partitions,omitempty"`
	TV             int8               `json:"tv"`
	StartMs        int64              `json:"startMs"`
	UpdateMs       int64              `json:"updateMs"`
	EpochKept      bool               `json:"epochKept,omitempty"`
}

// encodeTxnMeta writes m's record as encoding/json writes a txnRecord
// (json_append.go): by hand, unless a topic name needs escaping.
func encodeTxnMeta(m *txnMeta) ([]byte, error) {
	parts := sortedPartitions(m.partitions)
	b := make([]byte, 0, 200+32*len(parts))
	b = append(b, `{"producerId":`...)
	b = strconv.AppendInt(b, m.producerID, 10)
	b = append(b, `,"prevProducerId":`...)
	b = strconv.AppendInt(b, m.prevProducerID, 10)
	b = append(b, `,"nextProducerId":`...)
	b = strconv.AppendInt(b, m.nextProducerID, 10)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendInt(b, int64(m.epoch), 10)
	b = append(b, `,"lastEpoch":`...)
	b = strconv.AppendInt(b, int64(m.lastEpoch), 10)
	b = append(b, `,"timeoutMs":`...)
	b = strconv.AppendInt(b, int64(m.timeoutMs), 10)
	b = append(b, `,"state":`...)
	plain := true
	b, plain = appendPlainString(b, m.state.String())
	if plain && len(parts) > 0 {
		b = append(b, `,"partitions":{`...)
		for i, tp := range parts {
			switch {
			case i == 0:
			case tp.topic == parts[i-1].topic:
				b = append(b, ',')
				b = strconv.AppendInt(b, int64(tp.partition), 10)
				continue
			default:
				b = append(b, "],"...)
			}
			if b, plain = appendPlainString(b, tp.topic); !plain {
				break
			}
			b = append(b, ":["...)
			b = strconv.AppendInt(b, int64(tp.partition), 10)
		}
		b = append(b, "]}"...)
	}
	if plain {
		b = append(b, `,"tv":`...)
		b = strconv.AppendInt(b, int64(m.tv), 10)
		b = append(b, `,"startMs":`...)
		b = strconv.AppendInt(b, m.startMs, 10)
		b = append(b, `,"updateMs":`...)
		b = strconv.AppendInt(b, m.updateMs, 10)
		if m.epochKept {
			b = append(b, `,"epochKept":true`...)
		}
		return append(b, '}'), nil
	}
	return encodeTxnMetaJSON(m)
}

// encodeTxnMetaJSON is encodeTxnMeta by encoding/json.
func encodeTxnMetaJSON(m *txnMeta) ([]byte, error) {
	rec := txnRecord{
		ProducerID:     m.producerID,
		PrevProducerID: m.prevProducerID,
		NextProducerID: m.nextProducerID,
		Epoch:          m.epoch,
		LastEpoch:      m.lastEpoch,
		TimeoutMs:      m.timeoutMs,
		State:          m.state.String(),
		TV:             m.tv,
		StartMs:        m.startMs,
		UpdateMs:       m.updateMs,
		EpochKept:      m.epochKept,
	}
	if len(m.partitions) > 0 {
		rec.Partitions = make(map[string][]int32)
		for _, tp := range sortedPartitions(m.partitions) {
			rec.Partitions[tp.topic] = append(rec.Partitions[tp.topic], tp.partition)
		}
	}
	out, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("transaction record of %q: %w", m.id, err)
	}
	return out, nil
}

func decodeTxnMeta(id string, value []byte) (*txnMeta, error) {
	var rec txnRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		return nil, fmt.Errorf("transaction record of %q: %w", id, err)
	}
	state, holdable, _ := parseTxnState(rec.State)
	if !holdable {
		return nil, fmt.Errorf("transaction record of %q: unknown state %q", id, rec.State)
	}
	m := &txnMeta{
		id:             id,
		producerID:     rec.ProducerID,
		prevProducerID: rec.PrevProducerID,
		nextProducerID: rec.NextProducerID,
		epoch:          rec.Epoch,
		lastEpoch:      rec.LastEpoch,
		timeoutMs:      rec.TimeoutMs,
		state:          state,
		partitions:     make(map[txnPartition]struct{}),
		tv:             rec.TV,
		startMs:        rec.StartMs,
		updateMs:       rec.UpdateMs,
		epochKept:      rec.EpochKept,
	}
	for topic, parts := range rec.Partitions {
		for _, p := range parts {
			m.partitions[txnPartition{topic, p}] = struct{}{}
		}
	}
	return m, nil
}

// txnShard is one node's state of one __transaction_state partition.
type txnShard struct {
	txns   map[string]*txnMeta
	timers map[string]*timer // by transactional id
}

// txnCoordinator serves transactions on every node, through the shards of
// __transaction_state.
type txnCoordinator struct {
	c      *Cluster
	shards *shards[*txnShard]
	// peers caches what each node serves, as ApiVersions told the
	// coordinator (mixed_versions.go).
	peers peerVersions
}

// newTxnCoordinator loads every __transaction_state partition at its
// leader and registers the coordinator's listeners: shards follow leader
// moves, a loaded shard arms its transactional ids' timers (timeouts,
// marker resends, expiry) and a resigning one disarms them; compaction
// keeps the live records.
func newTxnCoordinator(c *Cluster) *txnCoordinator {
	tc := &txnCoordinator{c: c, peers: make(peerVersions)}
	tc.shards = newShards(c, wire.TransactionStateTopic, shardHooks[*txnShard]{
		load:      tc.load,
		afterLoad: tc.scheduleAll,
		unload:    tc.unload,
	})
	c.onCompact(wire.TransactionStateTopic, tc.liveRecords)
	return tc
}

// load replays a __transaction_state partition. A record that does not
// decode is logged and skipped: the broker wrote every record itself, so
// this only happens if the log was damaged.
func (tc *txnCoordinator) load(p *partition, node int32) *txnShard {
	st := &txnShard{txns: make(map[string]*txnMeta), timers: make(map[string]*timer)}
	for _, b := range p.batches {
		if b.control {
			continue
		}
		recs, err := decodeRecords(b.raw)
		if err != nil {
			tc.c.logger.Error("skipping undecodable transaction state batch", "partition", p.index, "offset", b.base, "err", err)
			continue
		}
		for _, r := range recs {
			id := string(r.key)
			if r.value == nil {
				delete(st.txns, id)
				continue
			}
			m, err := decodeTxnMeta(id, r.value)
			if err != nil {
				tc.c.logger.Error("skipping undecodable transaction state record", "partition", p.index, "offset", b.base, "err", err)
				continue
			}
			st.txns[id] = m
		}
	}
	prepared := 0
	for _, m := range st.txns {
		if m.state.preparing() {
			prepared++
		}
	}
	tc.c.logger.Info("transaction coordinator loaded", "partition", p.index, "node", node,
		"epoch", p.leaderEpoch, "transactions", len(st.txns), "prepared", prepared)
	return st
}

// shardFor returns the shard that may answer for txnID at node, or
// NOT_COORDINATOR: every answer goes through here (KAFKA-21181).
func (tc *txnCoordinator) shardFor(node int32, txnID string) (*shard[*txnShard], *kerr.Error) {
	return tc.shards.lookup(node, tc.c.CoordinatorPartition(coordinatorTxn, txnID))
}

// persist writes m's record and then makes it the state of its id.
func (tc *txnCoordinator) persist(sh *shard[*txnShard], m *txnMeta, now time.Time) *kerr.Error {
	value, err := encodeTxnMeta(m)
	if err != nil {
		tc.c.logger.Error("transaction state not written", "err", err)
		return kerr.UnknownServerError
	}
	if _, err := sh.append([]kv{{key: []byte(m.id), value: value}}, -1, -1, now); err != nil {
		return err
	}
	sh.state.txns[m.id] = m
	tc.schedule(sh, m)
	return nil
}

// allocProducerID hands out the next cluster-wide producer id.
func (c *Cluster) allocProducerID() int64 {
	id := c.nextProducerID
	c.nextProducerID++
	return id
}

// scheduleAll arms the timer of every id of a shard that starts serving.
func (tc *txnCoordinator) scheduleAll(sh *shard[*txnShard]) {
	for _, m := range sh.state.txns {
		tc.schedule(sh, m)
	}
}

// schedule arms the timer of m's id at what is due next for it: the
// transaction timeout while Ongoing, the next marker resend (at once after
// a load) while prepared, the id's expiry otherwise.
func (tc *txnCoordinator) schedule(sh *shard[*txnShard], m *txnMeta) {
	var due time.Time
	switch {
	case m.state == txnOngoing:
		due = time.UnixMilli(m.startMs + int64(m.timeoutMs))
	case m.state.preparing():
		due = m.retryAt
	default:
		due = time.UnixMilli(m.updateMs).Add(tc.c.cfg.txnIDExpiration)
	}
	t := sh.state.timers[m.id]
	if t == nil {
		id := m.id
		t = newTimer(func(now time.Time) { tc.due(sh, id, now) })
		sh.state.timers[id] = t
	}
	tc.c.arm(t, due)
}

// due runs when an id's timer fires: it aborts a transaction that outlived
// its timeout, resends the markers of a prepared one, or expires an idle
// id, if that is still due, and re-arms the timer for what comes next.
func (tc *txnCoordinator) due(sh *shard[*txnShard], id string, now time.Time) {
	if !sh.current() {
		return // the shard resigned; unload stops its timers
	}
	m := sh.state.txns[id]
	if m == nil {
		delete(sh.state.timers, id)
		return
	}
	nowMs := now.UnixMilli()
	switch {
	case m.state == txnOngoing && nowMs-m.startMs >= int64(m.timeoutMs):
		tc.c.logger.Info("aborting timed-out transaction", "transactional_id", m.id,
			"producer_id", m.producerID, "epoch", m.epoch, "timeout_ms", m.timeoutMs)
		if _, err := tc.fenceAndAbort(sh, m, now); err != nil {
			tc.c.logger.Warn("timed-out transaction not aborted", "transactional_id", m.id, "err", err)
		}
	case m.state.preparing() && !now.Before(m.retryAt):
		tc.sendMarkers(sh, m, now)
	case (m.state == txnEmpty || m.state.complete()) && !now.Before(time.UnixMilli(m.updateMs).Add(tc.c.cfg.txnIDExpiration)):
		tc.expire(sh, m, now)
		return
	}
	if cur := sh.state.txns[id]; cur != nil && !sh.state.timers[id].armed() {
		tc.schedule(sh, cur)
	}
}

// expire forgets an id with no transaction in progress, writing its
// tombstone first.
func (tc *txnCoordinator) expire(sh *shard[*txnShard], m *txnMeta, now time.Time) {
	if _, err := sh.append([]kv{{key: []byte(m.id)}}, -1, -1, now); err != nil {
		tc.c.logger.Warn("transactional id not expired", "transactional_id", m.id, "err", err)
		return
	}
	delete(sh.state.txns, m.id)
	delete(sh.state.timers, m.id)
	tc.c.logger.Debug("transactional id expired", "transactional_id", m.id, "producer_id", m.producerID,
		"state", m.state.String(), "last_update_ms", m.updateMs)
}

// unload stops the timers of a shard that no longer serves.
func (tc *txnCoordinator) unload(sh *shard[*txnShard]) {
	for _, t := range sh.state.timers {
		tc.c.disarm(t)
	}
}

// liveRecords lists one record per live id of the partition, for
// compaction.
func (tc *txnCoordinator) liveRecords(p *partition) ([]keptRecord, func(), bool) {
	sh, err := tc.shards.lookup(p.leader, p.index)
	if err != nil || !sh.current() {
		return nil, nil, false
	}
	ids := make([]string, 0, len(sh.state.txns))
	for id := range sh.state.txns {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	kept := make([]keptRecord, 0, len(ids))
	for i, id := range ids {
		value, err := encodeTxnMeta(sh.state.txns[id])
		if err != nil {
			tc.c.logger.Error("transaction state not compacted", "err", err)
			return nil, nil, false
		}
		kept = append(kept, keptRecord{order: int64(i), rec: kv{key: []byte(id), value: value}, pid: -1, epoch: -1})
	}
	return kept, nil, true
}
