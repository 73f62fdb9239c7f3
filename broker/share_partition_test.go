package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare/wire"
)

// shareTestLog returns a partition holding n plain records, one per batch.
func shareTestLog(n int) *partition {
	t := &topic{name: "t", id: [16]byte{1}}
	p := newPartition(t, 0, 0)
	t.partitions = []*partition{p}
	for i := 0; i < n; i++ {
		p.appendInternal([]kv{{value: []byte{byte(i)}}}, -1, -1, time.Now())
	}
	return p
}

func shareTestPartition(p *partition) *sharePartition {
	ps := &sharePersisted{stateEpoch: 1}
	return newLiveSharePartition(shareKey{group: "g", topicID: p.topic.id}, p, ps, nil, 3)
}

// shareLimits are the limits of an acquisition of n records with Kafka's
// default isolation (read_uncommitted) and record lock limit (2000).
func shareLimits(n int) acquireLimits {
	return acquireLimits{maxRecords: n, maxBytes: 1 << 20, lock: time.Minute, limit: 3, maxLocks: 2000}
}

func acquiredOffsets(sp *sharePartition, member string, n int, now time.Time) map[int64]int16 {
	return acquiredWith(sp, member, shareLimits(n), now)
}

func acquiredWith(sp *sharePartition, member string, lim acquireLimits, now time.Time) map[int64]int16 {
	ranges, _ := sp.acquire(member, lim, now)
	out := map[int64]int16{}
	for _, r := range ranges {
		for o := r.FirstOffset; o <= r.LastOffset; o++ {
			out[o] = r.DeliveryCount
		}
	}
	return out
}

func ack(first, last int64, t wire.AckType) shareAck {
	return shareAck{first: first, last: last, types: []wire.AckType{t}}
}

func TestSharePartitionAcquireAcknowledge(t *testing.T) {
	p := shareTestLog(10)
	sp := shareTestPartition(p)
	now := time.Now()

	got, batches := sp.acquire("m1", shareLimits(4), now)
	require.Len(t, got, 1)
	require.Equal(t, int64(0), got[0].FirstOffset)
	require.Equal(t, int64(3), got[0].LastOffset)
	require.Equal(t, int16(1), got[0].DeliveryCount)
	require.Len(t, batches, 4, "the stored batches holding offsets 0-3")

	err, _ := sp.acknowledge("m1", []shareAck{ack(0, 1, wire.AckAccept), ack(2, 2, wire.AckRelease), ack(3, 3, wire.AckReject)}, time.Minute, 3, now)
	require.Nil(t, err)
	require.Equal(t, int64(2), sp.start, "the start offset moves past the accepted prefix only")

	again := acquiredOffsets(sp, "m2", 3, now)
	require.Equal(t, map[int64]int16{2: 2, 4: 1, 5: 1}, again, "the released record comes back first, its delivery count raised; the rejected one never")
}

func TestSharePartitionAcknowledgeIsAllOrNothing(t *testing.T) {
	sp := shareTestPartition(shareTestLog(6))
	now := time.Now()
	acquiredOffsets(sp, "m1", 3, now)
	acquiredOffsets(sp, "m2", 3, now)

	err, msg := sp.acknowledge("m1", []shareAck{ack(0, 1, wire.AckAccept), ack(2, 3, wire.AckAccept)}, time.Minute, 3, now)
	require.Equal(t, kerr.InvalidRecordState, err)
	require.Contains(t, msg, "another member")
	require.Equal(t, map[shareRecordState]int{shareAcquired: 6}, shareCounts(sp), "nothing of the partition was applied")

	err, _ = sp.acknowledge("m1", []shareAck{ack(0, 0, wire.AckAccept)}, time.Minute, 3, now.Add(2*time.Minute))
	require.Equal(t, kerr.InvalidRecordState, err, "an expired lock cannot be acknowledged")
	err, _ = sp.acknowledge("m1", []shareAck{ack(7, 7, wire.AckAccept)}, time.Minute, 3, now)
	require.Equal(t, kerr.InvalidRequest, err, "offsets past the window were never handed out (Kafka's INVALID_REQUEST)")
}

func TestSharePartitionDeliveryLimitArchives(t *testing.T) {
	sp := shareTestPartition(shareTestLog(2))
	now := time.Now()
	for delivery := int16(1); delivery <= 3; delivery++ {
		got := acquiredOffsets(sp, "m", 1, now)
		require.Equal(t, map[int64]int16{0: delivery}, got)
		err, _ := sp.acknowledge("m", []shareAck{ack(0, 0, wire.AckRelease)}, time.Minute, 3, now)
		require.Nil(t, err)
	}
	require.Equal(t, int64(1), sp.start, "released a third time with limit 3: archived")
	require.Equal(t, map[int64]int16{1: 1}, acquiredOffsets(sp, "m", 5, now))
}

func TestSharePartitionLockExpiry(t *testing.T) {
	sp := shareTestPartition(shareTestLog(3))
	now := time.Now()
	lim := shareLimits(3)
	lim.lock = time.Second
	sp.acquire("m1", lim, now)
	require.Zero(t, sp.expire(now.Add(500*time.Millisecond), 3))
	require.Equal(t, 3, sp.expire(now.Add(time.Second), 3))
	require.Equal(t, map[int64]int16{0: 2, 1: 2, 2: 2}, acquiredOffsets(sp, "m2", 5, now))
	require.Equal(t, 3, sp.releaseMember("m2", 3))
	require.Equal(t, 3, shareCounts(sp)[shareAvailable])
}

// shareTxnLog returns a partition holding 0, 1 plain, an aborted
// transaction (2, marker 3), a committed one (4, marker 5), an open one (6)
// and a plain record after it (7).
func shareTxnLog(t *testing.T) *partition {
	p := shareTestLog(2)
	now := time.Now()
	p.appendInternal([]kv{{value: []byte("aborted")}}, 7, 0, now)
	_, _, err := p.appendMarker(markerCheck{pid: 7, epoch: 1, strict: true}, now)
	require.Nil(t, err)
	p.appendInternal([]kv{{value: []byte("committed")}}, 8, 0, now)
	_, _, err = p.appendMarker(markerCheck{pid: 8, epoch: 1, commit: true, strict: true}, now)
	require.Nil(t, err)
	p.appendInternal([]kv{{value: []byte("open")}}, 9, 0, now)
	p.appendInternal([]kv{{value: []byte("after")}}, -1, -1, now)
	return p
}

func TestSharePartitionReadCommitted(t *testing.T) {
	p := shareTxnLog(t)
	now := time.Now()
	lim := shareLimits(100)
	lim.readCommitted = true
	sp := shareTestPartition(p)
	require.Equal(t, map[int64]int16{0: 1, 1: 1, 3: 1, 4: 1, 5: 1}, acquiredWith(sp, "m", lim, now),
		"the aborted record is archived; markers are handed out like records")
	require.Equal(t, shareArchived, sp.recs[2].state)
	require.Equal(t, int64(6), sp.end(), "nothing at or past the open transaction")
	require.False(t, sp.hasWork(lim))
	_, _, err := p.appendMarker(markerCheck{pid: 9, epoch: 1, commit: true, strict: true}, now)
	require.Nil(t, err)
	require.True(t, sp.hasWork(lim))
	require.Equal(t, map[int64]int16{6: 1, 7: 1, 8: 1}, acquiredWith(sp, "m", lim, now))
}

func TestSharePartitionReadUncommitted(t *testing.T) {
	sp := shareTestPartition(shareTxnLog(t))
	require.Equal(t, map[int64]int16{0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1}, acquiredOffsets(sp, "m", 100, time.Now()),
		"every record up to the high watermark, aborted and open transactions included")
}

func TestSharePartitionRecordLockLimit(t *testing.T) {
	p := shareTestLog(0)
	now := time.Now()
	for range 3 {
		p.appendInternal([]kv{{value: []byte("a")}, {value: []byte("b")}, {value: []byte("c")}}, -1, -1, now)
	}
	sp := shareTestPartition(p)
	lim := shareLimits(100)
	lim.maxLocks = 4
	require.Len(t, acquiredWith(sp, "m", lim, now), 6, "whole batches until the window holds 4 offsets")
	require.False(t, sp.hasWork(lim))
	err, _ := sp.acknowledge("m", []shareAck{ack(0, 2, wire.AckAccept)}, time.Minute, 3, now)
	require.Nil(t, err)
	require.True(t, sp.hasWork(lim), "the window shrank below the limit")
	require.Equal(t, map[int64]int16{6: 1, 7: 1, 8: 1}, acquiredWith(sp, "m", lim, now))

	// A batch cut short by MaxRecords is finished even at the limit.
	sp = shareTestPartition(p)
	lim.maxRecords = 2
	require.Len(t, acquiredWith(sp, "m", lim, now), 2)
	lim.maxLocks = 2
	require.True(t, sp.hasWork(lim))
	require.Equal(t, map[int64]int16{2: 1}, acquiredWith(sp, "m", lim, now))
	require.False(t, sp.hasWork(lim))
}

func TestSharePartitionAcknowledgeOutsideTheWindow(t *testing.T) {
	sp := shareTestPartition(shareTestLog(5))
	now := time.Now()
	acquiredOffsets(sp, "m", 5, now)
	ackAll := func(acks ...shareAck) *kerr.Error {
		err, _ := sp.acknowledge("m", acks, time.Minute, 3, now)
		return err
	}
	require.Nil(t, ackAll(ack(0, 1, wire.AckAccept)))
	require.Equal(t, int64(2), sp.start)
	require.Nil(t, ackAll(ack(0, 1, wire.AckAccept)), "offsets before the start offset are done: ignored")
	require.Nil(t, ackAll(shareAck{first: 1, last: 3, types: []wire.AckType{wire.AckReject, wire.AckAccept, wire.AckRelease}}),
		"a range straddling the start offset applies from it, with the types of its offsets")
	require.Equal(t, int64(3), sp.start)
	require.Equal(t, shareAvailable, sp.recs[0].state, "offset 3 was released")
	require.ErrorIs(t, ackAll(ack(4, 6, wire.AckAccept)), kerr.InvalidRequest, "past the last offset handed out")
	require.ErrorIs(t, ackAll(ack(3, 3, wire.AckAccept)), kerr.InvalidRecordState, "an offset in the window not held")

	// Staging stays strict (DESIGN.md section 3): an offset before the
	// start offset is not held.
	err, _ := sp.checkHeld("m", []shareAck{ack(0, 0, wire.AckAccept)}, now)
	require.ErrorIs(t, err, kerr.InvalidRecordState)
}

func TestSharePartitionStagedRecords(t *testing.T) {
	sp := shareTestPartition(shareTestLog(6))
	now := time.Now()
	acquiredOffsets(sp, "m", 6, now)
	staged := []shareAck{ack(0, 1, wire.AckAccept), ack(2, 2, wire.AckReject), ack(3, 3, wire.AckRelease)}
	err, _ := sp.checkHeld("m", staged, now)
	require.Nil(t, err)
	require.Equal(t, []shareStagedBatch{
		{First: 0, Last: 1, Ack: wire.AckAccept, Deliveries: 1},
		{First: 2, Last: 2, Ack: wire.AckReject, Deliveries: 1},
		{First: 3, Last: 3, Ack: wire.AckRelease, Deliveries: 1},
	}, sp.staged(staged))
	sp.stage(staged, 42, 0)
	sp.stage([]shareAck{ack(4, 5, wire.AckAccept)}, 43, 0)

	err, _ = sp.acknowledge("m", []shareAck{ack(0, 0, wire.AckAccept)}, time.Minute, 3, now)
	require.Equal(t, kerr.InvalidRecordState, err, "TX_PENDING cannot be acknowledged")
	err, _ = sp.checkHeld("m", []shareAck{ack(0, 0, wire.AckAccept)}, now)
	require.Equal(t, kerr.InvalidRecordState, err, "TX_PENDING cannot be staged again")
	require.Zero(t, sp.expire(now.Add(time.Hour), 3), "TX_PENDING has no lock")
	require.Zero(t, sp.releaseMember("m", 3), "TX_PENDING outlives its member")
	require.Empty(t, acquiredOffsets(sp, "other", 10, now), "TX_PENDING cannot be acquired")

	require.Equal(t, 4, sp.resolve(42, true, 3))
	require.Equal(t, int64(3), sp.start, "accepted and rejected are done")
	require.Equal(t, 2, sp.resolve(43, false, 3))
	require.Equal(t, map[int64]int16{3: 2, 4: 2, 5: 2}, acquiredOffsets(sp, "m", 10, now),
		"released on commit and aborted records are available at once with their delivery count")
}

// TestSharePartitionPersistedRebuild writes every change of a live
// share-partition as the coordinator would and checks a rebuild from the
// persisted state: done records stay done, acquired ones come back
// AVAILABLE with the delivery counted, staged ones stay TX_PENDING.
func TestSharePartitionPersistedRebuild(t *testing.T) {
	p := shareTestLog(8)
	key := shareKey{group: "g", topicID: p.topic.id}
	st := newShareStateShard()
	require.NoError(t, st.apply(key, &shareStateValue{Kind: shareKindSnapshot, StateEpoch: 1}, -1, -1))
	sp := newLiveSharePartition(key, p, st.parts[key], nil, 3)
	persist := func() {
		if v := sp.takeUpdate(); v != nil {
			require.NoError(t, st.apply(key, v, -1, -1))
		}
	}
	now := time.Now()
	acquiredOffsets(sp, "m", 8, now)
	persist()
	err, _ := sp.acknowledge("m", []shareAck{ack(0, 1, wire.AckAccept), ack(3, 3, wire.AckReject)}, time.Minute, 3, now)
	require.Nil(t, err)
	persist()
	stage := []shareAck{ack(4, 5, wire.AckAccept)}
	require.NoError(t, st.apply(key, &shareStateValue{Kind: shareKindStaged, StateEpoch: 1, Staged: sp.staged(stage)}, 77, 0))
	sp.stage(stage, 77, 0)

	rebuilt := newLiveSharePartition(key, p, st.parts[key], st.pendingFor(key), 3)
	require.Equal(t, int64(2), rebuilt.start)
	require.Equal(t, []shareRecordState{shareAvailable, shareArchived, shareTxPending, shareTxPending, shareAvailable, shareAvailable},
		recordStates(rebuilt))
	require.Equal(t, map[int64]int16{2: 2, 6: 2, 7: 2}, acquiredOffsets(rebuilt, "m2", 10, now))

	require.Equal(t, []shareKey{key}, st.resolve(77, true))
	require.Equal(t, 2, rebuilt.resolve(77, true, 3))
	again := newLiveSharePartition(key, p, st.parts[key], st.pendingFor(key), 3)
	require.Equal(t, int64(2), again.start)
	require.Equal(t, []shareRecordState{shareAvailable, shareArchived, shareAcknowledged, shareAcknowledged, shareAvailable, shareAvailable},
		recordStates(again))
}

func recordStates(sp *sharePartition) []shareRecordState {
	out := make([]shareRecordState, len(sp.recs))
	for i, r := range sp.recs {
		out[i] = r.state
	}
	return out
}

func TestParseShareAcks(t *testing.T) {
	plain := plainAckTypes(false)
	_, err := parseShareAcks([]shareAckBatch{{first: 3, last: 1, types: []int8{1}}}, plain)
	require.Error(t, err)
	_, err = parseShareAcks([]shareAckBatch{{first: 0, last: 3, types: []int8{1, 2}}}, plain)
	require.Error(t, err, "types must be one or one per offset")
	_, err = parseShareAcks([]shareAckBatch{{first: 0, last: 3, types: []int8{1}}, {first: 3, last: 4, types: []int8{1}}}, plain)
	require.Error(t, err, "overlapping batches")
	_, err = parseShareAcks([]shareAckBatch{{first: 0, last: 0, types: []int8{4}}}, plain)
	require.Error(t, err, "RENEW needs IsRenewAck")
	_, err = parseShareAcks([]shareAckBatch{{first: 0, last: 0, types: []int8{4}}}, plainAckTypes(true))
	require.NoError(t, err)
	_, err = parseShareAcks([]shareAckBatch{{first: 0, last: 0, types: []int8{0}}}, wire.AckType.Transactional)
	require.NoError(t, err, "GAP can be staged (KIP-1289's draft)")
	_, err = parseShareAcks([]shareAckBatch{{first: 0, last: 0, types: []int8{2}}}, wire.AckType.Transactional)
	require.Error(t, err, "RELEASE cannot be staged")
	acks, err := parseShareAcks([]shareAckBatch{{first: 5, last: 6, types: []int8{1, 3}}, {first: 0, last: 1, types: []int8{2}}}, plain)
	require.NoError(t, err)
	require.Equal(t, int64(0), acks[0].first, "sorted")
	require.Equal(t, wire.AckReject, acks[1].typeAt(6))
}

// TestShareResolveTouchesOnlyItsProducer: a marker resolves its producer's
// TX_PENDING records, wherever they sit in the window, and no other
// producer's; a reloaded share-partition knows where each producer's
// pending records are too.
func TestShareResolveTouchesOnlyItsProducer(t *testing.T) {
	now := time.Now()
	sp := shareTestPartition(shareTestLog(12))
	require.Len(t, acquiredOffsets(sp, "m", 12, now), 12)
	sp.stage([]shareAck{{first: 6, last: 9, types: []wire.AckType{wire.AckAccept}}}, 2, 0)
	sp.stage([]shareAck{{first: 0, last: 2, types: []wire.AckType{wire.AckAccept}}}, 1, 0)
	sp.stage([]shareAck{{first: 10, last: 11, types: []wire.AckType{wire.AckReject}}}, 1, 0)
	require.Equal(t, 0, sp.resolve(3, true, 3), "a producer with nothing staged here")
	require.Equal(t, 5, sp.resolve(1, true, 3), "0-2 and 10-11, not 6-9")
	require.Equal(t, 0, sp.resolve(1, true, 3), "resolved once")
	for off, want := range map[int64]shareRecordState{3: shareAcquired, 6: shareTxPending, 9: shareTxPending, 10: shareArchived, 11: shareArchived} {
		require.Equal(t, want, sp.recs[off-sp.start].state, "offset %d", off)
	}
	require.Equal(t, int64(3), sp.start, "0-2 are done")

	// Reloaded from what was persisted: producer 2's records are pending.
	pending := map[int64][]sharePending{2: {{key: sp.key, epoch: 0, batches: []shareStagedBatch{{First: 6, Last: 9, Ack: wire.AckAccept, Deliveries: 1}}}}}
	re := newLiveSharePartition(sp.key, sp.p, &sharePersisted{stateEpoch: 1, start: 3}, pending, 3)
	accept69 := []shareAck{{first: 6, last: 9, types: []wire.AckType{wire.AckAccept}}}
	require.True(t, re.stagedBy(accept69, 2, 0), "the reloaded staging keeps its epoch: a lost answer's retry is recognised")
	require.False(t, re.stagedBy(accept69, 2, 1), "another epoch's is not")
	require.Equal(t, 4, re.resolve(2, false, 3), "an abort releases 6-9")
	require.Equal(t, shareAvailable, re.recs[6-re.start].state)
}
