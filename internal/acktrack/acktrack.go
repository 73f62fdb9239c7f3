// Package acktrack holds the data behind kshare.ShareAcks and the
// tracker through which a share consumer follows its acknowledgements
// into a transaction and learns how it ended.
//
// kshare.ShareAcks is defined as this package's Set (type ShareAcks
// acktrack.Set), so that the packages of this module convert between the
// two (*acktrack.Set)(acks) and reach the tracker and the records, while
// applications, which cannot import an internal package, hold an opaque
// value they can read through kshare's methods and never change. Only the
// share consumer creates a Set with a tracker; only the transaction
// manager and the acknowledger call the tracker.
//
// This package imports nothing of kshare: the root package imports it.
package acktrack

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// TopicPartition names a partition by topic name; it converts to and
// from kshare.TopicPartition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Record is one acknowledged offset: its type (a kshare.AckType value,
// numbered as on the wire) and the lock deadline the consumer knew when it
// built the acknowledgement (zero if unknown).
type Record struct {
	Offset       int64
	Type         int8
	LockDeadline time.Time
	// Delivery is the record's delivery count when the acknowledgement
	// was built (0: unknown): it tells that delivery from a later one of
	// the same offset.
	Delivery int16
}

// Tracker follows acknowledgements through a transaction. The share
// consumer implements it with an unexported type, so that applications
// cannot call it. Implementations are safe for concurrent use.
type Tracker interface {
	// Stage is called before the acknowledgements join a transaction (or
	// an acknowledger's checkpoint), as st describes. An error keeps them
	// out of it; nothing changes then. A Set is staged once until it is
	// resolved: staging it again is refused, unless st.Again says that
	// its owner checks it again as it joins the owner's commit.
	Stage(acks *Set, st Staging) error
	// Resolve is called once for every Set that Stage accepted: when the
	// transaction it joined committed (true) or aborted, or once it is
	// known never to be sent (false).
	Resolve(acks *Set, committed bool)
}

// Staging describes what acknowledgements join when they are staged.
type Staging struct {
	// Group and Member identify the share-group member the transaction
	// carries (its metadata): only that member's records can be staged.
	Group, Member string
	// Deadline is when the transaction times out: after it, the
	// transaction can never commit, and the tracker may give the records
	// back. Zero for none (a checkpoint waiting for its commit).
	Deadline time.Time
	// Again marks the owner of a staged Set (the acknowledger that
	// staged a checkpoint) checking it again as it joins the owner's
	// commit transaction. Any other second staging of a Set that is not
	// resolved yet is a usage error: one Set in two transactions would
	// be resolved by the first to end while the other still carries it.
	Again bool
	// Ledger names the claim ledger topic that carries the
	// acknowledgements instead of KIP-1289 (empty: KIP-1289): the
	// transaction writes claims for them, renews their locks through the
	// tracker's Renewer before it commits, and on commit the tracker
	// itself sends them as plain acknowledgements (the broker knows
	// nothing of the transaction).
	Ledger string
}

// Renewer is implemented by trackers that can renew the locks of staged
// records on demand (ShareAcknowledge RENEW, KIP-1222). A transaction that
// carries its acknowledgements in a claim ledger calls Renew after its
// claims are durable and before EndTxn: a record whose lock cannot be
// renewed may already be another member's, and the transaction must not
// commit. The shareconsumer's tracker implements it; trackers that do not
// cannot be staged with Staging.Ledger.
type Renewer interface {
	// Renew renews the locks of every record of acks (staged with
	// Staging.Ledger) with a RENEW sent after the call began, and
	// returns the records whose renewal did not succeed, each with its
	// cause; none means all were renewed. ctx bounds the wait: records
	// not renewed when it ends are failures.
	Renew(ctx context.Context, acks *Set) []RenewFailure
}

// RenewFailure is one record whose lock a Renewer could not renew.
type RenewFailure struct {
	TopicPartition
	Offset int64
	Err    error
}

// Set is a set of acknowledgements: per partition, the offsets and their
// types, the topic ids the consumer knew, and the tracker of the consumer
// that built it. The zero value is an empty set without a tracker. A Set
// that applications hold is never changed: Merge builds a new one.
type Set struct {
	parts    map[TopicPartition]*[]Record
	topicIDs map[string][16]byte
	// last is the partition Add appended to last, and its records: a
	// consumer adds a poll's records partition by partition, so most
	// Adds skip the map.
	lastTP  TopicPartition
	last    *[]Record
	lastID  [16]byte
	tracker Tracker
	// mixed marks a Set merged from the acknowledgements of two
	// trackers (two consumers): it cannot be staged.
	mixed bool
}

// New returns an empty Set followed by t (nil for none).
func New(t Tracker) *Set { return &Set{tracker: t} }

// Tracker returns the tracker that follows s, or nil.
func (s *Set) Tracker() Tracker {
	if s == nil {
		return nil
	}
	return s.tracker
}

// Mixed reports whether s merges the acknowledgements of two trackers.
func (s *Set) Mixed() bool { return s != nil && s.mixed }

// Add records one acknowledgement in s, which must not have been handed
// out yet. topicID may be zero when unknown; the sender resolves it from
// metadata.
func (s *Set) Add(topic string, topicID [16]byte, partition int32, rec Record) {
	tp := TopicPartition{topic, partition}
	if s.last == nil || tp != s.lastTP {
		if s.parts == nil {
			s.parts = make(map[TopicPartition]*[]Record)
		}
		recs := s.parts[tp]
		if recs == nil {
			recs = new([]Record)
			s.parts[tp] = recs
		}
		s.lastTP, s.last, s.lastID = tp, recs, [16]byte{}
	}
	*s.last = append(*s.last, rec)
	if topicID != ([16]byte{}) && topicID != s.lastID {
		s.lastID = topicID
		if s.topicIDs == nil {
			s.topicIDs = make(map[string][16]byte)
		}
		s.topicIDs[topic] = topicID
	}
}

// Merge returns a new Set with the acknowledgements of s and then other;
// neither changes. A later acknowledgement of an offset replaces an
// earlier one when batches are built. The result keeps the tracker the
// non-empty inputs share; if they have different trackers it is mixed
// and cannot be staged. Either may be nil.
func (s *Set) Merge(other *Set) *Set {
	out := &Set{}
	for _, in := range []*Set{s, other} {
		if in == nil || (in.Len() == 0 && !in.mixed) {
			continue
		}
		switch {
		case out.Len() == 0 && !out.mixed:
			out.tracker, out.mixed = in.tracker, in.mixed
		case in.mixed || out.tracker != in.tracker:
			out.mixed, out.tracker = true, nil
		}
		in.each(func(tp TopicPartition, id [16]byte, r Record) { out.Add(tp.Topic, id, tp.Partition, r) })
	}
	return out
}

// Retyped returns a copy of s, followed by tracker t, whose every
// acknowledgement has type typ(old type).
func (s *Set) Retyped(t Tracker, typ func(int8) int8) *Set {
	out := New(t)
	s.each(func(tp TopicPartition, id [16]byte, r Record) {
		r.Type = typ(r.Type)
		out.Add(tp.Topic, id, tp.Partition, r)
	})
	return out
}

// each calls fn for every acknowledgement, partition by partition in
// order, each partition's in the order added.
func (s *Set) each(fn func(tp TopicPartition, id [16]byte, r Record)) {
	for _, tp := range s.Partitions() {
		id := s.topicIDs[tp.Topic]
		for _, r := range *s.parts[tp] {
			fn(tp, id, r)
		}
	}
}

// Len returns the number of acknowledgements added, an offset added twice
// counting twice; Distinct counts offsets.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	n := 0
	for _, recs := range s.parts {
		n += len(*recs)
	}
	return n
}

// Distinct returns the number of distinct acknowledged offsets: an offset
// acknowledged twice (Merge of overlapping sets, a record listed twice)
// counts once, as it is sent once.
func (s *Set) Distinct() int {
	n := 0
	for _, tp := range s.Partitions() {
		n += distinctOffsets(s.Records(tp))
	}
	return n
}

// distinctOffsets counts the distinct offsets of recs without a map for
// the usual case, offsets in increasing order.
func distinctOffsets(recs []Record) int {
	ascending := true
	for i := 1; i < len(recs) && ascending; i++ {
		ascending = recs[i].Offset > recs[i-1].Offset
	}
	if ascending {
		return len(recs)
	}
	seen := make(map[int64]struct{}, len(recs))
	for _, r := range recs {
		seen[r.Offset] = struct{}{}
	}
	return len(seen)
}

// Partitions returns the acknowledged partitions, sorted by topic and
// partition.
func (s *Set) Partitions() []TopicPartition {
	if s == nil {
		return nil
	}
	out := make([]TopicPartition, 0, len(s.parts))
	for tp := range s.parts {
		out = append(out, tp)
	}
	SortTopicPartitions(out)
	return out
}

// Records returns the acknowledgements of one partition in the order
// added. The slice is s's own: do not modify it.
func (s *Set) Records(tp TopicPartition) []Record {
	if s == nil {
		return nil
	}
	if recs := s.parts[tp]; recs != nil {
		return *recs
	}
	return nil
}

// TopicID returns the topic id recorded for topic, if any.
func (s *Set) TopicID(topic string) ([16]byte, bool) {
	if s == nil {
		return [16]byte{}, false
	}
	id, ok := s.topicIDs[topic]
	return id, ok
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
