package txn

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/wire"
)

// expand is the offset -> type map a list of batches says.
func expand(t *testing.T, batches []wire.TxnShareAcknowledgeBatch) map[int64]wire.AckType {
	out := map[int64]wire.AckType{}
	for i, b := range batches {
		require.LessOrEqual(t, b.FirstOffset, b.LastOffset)
		n := b.LastOffset - b.FirstOffset + 1
		require.True(t, len(b.AcknowledgeTypes) == 1 || int64(len(b.AcknowledgeTypes)) == n, "batch %d: %d types for %d offsets", i, len(b.AcknowledgeTypes), n)
		if i > 0 {
			require.Greater(t, b.FirstOffset, batches[i-1].LastOffset, "batches in order, not overlapping")
		}
		for o := b.FirstOffset; o <= b.LastOffset; o++ {
			typ := b.AcknowledgeTypes[0]
			if len(b.AcknowledgeTypes) > 1 {
				typ = b.AcknowledgeTypes[o-b.FirstOffset]
			}
			out[o] = typ
		}
	}
	return out
}

// TestCoalesce checks both of coalesce's paths (ascending offsets, and any
// order with repeats) against its definition: per offset the last type
// given, RELEASE left out, and the batches in the shape upstream's share
// consumer gives them.
func TestCoalesce(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 3000 {
		var recs []acktrack.Record
		o := r.Int64N(100)
		for range r.IntN(60) {
			if i%2 == 0 {
				o += 1 + r.Int64N(2) // ascending, with gaps
			} else {
				o = r.Int64N(30) // any order, repeats
			}
			typ := int8(1 + r.IntN(3))
			if i%3 == 0 {
				typ = 1 + 2*int8(r.IntN(2)) // long runs of ACCEPT and REJECT
			}
			recs = append(recs, acktrack.Record{Offset: o, Type: typ})
		}
		want := map[int64]wire.AckType{}
		for _, rec := range recs {
			want[rec.Offset] = wire.AckType(rec.Type)
		}
		for o, typ := range want {
			if typ == wire.AckRelease {
				delete(want, o)
			}
		}
		got := coalesce(recs)
		require.Equal(t, want, expand(t, got), "records %v", recs)
		for j, b := range got {
			if j > 0 && got[j-1].LastOffset+1 == b.FirstOffset {
				// Adjacent batches come only from splitting a long run of one type off a mixed range.
				long := func(b wire.TxnShareAcknowledgeBatch) bool {
					return len(b.AcknowledgeTypes) == 1 && b.LastOffset-b.FirstOffset+1 >= minSameTypeRun
				}
				require.True(t, long(b) || long(got[j-1]), "batches %d and %d adjacent: %v", j-1, j, got)
			}
			if len(b.AcknowledgeTypes) > 1 {
				require.True(t, slices.ContainsFunc(b.AcknowledgeTypes[1:], func(x wire.AckType) bool { return x != b.AcknowledgeTypes[0] }), "a per-offset batch of one type: %v", b)
			}
		}
	}
	require.Nil(t, coalesce(nil))
}

// The shapes of the draft's AcknowledgeTypes: a range of one type is one
// batch with one type, a mixed range carries a type per offset, a long run
// of one type inside a mixed range is a batch of its own, and a RELEASE
// splits ranges (it is not sent).
func TestCoalesceShapes(t *testing.T) {
	A, R, G := wire.AckAccept, wire.AckReject, wire.AckGap
	recs := func(first int64, types ...wire.AckType) []acktrack.Record {
		var out []acktrack.Record
		for i, t := range types {
			out = append(out, acktrack.Record{Offset: first + int64(i), Type: int8(t)})
		}
		return out
	}
	b := func(first, last int64, types ...wire.AckType) wire.TxnShareAcknowledgeBatch {
		return wire.TxnShareAcknowledgeBatch{FirstOffset: first, LastOffset: last, AcknowledgeTypes: types}
	}
	require.Equal(t, []wire.TxnShareAcknowledgeBatch{b(5, 8, A)}, coalesce(recs(5, A, A, A, A)))
	require.Equal(t, []wire.TxnShareAcknowledgeBatch{b(5, 7, A, R, G)}, coalesce(recs(5, A, R, G)))
	require.Equal(t, []wire.TxnShareAcknowledgeBatch{b(0, 0, A), b(2, 3, R)}, coalesce(recs(0, A, wire.AckRelease, R, R)))
	long := recs(0, R, A, A, A, A, A, A, A, A, A, A, R)
	require.Equal(t, []wire.TxnShareAcknowledgeBatch{b(0, 0, R), b(1, 10, A), b(11, 11, R)}, coalesce(long))
	require.Equal(t, []wire.TxnShareAcknowledgeBatch{b(0, 0, A), b(2, 2, R)}, coalesce(append(recs(0, A), recs(2, R)...)))
}
