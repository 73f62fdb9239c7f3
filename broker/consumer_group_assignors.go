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
// Cost per assignment, for P partitions and M members: uniform keeps or
// fills every partition (O(P x M) when none was assigned, O(P) when the
// previous target holds them) and then moves one partition per pass,
// each pass O(M log M + P/M); range is O(P + M log M).
// BenchmarkConsumerAssignors measures both: a member joining a group of
// 50 members and 1000 partitions takes about 0.8 ms with uniform and
// 0.2 ms with range (2 shared cores).

import (
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
	if len(members) == 0 {
		return map[string]cgPartitions{}
	}
	held := make([]cgPartitions, len(members))
	owner := make(map[cgTP]int) // partition -> index in members
	for i, m := range members {
		held[i] = make(cgPartitions)
		for tp := range m.current {
			n, exists := topics[tp.topicID]
			if !exists || !m.topics[tp.topicID] || tp.partition >= n {
				continue
			}
			if _, taken := owner[tp]; taken {
				continue
			}
			owner[tp] = i
			held[i][tp] = 0
		}
	}
	eligible := func(i int, tp cgTP) bool { return members[i].topics[tp.topicID] }
	// Unowned partitions go, in order, to the eligible member with the
	// fewest partitions (earliest member id on ties).
	for _, id := range sortedTopicIDs(topics) {
		for p := int32(0); p < topics[id]; p++ {
			tp := cgTP{id, p}
			if _, taken := owner[tp]; taken {
				continue
			}
			best := -1
			for i := range members {
				if eligible(i, tp) && (best < 0 || len(held[i]) < len(held[best])) {
					best = i
				}
			}
			if best >= 0 {
				owner[tp] = best
				held[best][tp] = 0
			}
		}
	}
	// Then partitions move from the fullest members to eligible members
	// holding at least two fewer, one at a time, until no such move is
	// left. Every move lowers the sum of squared counts, so this ends; a
	// member at most one above the least-loaded member cannot give
	// anything, which keeps the last pass short.
	order := make([]int, len(members))
	for i := range order {
		order[i] = i
	}
	for moved := true; moved; {
		moved = false
		sort.SliceStable(order, func(a, b int) bool { return len(held[order[a]]) > len(held[order[b]]) })
		least := len(held[order[len(order)-1]])
		for _, from := range order {
			if len(held[from]) <= least+1 {
				break
			}
			parts := held[from].sorted()
			for k := len(parts) - 1; k >= 0 && !moved; k-- {
				for to := range members {
					if to != from && eligible(to, parts[k]) && len(held[to])+1 < len(held[from]) {
						delete(held[from], parts[k])
						held[to][parts[k]] = 0
						moved = true
						break
					}
				}
			}
			if moved {
				break
			}
		}
	}
	out := make(map[string]cgPartitions, len(members))
	for i, m := range members {
		out[m.id] = held[i]
	}
	return out
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
