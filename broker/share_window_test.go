package broker

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/wire"
)

// TestEncodeShareStateValueIsJSON checks the hand-written encoder against
// encoding/json on random values of every kind.
func TestEncodeShareStateValueIsJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		v := &shareStateValue{
			Kind:        []string{shareKindSnapshot, shareKindUpdate, shareKindStaged}[i%3],
			StateEpoch:  r.Int32N(5) - 1,
			StartOffset: []int64{0, r.Int64(), -r.Int64N(10)}[r.IntN(3)],
		}
		for range r.IntN(4) {
			v.Batches = append(v.Batches, shareStateBatch{First: r.Int64(), Last: r.Int64(), State: int8(r.IntN(256) - 128), Deliveries: int16(r.IntN(1<<16) - 1<<15)})
		}
		for range r.IntN(4) {
			v.Staged = append(v.Staged, shareStagedBatch{First: r.Int64N(100), Last: r.Int64N(100), Ack: wire.AckType(r.IntN(256) - 128), Deliveries: int16(r.IntN(10))})
		}
		want, err := json.Marshal(v)
		require.NoError(t, err)
		require.Equal(t, string(want), string(encodeShareStateValue(v)))
		back, err := decodeShareStateValue(encodeShareStateValue(v))
		require.NoError(t, err)
		require.Equal(t, v, back)
	}
	require.Nil(t, encodeShareStateValue(nil), "a tombstone")
}

func TestEncodeShareStateKeyIsJSON(t *testing.T) {
	for _, group := range []string{"g", "", "a group with spaces", `quote"and\\slash`, "<html>&", "ünïcode", "tab\there", "x:y"} {
		k := shareKey{group: group, topicID: [16]byte{1, 2, 0xff}, partition: 7}
		want, err := json.Marshal(shareStateRecordKey{Group: group, TopicID: uuidString(k.topicID), Partition: 7})
		require.NoError(t, err)
		require.Equal(t, string(want), string(encodeShareStateKey(k)))
		back, err := decodeShareStateKey(encodeShareStateKey(k))
		require.NoError(t, err)
		require.Equal(t, k, back)
	}
}

func TestEncodeTxnMetaIsJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	names := []string{"a", "b", "topic.x", "__share_group_state", "with<html>", `q"uote`, "ü"}
	for i := range 1000 {
		m := &txnMeta{
			id: "t", producerID: r.Int64(), prevProducerID: r.Int64N(3) - 1, nextProducerID: r.Int64N(3) - 1,
			epoch: int16(r.IntN(1 << 15)), lastEpoch: int16(r.IntN(3) - 1), timeoutMs: r.Int32(),
			state: txnState(r.IntN(len(txnStateNames) + 1)), tv: int8(r.IntN(3)),
			startMs: r.Int64(), updateMs: r.Int64(),
		}
		if i%4 != 0 {
			m.partitions = map[txnPartition]struct{}{}
			for range r.IntN(6) {
				m.partitions[txnPartition{topic: names[r.IntN(len(names))], partition: r.Int32N(8)}] = struct{}{}
			}
		}
		want, err := encodeTxnMetaJSON(m)
		require.NoError(t, err)
		got, err := encodeTxnMeta(m)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}

// TestWindowReusesItsArray checks that a window in steady use (records
// join at the end and leave at the head) allocates nothing once its array
// is large enough, and keeps its contents right through the moves.
func TestWindowReusesItsArray(t *testing.T) {
	var w, buf []int
	next, head := 0, 0
	push := func(n int) {
		for range n {
			w, buf = appendWindow(w, buf, next)
			next++
		}
	}
	wrong := 0
	pop := func(n int) {
		for i := range n {
			if w[i] != head+i {
				wrong++
			}
		}
		w = dropWindow(w, buf, n)
		head += n
	}
	push(300)
	pop(250)
	push(500) // the window reaches the array's end and moves
	pop(550)
	require.Empty(t, w)
	allocs := testing.AllocsPerRun(100, func() {
		push(100)
		pop(60)
		push(100)
		pop(140)
	})
	require.Zero(t, allocs, "a window in steady use allocates nothing")
	push(5000) // grows: at most twice its length
	require.LessOrEqual(t, cap(buf), 2*5000)
	pop(5000)
	require.Zero(t, wrong, "every element left the window in order")
}

func TestSharePersistedWindow(t *testing.T) {
	ps := &sharePersisted{stateEpoch: 1, start: 10}
	require.NoError(t, ps.set(12, 13, persistedRecord{state: persistAcknowledged, deliveries: 1}))
	require.NoError(t, ps.set(15, 15, persistedRecord{state: persistAvailable}))
	require.Equal(t, int64(15), ps.last())
	require.Equal(t, []shareStateBatch{{First: 12, Last: 13, State: persistAcknowledged, Deliveries: 1}, {First: 15, Last: 15}},
		ps.batches(), "unnamed offsets are left out, the last one is kept")
	require.NoError(t, ps.set(5, 11, persistedRecord{state: persistArchived}), "offsets before the start are ignored")
	ps.advance()
	require.Equal(t, int64(14), ps.start, "10-13 are done")
	require.Equal(t, persistedRecord{}, ps.at(14))
	require.Equal(t, persistedRecord{}, ps.at(100), "past the window: AVAILABLE, no deliveries")
	ps.moveStart(20)
	require.Equal(t, int64(20), ps.start)
	require.Equal(t, int64(19), ps.last(), "nothing persisted past the start")

	err := ps.set(20, 20+maxPersistedSpan, persistedRecord{state: persistArchived})
	require.ErrorContains(t, err, "past the start offset")
	st := newShareStateShard()
	k := shareKey{group: "g"}
	require.NoError(t, st.apply(k, &shareStateValue{Kind: shareKindSnapshot, StateEpoch: 1}, -1, -1))
	require.Error(t, st.apply(k, &shareStateValue{Kind: shareKindUpdate, StateEpoch: 1,
		Batches: []shareStateBatch{{First: 0, Last: maxPersistedSpan}}}, -1, -1), "a damaged update is refused, not allocated")
	require.Error(t, st.apply(k, &shareStateValue{Kind: shareKindSnapshot, StateEpoch: 2,
		Batches: []shareStateBatch{{First: 0, Last: maxPersistedSpan}}}, -1, -1), "a damaged snapshot too")
}
