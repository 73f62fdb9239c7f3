package acktrack

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type nopTracker struct{ name string }

func (*nopTracker) Stage(*Set, Staging) error { return nil }
func (*nopTracker) Resolve(*Set, bool)        {}

func TestSetReadsAndMerges(t *testing.T) {
	one, two := &nopTracker{"one"}, &nopTracker{"two"}
	now := time.Now()
	a := New(one)
	a.Add("t", [16]byte{9}, 1, Record{Offset: 5, Type: 1, LockDeadline: now})
	a.Add("t", [16]byte{}, 0, Record{Offset: 3, Type: 1})
	a.Add("a", [16]byte{}, 2, Record{Offset: 7, Type: 3})
	require.Equal(t, 3, a.Len())
	require.Equal(t, []TopicPartition{{"a", 2}, {"t", 0}, {"t", 1}}, a.Partitions())
	id, ok := a.TopicID("t")
	require.True(t, ok, "a zero id does not replace a known one")
	require.Equal(t, [16]byte{9}, id)
	_, ok = a.TopicID("a")
	require.False(t, ok)

	b := New(one)
	b.Add("t", [16]byte{}, 0, Record{Offset: 3, Type: 3})
	m := a.Merge(b)
	require.Equal(t, 4, m.Len())
	require.Equal(t, 3, m.Distinct(), "offset 3 of t/0 is acknowledged twice, and counts once")
	require.Equal(t, 3, a.Distinct())
	require.Equal(t, 3, a.Len(), "Merge changes neither input")
	require.Same(t, one, m.Tracker(), "one consumer's acknowledgements keep its tracker")
	require.False(t, m.Mixed())
	require.Equal(t, []Record{{Offset: 3, Type: 1}, {Offset: 3, Type: 3}}, m.Records(TopicPartition{"t", 0}), "the later one last")
	id, _ = m.TopicID("t")
	require.Equal(t, [16]byte{9}, id, "Merge keeps topic ids")

	other := New(two)
	other.Add("u", [16]byte{}, 0, Record{Offset: 1, Type: 1})
	mixed := a.Merge(other)
	require.True(t, mixed.Mixed(), "two trackers")
	require.Nil(t, mixed.Tracker())
	require.True(t, mixed.Merge(New(one)).Mixed(), "mixed stays mixed")
	require.True(t, New(nil).Merge(mixed).Mixed())
	require.Same(t, one, New(two).Merge(a).Tracker(), "an empty input does not count")

	r := a.Retyped(two, func(int8) int8 { return 2 })
	require.Same(t, two, r.Tracker())
	require.Equal(t, []Record{{Offset: 7, Type: 2}}, r.Records(TopicPartition{"a", 2}))
	require.Equal(t, int8(3), a.Records(TopicPartition{"a", 2})[0].Type, "Retyped copies")

	var none *Set
	require.Zero(t, none.Len())
	require.Zero(t, none.Distinct())
	require.Nil(t, none.Partitions())
	require.Nil(t, none.Records(TopicPartition{"t", 0}))
	require.Nil(t, none.Tracker())
	require.False(t, none.Mixed())
	_, ok = none.TopicID("t")
	require.False(t, ok)
	require.Zero(t, none.Merge(nil).Len())
}

// Distinct counts offsets, whatever the order and repeats, on both of its
// paths (offsets in increasing order, and any other).
func TestDistinct(t *testing.T) {
	for _, c := range []struct {
		offsets []int64
		want    int
	}{
		{nil, 0}, {[]int64{4}, 1}, {[]int64{1, 2, 5}, 3}, {[]int64{5, 1, 2}, 3},
		{[]int64{1, 1}, 1}, {[]int64{2, 1, 2, 1, 3}, 3}, {[]int64{1, 2, 2}, 2},
	} {
		s := New(nil)
		for _, o := range c.offsets {
			s.Add("t", [16]byte{}, 0, Record{Offset: o, Type: 1})
		}
		s.Add("u", [16]byte{}, 0, Record{Offset: 1, Type: 1}) // another partition's offset 1
		require.Equal(t, c.want+1, s.Distinct(), "offsets %v", c.offsets)
	}
}
