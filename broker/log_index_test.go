package broker

import (
	"math"
	"math/bits"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMaxTreeMatchesScan checks the timestamp index against a plain scan
// over random timestamps, while positions are appended and dropped at the
// head as a log's batches are.
func TestMaxTreeMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var tree maxTree
	var vals []int64 // vals[i] is position base+i
	base, first := int64(0), int64(0)
	for step := 0; step < 20000; step++ {
		switch op := rng.Intn(10); {
		case op < 6:
			if int64(len(vals)) == first-base {
				tree.dropBefore(first) // an empty log starts over where it ends
			}
			v := rng.Int63n(1000)
			tree.push(v)
			vals = append(vals, v)
		case op < 7 && first < base+int64(len(vals)):
			first += rng.Int63n(base + int64(len(vals)) - first + 1)
			tree.dropBefore(first)
		default:
			target := rng.Int63n(1100)
			want := int64(-1)
			for i := first - base; i < int64(len(vals)); i++ {
				if vals[i] >= target {
					want = base + i
					break
				}
			}
			require.Equal(t, want, tree.firstAtLeast(first, target), "step %d: first >= %d from %d", step, target, first)
			wantMax := int64(math.MinInt64)
			for i := first - base; i < int64(len(vals)); i++ {
				wantMax = max(wantMax, vals[i])
			}
			require.Equal(t, wantMax, tree.maxFrom(first), "step %d", step)
		}
	}
}

// TestMaxTreeLookupIsLogarithmic bounds the nodes one lookup visits, with
// timestamps that fall as offsets grow (the worst case for a scan).
func TestMaxTreeLookupIsLogarithmic(t *testing.T) {
	const n = 1 << 17
	var tree maxTree
	for i := 0; i < n; i++ {
		tree.push(int64(n - i))
	}
	bound := 4*bits.Len(uint(n)) + 4
	for _, target := range []int64{1, n / 2, n, n + 1} {
		tree.firstAtLeast(0, target)
		require.LessOrEqual(t, tree.visits, bound, "target %d", target)
		tree.firstAtLeast(n/3, target)
		require.LessOrEqual(t, tree.visits, bound, "target %d from n/3", target)
	}
	tree.maxFrom(n / 3)
	require.LessOrEqual(t, tree.visits, bound)
	// A scan would have visited up to n batches; show the bound can fail.
	require.Less(t, bound, n/1000)
}
