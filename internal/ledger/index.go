package ledger

import (
	"sort"
)

// entry is one claimed range in the index and the ledger offset of the
// claim that made it (what truncating the ledger must keep).
type entry struct {
	Range
	at int64
}

// Index holds the committed claims of one ledger partition, per input
// partition, as sorted, non-overlapping offset ranges. When two committed
// claims cover the same offset (which the protocol rules out, unless an
// assumption of docs/design.md failed), the first one read wins and the
// overlap is counted in Conflicts. The zero value is empty; it is not
// safe for concurrent use (the Resolver guards it).
type Index struct {
	inputs map[Input][]entry
	// Conflicts counts offsets claimed by a second committed claim.
	Conflicts int64
	// ranges counts the entries held, for the memory bound's metric.
	ranges int
}

// Add records c, read at ledger offset at.
func (x *Index) Add(c Claim, at int64) {
	if x.inputs == nil {
		x.inputs = make(map[Input][]entry)
	}
	in := c.Input()
	es := x.inputs[in]
	for _, r := range c.Ranges {
		es = x.insert(es, entry{r, at})
	}
	x.inputs[in] = es
}

// insert adds e to the sorted es, clipped to the offsets no entry covers
// yet.
func (x *Index) insert(es []entry, e entry) []entry {
	// The entries that may overlap e: from the first whose Last reaches
	// e.First to the last whose First is at most e.Last.
	lo := sort.Search(len(es), func(i int) bool { return es[i].Last >= e.First })
	hi := lo
	for hi < len(es) && es[hi].First <= e.Last {
		hi++
	}
	var gaps []entry
	next := e.First
	for _, o := range es[lo:hi] {
		if o.First > next {
			g := e
			g.First, g.Last = next, o.First-1
			gaps = append(gaps, g)
		}
		covStart, covEnd := max(o.First, e.First), min(o.Last, e.Last)
		x.Conflicts += covEnd - covStart + 1
		next = o.Last + 1
	}
	if next <= e.Last {
		g := e
		g.First = next
		gaps = append(gaps, g)
	}
	if len(gaps) == 0 {
		return es
	}
	x.ranges += len(gaps)
	// Splice the gaps in among es[lo:hi], keeping the order.
	merged := make([]entry, 0, hi-lo+len(gaps))
	i, j := lo, 0
	for i < hi || j < len(gaps) {
		if j == len(gaps) || (i < hi && es[i].First < gaps[j].First) {
			merged = append(merged, es[i])
			i++
			continue
		}
		merged = append(merged, gaps[j])
		j++
	}
	out := make([]entry, 0, len(es)+len(gaps))
	out = append(out, es[:lo]...)
	out = append(out, merged...)
	return append(out, es[hi:]...)
}

// Lookup returns the type of the committed claim that covers offset off
// of in, if one does.
func (x *Index) Lookup(in Input, off int64) (int8, bool) {
	return lookupEntries(x.inputs[in], off)
}

// lookupEntries returns the type of the entry of the sorted es that
// covers off, if one does.
func lookupEntries(es []entry, off int64) (int8, bool) {
	i := sort.Search(len(es), func(i int) bool { return es[i].Last >= off })
	if i < len(es) && es[i].First <= off {
		return es[i].Type, true
	}
	return 0, false
}

// Prune forgets the claims of in below start, the share-partition start
// offset: the group never delivers those records again, so no lookup can
// ask for them.
func (x *Index) Prune(in Input, start int64) {
	es := x.inputs[in]
	i := sort.Search(len(es), func(i int) bool { return es[i].Last >= start })
	if i == 0 && (len(es) == 0 || es[0].First >= start) {
		return
	}
	x.ranges -= i
	es = es[i:]
	if len(es) > 0 && es[0].First < start {
		es[0].First = start
	}
	if len(es) == 0 {
		delete(x.inputs, in)
		return
	}
	x.inputs[in] = slices0(es)
}

// slices0 copies es into a slice of its own, so that pruned entries do not
// stay reachable through the old backing array.
func slices0(es []entry) []entry { return append([]entry(nil), es...) }

// Ranges returns how many ranges the index holds.
func (x *Index) Ranges() int { return x.ranges }

// Inputs returns the input partitions the index holds claims of.
func (x *Index) Inputs() []Input {
	out := make([]Input, 0, len(x.inputs))
	for in := range x.inputs {
		out = append(out, in)
	}
	return out
}

// LowestNeeded returns the lowest ledger offset whose claim still covers
// an offset the index holds, and false when it holds none: the ledger
// partition can be truncated below it (DeleteRecords) once every input
// partition's claims were pruned to its start offset.
func (x *Index) LowestNeeded() (int64, bool) {
	var low int64
	found := false
	for _, es := range x.inputs {
		for _, e := range es {
			if !found || e.at < low {
				low, found = e.at, true
			}
		}
	}
	return low, found
}
