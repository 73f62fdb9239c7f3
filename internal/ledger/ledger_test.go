package ledger

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

var testID = [16]byte{1, 2, 3}

// A claim survives its encoding, and lands on one partition per input.
func TestClaimRoundTrip(t *testing.T) {
	c := Claim{Group: "g", Topic: "in", TopicID: testID, Partition: 3, TransactionalID: "w1",
		Ranges: []Range{{0, 4, TypeAccept}, {5, 5, TypeReject}, {9, 12, TypeAccept}}}
	v, err := c.Encode()
	require.NoError(t, err)
	got, err := Decode(v)
	require.NoError(t, err)
	require.Equal(t, c, got)
	in := c.Input()
	require.Equal(t, in.LedgerPartition(16), in.LedgerPartition(16))
	require.GreaterOrEqual(t, in.LedgerPartition(16), int32(0))
	require.Less(t, in.LedgerPartition(16), int32(16))
}

// Foreign and corrupt records are refused with ErrMalformed, never a panic.
func TestDecodeRefusesMalformed(t *testing.T) {
	for name, v := range map[string]string{
		"not json":       "hello",
		"empty":          "",
		"other version":  `{"v":2,"group":"g","topic_id":"01020300000000000000000000000000","partition":0,"ranges":[[0,0,1]]}`,
		"bad topic id":   `{"v":1,"group":"g","topic_id":"zz","partition":0,"ranges":[[0,0,1]]}`,
		"no group":       `{"v":1,"topic_id":"01020300000000000000000000000000","partition":0,"ranges":[[0,0,1]]}`,
		"no ranges":      `{"v":1,"group":"g","topic_id":"01020300000000000000000000000000","partition":0}`,
		"release":        `{"v":1,"group":"g","topic_id":"01020300000000000000000000000000","partition":0,"ranges":[[0,0,2]]}`,
		"type overflow":  `{"v":1,"group":"g","topic_id":"01020300000000000000000000000000","partition":0,"ranges":[[0,0,300]]}`,
		"reversed range": `{"v":1,"group":"g","topic_id":"01020300000000000000000000000000","partition":0,"ranges":[[5,1,1]]}`,
		"overlap":        `{"v":1,"group":"g","topic_id":"01020300000000000000000000000000","partition":0,"ranges":[[0,5,1],[3,6,1]]}`,
		"wrong shape":    `{"v":1,"group":"g","topic_id":"01020300000000000000000000000000","partition":0,"ranges":"x"}`,
	} {
		_, err := Decode([]byte(v))
		require.True(t, errors.Is(err, ErrMalformed), "%s: %v", name, err)
	}
}

// RangesOf keeps the last type of an offset, merges runs and leaves
// releases out.
func TestRangesOf(t *testing.T) {
	got := RangesOf([]int64{3, 1, 2, 2, 7, 8, 9}, []int8{1, 1, 3, 1, 2, 3, 3})
	require.Equal(t, []Range{{1, 3, TypeAccept}, {8, 9, TypeReject}}, got)
	// Ascending offsets (what a consumer's acknowledgements usually are)
	// take a path of their own: the same ranges.
	got = RangesOf([]int64{1, 2, 3, 5, 7, 8, 9, 10}, []int8{1, 1, 1, 1, 2, 3, 3, 1})
	require.Equal(t, []Range{{1, 3, TypeAccept}, {5, 5, TypeAccept}, {8, 9, TypeReject}, {10, 10, TypeAccept}}, got)
	require.Empty(t, RangesOf([]int64{4, 5}, []int8{2, 2}), "releases are not claimed")
	// A repeated offset, even next to itself (ShareAcks.Merge of an
	// override), takes its last type and one range.
	require.Equal(t, []Range{{1, 2, TypeAccept}}, RangesOf([]int64{1, 2, 2}, []int8{1, 1, 1}))
	require.Equal(t, []Range{{1, 1, TypeAccept}}, RangesOf([]int64{1, 2, 2}, []int8{1, 1, 2}), "a RELEASE last leaves the offset unclaimed")
	require.Equal(t, []Range{{1, 1, TypeAccept}, {2, 2, TypeReject}}, RangesOf([]int64{1, 2, 2}, []int8{1, 1, 3}))
}

// The index answers per offset, keeps the first claim on overlaps, and
// prunes below a start offset.
func TestIndex(t *testing.T) {
	var x Index
	in := Input{"g", testID, 0}
	other := Input{"g", testID, 1}
	x.Add(Claim{Group: "g", TopicID: testID, Partition: 0, Ranges: []Range{{10, 19, TypeAccept}}}, 100)
	x.Add(Claim{Group: "g", TopicID: testID, Partition: 0, Ranges: []Range{{0, 4, TypeReject}}}, 101)
	x.Add(Claim{Group: "g", TopicID: testID, Partition: 0, Ranges: []Range{{3, 12, TypeAccept}}}, 102)
	require.Equal(t, int64(2+3), x.Conflicts, "3,4 and 10..12 were claimed already")
	for off, want := range map[int64]int8{0: TypeReject, 4: TypeReject, 5: TypeAccept, 9: TypeAccept, 10: TypeAccept, 19: TypeAccept} {
		typ, ok := x.Lookup(in, off)
		require.True(t, ok, "offset %d", off)
		require.Equal(t, want, typ, "offset %d", off)
	}
	_, ok := x.Lookup(in, 20)
	require.False(t, ok)
	_, ok = x.Lookup(other, 10)
	require.False(t, ok)
	low, ok := x.LowestNeeded()
	require.True(t, ok)
	require.Equal(t, int64(100), low)

	x.Prune(in, 11)
	_, ok = x.Lookup(in, 10)
	require.False(t, ok)
	typ, ok := x.Lookup(in, 11)
	require.True(t, ok)
	require.Equal(t, TypeAccept, typ)
	require.Equal(t, 1, x.Ranges())
	x.Prune(in, 20)
	require.Zero(t, x.Ranges())
	_, ok = x.LowestNeeded()
	require.False(t, ok)
}
