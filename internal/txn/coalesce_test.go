package txn

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/wire"
)

// coalesceByOffset is coalesce's definition, written plainly: per offset
// the last type given, offsets sorted, consecutive offsets of one type
// merged.
func coalesceByOffset(recs []acktrack.Record) []wire.AcknowledgementBatch {
	last := map[int64]wire.AckType{}
	for _, r := range recs {
		last[r.Offset] = wire.AckType(r.Type)
	}
	var offsets []int64
	for o := range last {
		offsets = append(offsets, o)
	}
	slices.Sort(offsets)
	var out []wire.AcknowledgementBatch
	for _, o := range offsets {
		if n := len(out); n > 0 && out[n-1].LastOffset == o-1 && out[n-1].AcknowledgeType == last[o] {
			out[n-1].LastOffset = o
			continue
		}
		out = append(out, wire.AcknowledgementBatch{FirstOffset: o, LastOffset: o, AcknowledgeType: last[o]})
	}
	return out
}

// TestCoalesce checks both of coalesce's paths (ascending offsets, and
// any order with repeats) against its definition.
func TestCoalesce(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 3000 {
		var recs []acktrack.Record
		o := r.Int64N(100)
		for range r.IntN(40) {
			if i%2 == 0 {
				o += 1 + r.Int64N(2) // ascending, with gaps
			} else {
				o = r.Int64N(30) // any order, repeats
			}
			recs = append(recs, acktrack.Record{Offset: o, Type: int8(1 + r.IntN(3))})
		}
		require.Equal(t, coalesceByOffset(recs), coalesce(recs), "records %v", recs)
	}
	require.Nil(t, coalesce(nil))
}
