package kshare

import (
	"fmt"
	"time"

	"github.com/kshare-go/kshare/internal/acktrack"
)

// AckType says what a share-group acknowledgement does with a record
// (KIP-932). The values are the protocol's acknowledgement types.
type AckType int8

// The acknowledgement types an application chooses. The share consumer
// also sends GAP (an offset without a record) and RENEW (a lock
// extension) by itself; applications never do.
const (
	// AckAccept marks a record processed: it is never delivered again.
	AckAccept AckType = 1
	// AckRelease gives a record back: it becomes available to the group
	// again at once (its delivery count counts this delivery).
	AckRelease AckType = 2
	// AckReject marks a record that cannot be processed: it is archived
	// and never delivered again.
	AckReject AckType = 3
)

// String names the type as KIP-932 does ("ACCEPT", "RELEASE", "REJECT"),
// or AckType(n) for any other value.
func (t AckType) String() string {
	switch t {
	case AckAccept:
		return "ACCEPT"
	case AckRelease:
		return "RELEASE"
	case AckReject:
		return "REJECT"
	}
	return fmt.Sprintf("AckType(%d)", int8(t))
}

// TopicPartition names a partition by topic name.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// ShareGroupMetadata identifies the share-group member whose acquired
// records a transaction acknowledges
// (shareconsumer.Consumer.GroupMetadata): the broker stages only records
// that this member holds, at this member epoch.
type ShareGroupMetadata struct {
	GroupID     string
	MemberID    string
	MemberEpoch int32
}

// AckedRecord is one acknowledgement of a ShareAcks: an offset, its type,
// and the end of the record's acquisition lock as the consumer knew it
// when it built the acknowledgement (zero if unknown).
type AckedRecord struct {
	Offset       int64
	Type         AckType
	LockDeadline time.Time
}

// ShareAcks is the set of acknowledgements that one transaction carries:
// per partition, offsets and what to do with them.
// shareconsumer.Consumer.Acks builds it from polled records, and
// producer.Producer.SendShareAcksToTransaction and the acknowledger put it
// in a transaction. The consumer that built it follows it through that
// transaction: it checks the locks when the acknowledgements join it,
// renews them while it is open, and learns how it ended.
//
// A ShareAcks never changes once built: Merge returns a new one, and the
// methods that read it return copies. The zero value (new(ShareAcks), not
// a nil pointer, which the transaction calls refuse) is empty; it commits
// nothing. The type is defined on an internal one so that the packages of
// this module, and nothing else, reach the consumer behind it.
type ShareAcks acktrack.Set

// set is a's internal form.
func (a *ShareAcks) set() *acktrack.Set { return (*acktrack.Set)(a) }

// Len returns the number of acknowledged offsets: an offset acknowledged
// twice (by Merge of overlapping acknowledgements, or a record passed
// twice to Acks) counts once, since only its last acknowledgement is
// sent. A nil ShareAcks has none.
func (a *ShareAcks) Len() int { return a.set().Distinct() }

// Partitions returns the acknowledged partitions, sorted by topic and
// partition.
func (a *ShareAcks) Partitions() []TopicPartition {
	tps := a.set().Partitions()
	out := make([]TopicPartition, len(tps))
	for i, tp := range tps {
		out[i] = TopicPartition(tp)
	}
	return out
}

// Records returns a copy of the acknowledgements of partition tp, in the
// order they were added; when an offset is listed twice, the later
// acknowledgement is the one sent.
func (a *ShareAcks) Records(tp TopicPartition) []AckedRecord {
	recs := a.set().Records(acktrack.TopicPartition(tp))
	out := make([]AckedRecord, len(recs))
	for i, r := range recs {
		out[i] = AckedRecord{Offset: r.Offset, Type: AckType(r.Type), LockDeadline: r.LockDeadline}
	}
	return out
}

// Merge returns a new ShareAcks with the acknowledgements of a followed by
// those of other; a and other do not change, and either may be nil. An
// offset in both gets other's type. Merge acknowledgements of one consumer
// only: a ShareAcks merged from two consumers' cannot join a transaction
// (that fails with ErrUsage), since each consumer must follow its own
// records.
func (a *ShareAcks) Merge(other *ShareAcks) *ShareAcks {
	return (*ShareAcks)(a.set().Merge(other.set()))
}
