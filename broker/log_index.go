package broker

// The timestamp index of a partition's log: which batch is the first, in
// offset order, whose max timestamp reaches a given time (ListOffsets by
// timestamp), and which has the largest (ListOffsets -3). Timestamps are
// the producers' and need not grow with offsets, so a plain binary search
// does not work; a max segment tree over the batches in append order does,
// in O(log n) per lookup and per append. Batches leave the log only at its
// head (retention, DeleteRecords, compaction), so positions are counted
// from the first batch ever appended and the tree is rebuilt, in O(n), only
// when the dead head or the growth doubles it: O(1) amortized per batch.

import "math"

// maxTree is a max segment tree over int64 values at positions
// base, base+1, ... .
type maxTree struct {
	base   int64   // the position of leaf 0
	n      int     // leaves in use
	size   int     // leaves allocated: a power of two, or 0
	nodes  []int64 // 1-based heap layout; leaves at size..2*size-1
	visits int     // nodes the last lookup visited, for tests of its cost
}

const noTimestamp = math.MinInt64

// push appends the value of the next position.
func (t *maxTree) push(v int64) {
	if t.n == t.size {
		t.rebuild(t.base, t.values(t.base), 1)
	}
	i := t.size + t.n
	t.n++
	t.nodes[i] = v
	for i /= 2; i >= 1; i /= 2 {
		t.nodes[i] = max(t.nodes[2*i], t.nodes[2*i+1])
	}
}

// dropBefore forgets the positions before from; the tree is rebuilt once
// at least half of it is dead.
func (t *maxTree) dropBefore(from int64) {
	if dead := int(from - t.base); dead > 0 && dead*2 >= t.n {
		t.rebuild(from, t.values(from), 0)
	}
}

// values returns the values of the positions from `from` on.
func (t *maxTree) values(from int64) []int64 {
	start := int(max(from-t.base, 0))
	if start >= t.n {
		return nil
	}
	return t.nodes[t.size+start : t.size+t.n]
}

// rebuild lays out vals at base with room for extra more positions.
func (t *maxTree) rebuild(base int64, vals []int64, extra int) {
	size := 1
	for size < len(vals)+extra {
		size *= 2
	}
	nodes := make([]int64, 2*size)
	for i := range nodes {
		nodes[i] = noTimestamp
	}
	copy(nodes[size:], vals)
	for i := size - 1; i >= 1; i-- {
		nodes[i] = max(nodes[2*i], nodes[2*i+1])
	}
	t.base, t.n, t.size, t.nodes = base, len(vals), size, nodes
}

// firstAtLeast returns the first position >= from whose value is >= v, or
// -1 if there is none.
func (t *maxTree) firstAtLeast(from int64, v int64) int64 {
	t.visits = 0
	if t.size == 0 {
		return -1
	}
	i := t.first(1, 0, t.size, int(max(from-t.base, 0)), v)
	if i < 0 || i >= t.n {
		return -1
	}
	return t.base + int64(i)
}

// first searches node (covering leaves [lo, hi)) for the first leaf at or
// after from holding at least v. It descends into a subtree only when its
// max reaches v, and a subtree entirely after from whose max reaches v
// always holds the answer, so a search visits O(log n) nodes.
func (t *maxTree) first(node, lo, hi, from int, v int64) int {
	t.visits++
	if hi <= from || t.nodes[node] < v {
		return -1
	}
	if hi-lo == 1 {
		return lo
	}
	mid := (lo + hi) / 2
	if i := t.first(2*node, lo, mid, from, v); i >= 0 {
		return i
	}
	return t.first(2*node+1, mid, hi, from, v)
}

// maxFrom returns the largest value at positions >= from (noTimestamp if
// there is none), in O(log n).
func (t *maxTree) maxFrom(from int64) int64 {
	t.visits = 0
	if t.size == 0 {
		return noTimestamp
	}
	out := int64(noTimestamp)
	lo := t.size + int(max(from-t.base, 0))
	hi := 2 * t.size // exclusive
	for lo < hi {
		t.visits++
		if lo&1 == 1 {
			out = max(out, t.nodes[lo])
			lo++
		}
		if hi&1 == 1 {
			hi--
			out = max(out, t.nodes[hi])
		}
		lo, hi = lo/2, hi/2
	}
	return out
}
