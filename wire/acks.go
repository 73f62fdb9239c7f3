package wire

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// AckType is a KIP-932 acknowledgement type, numbered as on the wire.
type AckType int8

// Acknowledgement types. Only Accept, Release and Reject can be staged in a
// transaction; Renew extends a lock and Gap marks offsets with no record.
const (
	AckGap     AckType = 0
	AckAccept  AckType = 1
	AckRelease AckType = 2
	AckReject  AckType = 3
	AckRenew   AckType = 4
)

// String names the type as KIP-932 does ("ACCEPT", ...), or AckType(n)
// for a number KIP-932 does not define.
func (t AckType) String() string {
	switch t {
	case AckGap:
		return "GAP"
	case AckAccept:
		return "ACCEPT"
	case AckRelease:
		return "RELEASE"
	case AckReject:
		return "REJECT"
	case AckRenew:
		return "RENEW"
	}
	return fmt.Sprintf("AckType(%d)", int8(t))
}

// Transactional reports whether t may be staged in a transaction.
func (t AckType) Transactional() bool {
	return t == AckAccept || t == AckRelease || t == AckReject
}

// TopicPartition names a partition by topic name.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// SortTopicPartitions sorts tps by topic name, then partition.
func SortTopicPartitions(tps []TopicPartition) {
	slices.SortFunc(tps, func(a, b TopicPartition) int {
		if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return cmp.Compare(a.Partition, b.Partition)
	})
}

// ShareGroupMetadata identifies the share-group member whose acquired
// records are acknowledged: the broker stages only records that this member
// holds, at this member epoch.
type ShareGroupMetadata struct {
	GroupID     string
	MemberID    string
	MemberEpoch int32
}

// AckedRecord is one acknowledged offset, with the lock deadline the share
// consumer learned when it acquired the record (zero if unknown).
type AckedRecord struct {
	Offset       int64
	Type         AckType
	LockDeadline time.Time
}

// ShareAcks is the set of acknowledgements that one transaction carries:
// per partition, the offsets and what to do with them. The share consumer
// builds it from polled records; the producer and the acknowledger send it.
// The zero value is empty and ready to use. ShareAcks is not safe for
// concurrent mutation.
type ShareAcks struct {
	parts    map[TopicPartition][]AckedRecord
	topicIDs map[string][16]byte

	// Tracker, if set, is told when the acknowledgements are handed to a
	// transaction and how that transaction ended. The share consumer sets
	// it so that it learns outcomes; see Tracker.
	Tracker Tracker
}

// Tracker follows acknowledgements through a transaction. Implementations
// must be safe for concurrent use.
type Tracker interface {
	// Stage is called before the acknowledgements join a transaction. An
	// error (for example an expired acquisition lock) keeps them out of it.
	Stage(acks *ShareAcks) error
	// Resolve is called once the transaction they joined committed or
	// aborted, or once they are known never to be sent.
	Resolve(acks *ShareAcks, committed bool)
}

// Add records one acknowledgement. topicID may be zero when unknown; the
// sender resolves it from metadata.
func (a *ShareAcks) Add(topic string, topicID [16]byte, partition int32, rec AckedRecord) {
	if a.parts == nil {
		a.parts = make(map[TopicPartition][]AckedRecord)
		a.topicIDs = make(map[string][16]byte)
	}
	tp := TopicPartition{topic, partition}
	a.parts[tp] = append(a.parts[tp], rec)
	if topicID != ([16]byte{}) {
		a.topicIDs[topic] = topicID
	}
}

// Merge adds every acknowledgement of other to a. A later acknowledgement of
// an offset replaces an earlier one when batches are built.
func (a *ShareAcks) Merge(other *ShareAcks) {
	for tp, recs := range other.parts {
		id := other.topicIDs[tp.Topic]
		for _, r := range recs {
			a.Add(tp.Topic, id, tp.Partition, r)
		}
	}
}

// Len returns the number of acknowledged offsets.
func (a *ShareAcks) Len() int {
	n := 0
	for _, recs := range a.parts {
		n += len(recs)
	}
	return n
}

// Partitions returns the acknowledged partitions, sorted.
func (a *ShareAcks) Partitions() []TopicPartition {
	out := make([]TopicPartition, 0, len(a.parts))
	for tp := range a.parts {
		out = append(out, tp)
	}
	SortTopicPartitions(out)
	return out
}

// Records returns the acknowledgements of one partition in the order added.
func (a *ShareAcks) Records(tp TopicPartition) []AckedRecord { return a.parts[tp] }

// TopicID returns the topic id recorded for topic, if any.
func (a *ShareAcks) TopicID(topic string) ([16]byte, bool) {
	id, ok := a.topicIDs[topic]
	return id, ok
}

// SetTopicID records the id of topic.
func (a *ShareAcks) SetTopicID(topic string, id [16]byte) {
	if a.topicIDs == nil {
		a.topicIDs = make(map[string][16]byte)
	}
	a.topicIDs[topic] = id
}

// EarliestDeadline returns the earliest known lock deadline, and false if no
// record carries one.
func (a *ShareAcks) EarliestDeadline() (time.Time, bool) {
	var min time.Time
	for _, recs := range a.parts {
		for _, r := range recs {
			if !r.LockDeadline.IsZero() && (min.IsZero() || r.LockDeadline.Before(min)) {
				min = r.LockDeadline
			}
		}
	}
	return min, !min.IsZero()
}

// Batches turns the acknowledgements of one partition into wire batches:
// offsets sorted, the last acknowledgement of an offset winning, adjacent
// offsets of the same type coalesced.
func (a *ShareAcks) Batches(tp TopicPartition) []AcknowledgementBatch {
	return CoalesceAcks(a.parts[tp])
}

// CoalesceAcks sorts acknowledgements by offset, keeps the last one given for
// each offset and merges runs of consecutive offsets of one type.
func CoalesceAcks(recs []AckedRecord) []AcknowledgementBatch {
	if len(recs) == 0 {
		return nil
	}
	last := make(map[int64]AckType, len(recs))
	for _, r := range recs {
		last[r.Offset] = r.Type
	}
	offsets := make([]int64, 0, len(last))
	for o := range last {
		offsets = append(offsets, o)
	}
	slices.Sort(offsets)
	var out []AcknowledgementBatch
	for _, o := range offsets {
		t := last[o]
		if n := len(out); n > 0 && out[n-1].LastOffset == o-1 && out[n-1].AcknowledgeType == t {
			out[n-1].LastOffset = o
			continue
		}
		out = append(out, AcknowledgementBatch{FirstOffset: o, LastOffset: o, AcknowledgeType: t})
	}
	return out
}
