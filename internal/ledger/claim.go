// Package ledger is the claim ledger of exactly-once share pipelines on
// clusters without KIP-1289: a transaction writes, next to its output, a
// claim for every input record it acknowledges ("group G, topic T,
// partition P, offsets X..Y: accepted (or rejected) by transactional id
// I") into a ledger topic the application names. A consumer that is
// delivered a record again looks it up in the ledger, read_committed, and
// acknowledges a record a committed claim covers as the claim says instead
// of handing it to the application. docs/design.md ("Exactly-once without
// KIP-1289") argues why this is safe.
//
// This package holds the claim's encoding, the placement of claims on the
// ledger's partitions, the index of committed claims and the Resolver that
// reads the ledger into it. It imports no client package: the producer
// writes claims and the share consumer resolves its records with it.
package ledger

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/kshare-go/kshare/internal/javahash"
)

// Version is the claim encoding this package writes; Decode reads only
// this version and says so for any other.
const Version = 1

// Acknowledgement types a claim can carry, numbered as on the wire (and as
// kshare.AckType). A claim never carries RELEASE: a released record was
// not processed, and must be delivered again.
const (
	TypeAccept int8 = 1
	TypeReject int8 = 3
)

// ErrMalformed marks a ledger record that is not a claim this package can
// read: a foreign record, a corrupt one, or a claim of a newer version.
// The Resolver skips and counts such records; it never fails on them.
var ErrMalformed = errors.New("malformed ledger claim")

// Range is a run of consecutive input offsets, First to Last inclusive,
// acknowledged with one type.
type Range struct {
	First, Last int64
	Type        int8
}

// Claim says that the transaction of TransactionalID acknowledged the
// Ranges of one input partition for share group Group. It is written in
// that transaction, so it is visible to read_committed readers exactly
// when the transaction committed.
type Claim struct {
	Group           string
	Topic           string
	TopicID         [16]byte
	Partition       int32
	Ranges          []Range
	TransactionalID string
}

// Input names the input partition of a group that a claim is about: the
// unit claims are placed and indexed by. The topic is named by its id, so
// that a topic deleted and created again under the same name does not
// inherit the claims of its predecessor.
type Input struct {
	Group     string
	TopicID   [16]byte
	Partition int32
}

// Input returns the input partition c is about.
func (c Claim) Input() Input { return Input{c.Group, c.TopicID, c.Partition} }

// Key returns the record key of in's claims, "group/topicID/partition",
// which LedgerPartition hashes.
func (in Input) Key() string {
	b := make([]byte, 0, len(in.Group)+2*len(in.TopicID)+13)
	b = append(b, in.Group...)
	b = append(b, '/')
	b = hex.AppendEncode(b, in.TopicID[:])
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(in.Partition), 10)
	return string(b)
}

// LedgerPartition returns the ledger partition that holds every claim of in,
// for a ledger of n partitions: Java's String.hashCode of in.Key modulo n
// (javahash.Partition), so that one reader of one partition sees every
// claim of an input partition in the order they committed. n must be
// positive.
func (in Input) LedgerPartition(n int32) int32 { return javahash.Partition(in.Key(), n) }

// wireClaim is a claim as stored: JSON, so that an operator can read the
// ledger with any console consumer.
type wireClaim struct {
	V       int        `json:"v"`
	Group   string     `json:"group"`
	Topic   string     `json:"topic"`
	TopicID string     `json:"topic_id"`
	Part    int32      `json:"partition"`
	Ranges  [][3]int64 `json:"ranges"` // first, last, type
	TxnID   string     `json:"txn_id"`
}

// Encode returns c's record value. It fails on a claim Decode would
// refuse: no group, a zero topic id, a negative partition, no ranges, a
// range that is empty, out of order or overlapping, or a type other than
// accept and reject.
func (c Claim) Encode() ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w := wireClaim{V: Version, Group: c.Group, Topic: c.Topic, TopicID: hex.EncodeToString(c.TopicID[:]),
		Part: c.Partition, TxnID: c.TransactionalID}
	for _, r := range c.Ranges {
		w.Ranges = append(w.Ranges, [3]int64{r.First, r.Last, int64(r.Type)})
	}
	return json.Marshal(w)
}

// check reports why c is not a well-formed claim.
func (c Claim) check() error {
	switch {
	case c.Group == "":
		return fmt.Errorf("%w: no group", ErrMalformed)
	case c.TopicID == [16]byte{}:
		return fmt.Errorf("%w: no topic id", ErrMalformed)
	case c.Partition < 0:
		return fmt.Errorf("%w: partition %d", ErrMalformed, c.Partition)
	case len(c.Ranges) == 0:
		return fmt.Errorf("%w: no ranges", ErrMalformed)
	}
	for i, r := range c.Ranges {
		switch {
		case r.First < 0 || r.Last < r.First:
			return fmt.Errorf("%w: range %d..%d", ErrMalformed, r.First, r.Last)
		case r.Type != TypeAccept && r.Type != TypeReject:
			return fmt.Errorf("%w: acknowledgement type %d (only accept and reject are claimed)", ErrMalformed, r.Type)
		case i > 0 && r.First <= c.Ranges[i-1].Last:
			return fmt.Errorf("%w: range %d..%d overlaps or precedes %d..%d", ErrMalformed, r.First, r.Last, c.Ranges[i-1].First, c.Ranges[i-1].Last)
		}
	}
	return nil
}

// Decode reads a claim from a ledger record's value. Any record that is
// not a claim of this version fails with an error wrapping ErrMalformed
// that says what is wrong; Decode never panics.
func Decode(value []byte) (Claim, error) {
	var w wireClaim
	if err := json.Unmarshal(value, &w); err != nil {
		return Claim{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if w.V != Version {
		return Claim{}, fmt.Errorf("%w: version %d (this client reads version %d)", ErrMalformed, w.V, Version)
	}
	id, err := hex.DecodeString(w.TopicID)
	if err != nil || len(id) != 16 {
		return Claim{}, fmt.Errorf("%w: topic id %q", ErrMalformed, w.TopicID)
	}
	c := Claim{Group: w.Group, Topic: w.Topic, Partition: w.Part, TransactionalID: w.TxnID}
	copy(c.TopicID[:], id)
	for _, r := range w.Ranges {
		if r[2] < -128 || r[2] > 127 {
			return Claim{}, fmt.Errorf("%w: acknowledgement type %d", ErrMalformed, r[2])
		}
		c.Ranges = append(c.Ranges, Range{First: r[0], Last: r[1], Type: int8(r[2])})
	}
	if err := c.check(); err != nil {
		return Claim{}, err
	}
	return c, nil
}

// RangesOf turns acknowledged offsets and their types into the ranges of
// a claim: offsets sorted, the last type given for an offset winning,
// types other than accept and reject left out (they are not claimed),
// runs of consecutive offsets of one type merged.
func RangesOf(offsets []int64, types []int8) []Range {
	if strictlyAscending(offsets) {
		// One type per offset already, in order: no map, no sort.
		var out []Range
		for i, o := range offsets {
			out = appendClaimed(out, o, types[i])
		}
		return out
	}
	last := make(map[int64]int8, len(offsets))
	for i, o := range offsets {
		last[o] = types[i]
	}
	sorted := make([]int64, 0, len(last))
	for o, t := range last {
		if t == TypeAccept || t == TypeReject {
			sorted = append(sorted, o)
		}
	}
	slices.Sort(sorted)
	var out []Range
	for _, o := range sorted {
		out = appendClaimed(out, o, last[o])
	}
	return out
}

// strictlyAscending reports whether every offset is above the one before:
// no offset repeats, so none has a later type that replaces its first.
func strictlyAscending(offsets []int64) bool {
	for i := 1; i < len(offsets); i++ {
		if offsets[i] <= offsets[i-1] {
			return false
		}
	}
	return true
}

// appendClaimed adds offset o of type t to the ranges out, whose last
// offset is below o: a type that is not claimed is left out, and o joins
// the last range if it follows it with the same type.
func appendClaimed(out []Range, o int64, t int8) []Range {
	if t != TypeAccept && t != TypeReject {
		return out
	}
	if n := len(out); n > 0 && out[n-1].Last == o-1 && out[n-1].Type == t {
		out[n-1].Last = o
		return out
	}
	return append(out, Range{First: o, Last: o, Type: t})
}
