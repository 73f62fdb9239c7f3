package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSortTopicPartitions(t *testing.T) {
	tps := []TopicPartition{{"b", 1}, {"a", 10}, {"b", 0}, {"a", 2}}
	SortTopicPartitions(tps)
	require.Equal(t, []TopicPartition{{"a", 2}, {"a", 10}, {"b", 0}, {"b", 1}}, tps)
}

func TestCoalesceAcksAndDeadlines(t *testing.T) {
	require.Nil(t, CoalesceAcks(nil))
	now := time.Now()
	var acks ShareAcks
	_, ok := acks.EarliestDeadline()
	require.False(t, ok, "empty acks have no deadline")
	acks.Add("t", [16]byte{9}, 0, AckedRecord{Offset: 5, Type: AckAccept, LockDeadline: now.Add(time.Minute)})
	acks.Add("t", [16]byte{}, 0, AckedRecord{Offset: 3, Type: AckAccept, LockDeadline: now})
	acks.Add("t", [16]byte{}, 0, AckedRecord{Offset: 4, Type: AckAccept})
	dl, ok := acks.EarliestDeadline()
	require.True(t, ok)
	require.True(t, dl.Equal(now))
	id, ok := acks.TopicID("t")
	require.True(t, ok, "a zero id does not replace a known one")
	require.Equal(t, [16]byte{9}, id)
	require.Equal(t, []AcknowledgementBatch{{FirstOffset: 3, LastOffset: 5, AcknowledgeType: AckAccept}},
		acks.Batches(TopicPartition{"t", 0}))

	var merged ShareAcks
	merged.Merge(&acks)
	require.Equal(t, 3, merged.Len())
	id, _ = merged.TopicID("t")
	require.Equal(t, [16]byte{9}, id, "Merge keeps topic ids")
}
