package broker

// The server-side assignors of consumer groups (KIP-848), by the names
// Kafka gives them: "uniform" (the default) and "range". A member picks one
// with ServerAssignor; a group uses the one most of its members ask for.
//
// uniform balances the number of partitions per member: every member gets
// as many as any other member subscribed to the same partitions, give or
// take one. It is sticky: a partition stays with the member whose target
// holds it unless balance requires a move, so a member joining or leaving
// moves only the partitions it must. Kafka's uniform assignor has the same
// properties; which partitions move when several could is not Kafka's
// exact choice.
//
// range co-partitions: members, static members first by instance id and
// then the others by member id, take consecutive ranges of each topic they
// subscribe to, the first ones one partition more when the count does not
// divide evenly; so members subscribed to topics with equal partition
// counts get the same partition numbers of each. It is not sticky, as
// Kafka's is not.
//
// Cost per assignment, for P partitions, M members and C classes of
// members with the same subscription (C = 1 when all subscribe alike):
// uniform is O(P log P + (P + M) (C + log M)) per pass of its balancing,
// and one pass usually does every move (a later one only when givers that
// emptied can take partitions of another topic); range is O(P + M log M).
// TestUniformAssignorWorkIsLinear bounds uniform's steps;
// BenchmarkConsumerAssignors measures both.

import (
	"container/heap"
	"sort"
)

// Server assignor names.
const (
	cgAssignorUniform = "uniform"
	cgAssignorRange   = "range"
)

// assignorMember is what an assignor knows of one member.
type assignorMember struct {
	id         string
	instanceID *string
	// topics are the ids of the existing topics it subscribes to.
	topics map[[16]byte]bool
	// current is its current target (sticky assignors keep it).
	current cgPartitions
}

// assignor computes every member's target from the members (ordered by
// member id) and the subscribed topics' partition counts.
type assignor func(members []assignorMember, topics map[[16]byte]int32) map[string]cgPartitions

var consumerAssignors = map[string]assignor{
	cgAssignorUniform: assignUniform,
	cgAssignorRange:   assignRange,
}

// sortedTopicIDs lists topic ids in byte order.
func sortedTopicIDs(topics map[[16]byte]int32) [][16]byte {
	ids := make([][16]byte, 0, len(topics))
	for id := range topics {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	return ids
}

func assignUniform(members []assignorMember, topics map[[16]byte]int32) map[string]cgPartitions {
	out, _ := uniformAssignment(members, topics)
	return out
}

// uniformAssignment is the uniform assignor; it also returns its steps
// (partitions visited, recipient probes, heap operations), the work that
// the tests bound.
func uniformAssignment(members []assignorMember, topics map[[16]byte]int32) (map[string]cgPartitions, int) {
	if len(members) == 0 {
		return map[string]cgPartitions{}, 0
	}
	u := newUniform(members, topics)
	u.keep()
	u.fill()
	u.balance()
	out := make(map[string]cgPartitions, len(members))
	for i, m := range members {
		out[m.id] = u.held[i]
	}
	return out, u.steps
}

// uniform is the state of one uniform assignment. Members subscribed to
// the same topics form a class; each class keeps its members in a heap by
// partition count, so that the least-loaded eligible member of a topic is
// the least-loaded top of the classes subscribed to it: O(log M) when all
// members subscribe alike, O(classes) at worst.
type uniform struct {
	members []assignorMember
	topics  map[[16]byte]int32
	held    []cgPartitions
	owner   map[cgTP]int
	class   []int // member -> class
	classes []*countHeap
	// byTopic lists the classes subscribed to each topic.
	byTopic map[[16]byte][]int
	steps   int
}

func newUniform(members []assignorMember, topics map[[16]byte]int32) *uniform {
	u := &uniform{
		members: members,
		topics:  topics,
		held:    make([]cgPartitions, len(members)),
		owner:   make(map[cgTP]int),
		class:   make([]int, len(members)),
		byTopic: make(map[[16]byte][]int),
	}
	classOf := make(map[string]int)
	for i, m := range members {
		u.held[i] = make(cgPartitions)
		var ids [][16]byte
		for id := range m.topics {
			if _, exists := topics[id]; exists {
				ids = append(ids, id)
			}
		}
		sort.Slice(ids, func(a, b int) bool { return string(ids[a][:]) < string(ids[b][:]) })
		var key []byte
		for _, id := range ids {
			key = append(key, id[:]...)
		}
		c, ok := classOf[string(key)]
		if !ok {
			c = len(u.classes)
			classOf[string(key)] = c
			u.classes = append(u.classes, &countHeap{held: u.held})
			for _, id := range ids {
				u.byTopic[id] = append(u.byTopic[id], c)
			}
		}
		u.class[i] = c
		u.classes[c].members = append(u.classes[c].members, i)
	}
	for _, h := range u.classes {
		h.pos = make(map[int]int, len(h.members))
		for k, i := range h.members {
			h.pos[i] = k
		}
	}
	return u
}

// keep gives every member the partitions of its current target that still
// exist, that it still subscribes to and that no earlier member kept.
func (u *uniform) keep() {
	for i, m := range u.members {
		for tp := range m.current {
			u.steps++
			n, exists := u.topics[tp.topicID]
			if !exists || !m.topics[tp.topicID] || tp.partition >= n {
				continue
			}
			if _, taken := u.owner[tp]; taken {
				continue
			}
			u.owner[tp] = i
			u.held[i][tp] = 0
		}
	}
	for _, h := range u.classes {
		heap.Init(h)
	}
}

// recipient is the eligible member of topic id with the fewest partitions
// (earliest member on ties), or -1 when no member subscribes to it.
func (u *uniform) recipient(id [16]byte) int {
	best := -1
	for _, c := range u.byTopic[id] {
		u.steps++
		top := u.classes[c].members[0]
		if best < 0 || len(u.held[top]) < len(u.held[best]) || len(u.held[top]) == len(u.held[best]) && top < best {
			best = top
		}
	}
	return best
}

// give moves tp to member to (from the member holding it, if any) and
// restores the heaps of the members whose counts changed.
func (u *uniform) give(tp cgTP, to int) {
	if from, ok := u.owner[tp]; ok {
		delete(u.held[from], tp)
		u.classes[u.class[from]].fix(from)
	}
	u.owner[tp] = to
	u.held[to][tp] = 0
	u.classes[u.class[to]].fix(to)
	u.steps += 2
}

// fill gives unowned partitions, in order, to the eligible member with the
// fewest partitions (earliest member on ties).
func (u *uniform) fill() {
	for _, id := range sortedTopicIDs(u.topics) {
		for p := int32(0); p < u.topics[id]; p++ {
			tp := cgTP{id, p}
			u.steps++
			if _, taken := u.owner[tp]; taken {
				continue
			}
			if to := u.recipient(id); to >= 0 {
				u.give(tp, to)
			} else {
				break // nobody subscribes to this topic
			}
		}
	}
}

// balance moves partitions, one at a time, from the fullest member
// (earliest on ties), highest partition first, to the least-loaded
// eligible member when that one holds at least two fewer, until no such
// move is left. Every move lowers the sum of squared counts, so this ends.
// A member with no possible move is set aside until a move empties some
// member, which may then take from it. When all members subscribe alike
// the fullest member can always give until the counts are within one, so
// each move costs O(log M) and nobody is set aside before the end.
func (u *uniform) balance() {
	givers := &countHeap{held: u.held, pos: make(map[int]int, len(u.members)), fullest: true}
	for i := range u.members {
		givers.pos[i] = len(givers.members)
		givers.members = append(givers.members, i)
	}
	heap.Init(givers)
	sorted := make([][]cgTP, len(u.members)) // each member's partitions, built when it first gives
	var stuck []int
	for givers.Len() > 0 {
		g := givers.members[0]
		u.steps++
		if sorted[g] == nil {
			sorted[g] = u.held[g].sorted()
			u.steps += len(sorted[g])
		}
		parts := sorted[g]
		moved := false
		noRecipient := make(map[[16]byte]bool)
		for k := len(parts) - 1; k >= 0 && !moved; k-- {
			tp := parts[k]
			u.steps++
			if noRecipient[tp.topicID] {
				continue
			}
			to := u.recipient(tp.topicID)
			if to < 0 || to == g || len(u.held[to])+1 >= len(u.held[g]) {
				noRecipient[tp.topicID] = true
				continue
			}
			sorted[g] = append(parts[:k], parts[k+1:]...)
			sorted[to] = nil
			u.give(tp, to)
			givers.fix(g)
			givers.fix(to)
			moved = true
		}
		if !moved {
			heap.Remove(givers, 0)
			delete(givers.pos, g)
			stuck = append(stuck, g)
			continue
		}
		for _, s := range stuck {
			givers.pos[s] = len(givers.members)
			givers.members = append(givers.members, s)
			heap.Fix(givers, givers.pos[s])
		}
		stuck = stuck[:0]
	}
}

// countHeap orders members by partition count, fewest first (fullest
// first when fullest is set), then by member index.
type countHeap struct {
	held    []cgPartitions
	members []int
	pos     map[int]int // member -> index in members
	fullest bool
}

func (h *countHeap) Len() int { return len(h.members) }
func (h *countHeap) Less(a, b int) bool {
	x, y := h.members[a], h.members[b]
	nx, ny := len(h.held[x]), len(h.held[y])
	if h.fullest {
		nx, ny = ny, nx
	}
	return nx < ny || nx == ny && x < y
}
func (h *countHeap) Swap(a, b int) {
	h.members[a], h.members[b] = h.members[b], h.members[a]
	h.pos[h.members[a]], h.pos[h.members[b]] = a, b
}

// Push and Pop serve heap.Remove only: members are added by hand.
func (h *countHeap) Push(any) { panic("countHeap: Push is not used") }
func (h *countHeap) Pop() any {
	last := h.members[len(h.members)-1]
	h.members = h.members[:len(h.members)-1]
	return last
}

// fix restores the order after member i's count changed; a member not in
// the heap (set aside) is left alone.
func (h *countHeap) fix(i int) {
	if k, ok := h.pos[i]; ok {
		heap.Fix(h, k)
	}
}

func assignRange(members []assignorMember, topics map[[16]byte]int32) map[string]cgPartitions {
	order := make([]assignorMember, len(members))
	copy(order, members)
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i].instanceID, order[j].instanceID
		switch {
		case a != nil && b != nil:
			return *a < *b
		case a != nil || b != nil:
			return a != nil
		default:
			return order[i].id < order[j].id
		}
	})
	out := make(map[string]cgPartitions, len(members))
	for _, m := range members {
		out[m.id] = make(cgPartitions)
	}
	for _, id := range sortedTopicIDs(topics) {
		var subs []string
		for _, m := range order {
			if m.topics[id] {
				subs = append(subs, m.id)
			}
		}
		if len(subs) == 0 {
			continue
		}
		n := topics[id]
		quota, extra := n/int32(len(subs)), n%int32(len(subs))
		next := int32(0)
		for i, mid := range subs {
			size := quota
			if int32(i) < extra {
				size++
			}
			for p := next; p < next+size; p++ {
				out[mid][cgTP{id, p}] = 0
			}
			next += size
		}
	}
	return out
}
