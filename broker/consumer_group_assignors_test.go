package broker

import (
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

func asgTopic(b byte) [16]byte { return [16]byte{b} }

func asgMembers(n int, topics ...[16]byte) []assignorMember {
	out := make([]assignorMember, n)
	for i := range out {
		subs := make(map[[16]byte]bool)
		for _, t := range topics {
			subs[t] = true
		}
		out[i] = assignorMember{id: fmt.Sprintf("m%02d", i), topics: subs}
	}
	return out
}

// asgCheck requires every subscribed partition assigned to exactly one
// member subscribed to its topic, and returns each member's count.
func asgCheck(t *testing.T, members []assignorMember, topics map[[16]byte]int32, out map[string]cgPartitions) map[string]int {
	t.Helper()
	seen := make(map[cgTP]string)
	counts := make(map[string]int)
	for _, m := range members {
		for tp := range out[m.id] {
			require.True(t, m.topics[tp.topicID], "%s got a partition of a topic it does not subscribe to", m.id)
			require.Less(t, tp.partition, topics[tp.topicID])
			prev, dup := seen[tp]
			require.False(t, dup, "%v assigned to %s and %s", tp, prev, m.id)
			seen[tp] = m.id
		}
		counts[m.id] = len(out[m.id])
	}
	for id, n := range topics {
		subscribed := false
		for _, m := range members {
			subscribed = subscribed || m.topics[id]
		}
		for p := int32(0); p < n && subscribed; p++ {
			_, ok := seen[cgTP{id, p}]
			require.True(t, ok, "partition %d of %v unassigned", p, id)
		}
	}
	return counts
}

func spread(counts map[string]int) int {
	lo, hi := -1, 0
	for _, n := range counts {
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	return hi - lo
}

func TestUniformAssignorBalancesAndSticks(t *testing.T) {
	t1, t2 := asgTopic(1), asgTopic(2)
	topics := map[[16]byte]int32{t1: 7, t2: 4}
	members := asgMembers(3, t1, t2)
	out := assignUniform(members, topics)
	require.LessOrEqual(t, spread(asgCheck(t, members, topics, out)), 1)

	// A fourth member joins: only the partitions it needs move.
	for i := range members {
		members[i].current = out[members[i].id]
	}
	members = append(members, asgMembers(4, t1, t2)[3])
	next := assignUniform(members, topics)
	counts := asgCheck(t, members, topics, next)
	require.LessOrEqual(t, spread(counts), 1)
	moved := 0
	for _, m := range members[:3] {
		for tp := range m.current {
			if _, kept := next[m.id][tp]; !kept {
				moved++
			}
		}
	}
	require.Equal(t, counts["m03"], moved, "exactly the new member's partitions moved")

	// A member leaves: its partitions spread, the others keep theirs.
	for i := range members {
		members[i].current = next[members[i].id]
	}
	gone := members[1]
	rest := append(append([]assignorMember{}, members[:1]...), members[2:]...)
	after := assignUniform(rest, topics)
	require.LessOrEqual(t, spread(asgCheck(t, rest, topics, after)), 1)
	for _, m := range rest {
		for tp := range m.current {
			_, kept := after[m.id][tp]
			require.True(t, kept, "%s lost %v though only %s left", m.id, tp, gone.id)
		}
	}
}

func TestUniformAssignorHeterogeneous(t *testing.T) {
	t1, t2 := asgTopic(1), asgTopic(2)
	topics := map[[16]byte]int32{t1: 6, t2: 2}
	members := []assignorMember{
		{id: "a", topics: map[[16]byte]bool{t1: true}},
		{id: "b", topics: map[[16]byte]bool{t1: true, t2: true}},
		{id: "c", topics: map[[16]byte]bool{t2: true}},
	}
	out := assignUniform(members, topics)
	counts := asgCheck(t, members, topics, out)
	require.LessOrEqual(t, spread(counts), 1, "%v", counts)
}

func TestRangeAssignorCoPartitions(t *testing.T) {
	t1, t2 := asgTopic(1), asgTopic(2)
	topics := map[[16]byte]int32{t1: 5, t2: 5}
	members := asgMembers(2, t1, t2)
	out := assignRange(members, topics)
	asgCheck(t, members, topics, out)
	for _, m := range members {
		var p1, p2 []int32
		for tp := range out[m.id] {
			if tp.topicID == t1 {
				p1 = append(p1, tp.partition)
			} else {
				p2 = append(p2, tp.partition)
			}
		}
		sort.Slice(p1, func(i, j int) bool { return p1[i] < p1[j] })
		sort.Slice(p2, func(i, j int) bool { return p2[i] < p2[j] })
		require.Equal(t, p1, p2, "%s gets the same partition numbers of both topics", m.id)
	}
	require.Len(t, out["m00"], 6, "the first member takes the extra partition of each topic")

	// Static members come first, by instance id.
	z, a := "zz", "aa"
	members[0].instanceID, members[1].instanceID = &z, &a
	out = assignRange(members, topics)
	_, has0 := out["m01"][cgTP{t1, 0}]
	require.True(t, has0, "instance aa sorts before zz")
}

// BenchmarkConsumerAssignors measures one assignment as the group grows:
// the work per heartbeat that moves the group epoch.
func BenchmarkConsumerAssignors(b *testing.B) {
	for _, size := range []struct{ members, partitions int }{{3, 12}, {10, 100}, {50, 1000}} {
		topics := map[[16]byte]int32{asgTopic(1): int32(size.partitions)}
		members := asgMembers(size.members, asgTopic(1))
		for name, fn := range consumerAssignors {
			b.Run(fmt.Sprintf("%s/members=%d/partitions=%d", name, size.members, size.partitions), func(b *testing.B) {
				// Start from a balanced assignment for one member fewer:
				// a member joined.
				prev := fn(members[:len(members)-1], topics)
				ms := make([]assignorMember, len(members))
				copy(ms, members)
				for i := range ms {
					ms[i].current = prev[ms[i].id]
				}
				b.ReportAllocs()
				for b.Loop() {
					fn(ms, topics)
				}
			})
		}
	}
}

func TestAssignorsWithoutMembers(t *testing.T) {
	for name, fn := range consumerAssignors {
		require.Empty(t, fn(nil, map[[16]byte]int32{asgTopic(1): 3}), name)
	}
}

// BenchmarkConsumerGroupHeartbeat measures a steady-state heartbeat (no
// change: the member is stable) as the group grows: the work every member
// causes every heartbeat interval.
func BenchmarkConsumerGroupHeartbeat(b *testing.B) {
	for _, members := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			c := newTestCluster(b)
			createTopic(b, c, "bench", 100)
			var ms []*cgMember
			for i := 0; i < members; i++ {
				m := newCGMember(b, c, "bench-group", fmt.Sprintf("m%03d", i))
				m.join("bench")
				ms = append(ms, m)
			}
			for settled := false; !settled; { // every member reconciles
				settled = true
				for _, m := range ms {
					before := m.epoch
					m.heartbeat()
					settled = settled && m.epoch == before
				}
			}
			m := ms[0]
			req := m.hbReq()
			b.ReportAllocs()
			for b.Loop() {
				m.do(req)
			}
		})
	}
}

// TestUniformAssignorWorkIsLinear bounds the uniform assignor's steps by a
// small multiple of P log P + P + M: a second member joining one holding
// 10,000 partitions once cost 5,000 moves each re-sorting the giver's
// partitions (~10 s on the loop, a frozen broker).
func TestUniformAssignorWorkIsLinear(t *testing.T) {
	const P = 10000
	topic := asgTopic(1)
	topics := map[[16]byte]int32{topic: P}
	// bound is what the test allows for p partitions and m members.
	bound := func(p, m int) int { return 30*p + 10*m }

	// One member holds everything; a second joins.
	members := asgMembers(2, topic)
	first, _ := uniformAssignment(members[:1], topics)
	members[0].current = first[members[0].id]
	out, steps := uniformAssignment(members, topics)
	counts := asgCheck(t, members, topics, out)
	require.Equal(t, map[string]int{"m00": P / 2, "m01": P / 2}, counts)
	require.LessOrEqual(t, steps, bound(P, 2), "second member joining %d partitions", P)

	// Members join one at a time: each join moves only what it must.
	members = asgMembers(40, topic)
	prev := map[string]cgPartitions{}
	for n := 1; n <= len(members); n++ {
		ms := make([]assignorMember, n)
		copy(ms, members[:n])
		for i := range ms {
			ms[i].current = prev[ms[i].id]
		}
		next, steps := uniformAssignment(ms, topics)
		counts := make(map[string]int, n)
		for id, parts := range next {
			counts[id] = len(parts)
		}
		require.LessOrEqual(t, spread(counts), 1)
		require.LessOrEqual(t, steps, bound(P, n), "member %d joining", n)
		prev = next
	}
	asgCheck(t, members, topics, prev)

	// Every member subscribes differently (one class each, a ring): the
	// steps stay within the bound times the number of classes. Moving one
	// partition at a time does not always reach a spread of one here (a
	// chain of moves would be needed), so only validity is checked.
	var het []assignorMember
	hetTopics := map[[16]byte]int32{}
	for i := 0; i < 50; i++ {
		hetTopics[asgTopic(byte(i))] = 100
		subs := map[[16]byte]bool{asgTopic(byte(i)): true, asgTopic(byte((i + 1) % 50)): true}
		het = append(het, assignorMember{id: fmt.Sprintf("h%02d", i), topics: subs})
	}
	// The first member starts with everything it may hold.
	het[0].current = cgPartitions{}
	for p := int32(0); p < 100; p++ {
		het[0].current[cgTP{asgTopic(0), p}] = 0
		het[0].current[cgTP{asgTopic(1), p}] = 0
	}
	hout, steps := uniformAssignment(het, hetTopics)
	asgCheck(t, het, hetTopics, hout)
	require.LessOrEqual(t, steps, 50*bound(5000, 50), "50 classes over 5,000 partitions")
	t.Logf("heterogeneous: %d steps", steps)
}
