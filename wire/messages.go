package wire

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// AcknowledgementBatch is one contiguous offset range and the one type for
// all of it, as the share consumer sends them in ShareFetch and
// ShareAcknowledge (kmsg's batches, with a single-entry AcknowledgeTypes).
// TxnShareAcknowledge uses TxnShareAcknowledgeBatch, which may carry a type
// per offset.
type AcknowledgementBatch struct {
	FirstOffset     int64
	LastOffset      int64
	AcknowledgeType AckType
}

// TxnShareAcknowledgeBatch is one contiguous offset range of a
// TxnShareAcknowledge request and what to do with it, as the draft's
// TxnShareAcknowledgeBatch: AcknowledgeTypes holds one type per offset of
// FirstOffset..LastOffset, or a single type for the whole range. Only
// AckAccept, AckReject and AckGap are valid in a transaction.
type TxnShareAcknowledgeBatch struct {
	FirstOffset      int64
	LastOffset       int64
	AcknowledgeTypes []AckType
}

// TxnShareAcknowledgePartition carries the batches of one partition.
type TxnShareAcknowledgePartition struct {
	Partition              int32
	AcknowledgementBatches []TxnShareAcknowledgeBatch
}

// TxnShareAcknowledgeTopic carries the partitions of one topic, by id.
type TxnShareAcknowledgeTopic struct {
	TopicID    [16]byte
	Partitions []TxnShareAcknowledgePartition
}

// TxnShareAcknowledgeRequest (key 95, v0, flexible) stages acknowledgements
// in a transaction at the share-partition leader of each partition it
// names, in the layout of apache/kafka PR #22357 (docs/protocol.md names
// the commit): TransactionalId, GroupId, ProducerId, ProducerEpoch,
// MemberId, MemberEpoch, then the topics. The leader adds the group's
// __share_group_state partition to the producer's (transaction version 2)
// transaction itself; staged records go TX_PENDING until a marker on that
// partition commits or aborts them.
//
// TransactionalID is nullable on the wire; a null decodes as "", which a
// broker refuses (INVALID_REQUEST), as the draft does.
type TxnShareAcknowledgeRequest struct {
	Version         int16
	TransactionalID string
	GroupID         string
	ProducerID      int64
	ProducerEpoch   int16
	MemberID        string
	MemberEpoch     int32
	Topics          []TxnShareAcknowledgeTopic
}

// TxnShareAcknowledgePartitionResponse is one partition's outcome: nothing of
// a partition is staged unless its ErrorCode is zero.
type TxnShareAcknowledgePartitionResponse struct {
	Partition    int32
	ErrorCode    int16
	ErrorMessage *string
}

// TxnShareAcknowledgeTopicResponse groups partition outcomes by topic id.
type TxnShareAcknowledgeTopicResponse struct {
	TopicID    [16]byte
	Partitions []TxnShareAcknowledgePartitionResponse
}

// TxnShareAcknowledgeResponse answers TxnShareAcknowledgeRequest. A top-level
// ErrorCode (member, producer or authorization errors) applies to every
// partition.
type TxnShareAcknowledgeResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	Topics         []TxnShareAcknowledgeTopicResponse
}

var (
	_ kmsg.Request  = (*TxnShareAcknowledgeRequest)(nil)
	_ kmsg.Response = (*TxnShareAcknowledgeResponse)(nil)
)

// Key returns 95.
func (*TxnShareAcknowledgeRequest) Key() int16 { return TxnShareAcknowledgeKey }

// MaxVersion returns 0.
func (*TxnShareAcknowledgeRequest) MaxVersion() int16 { return TxnShareAcknowledgeMaxVersion }

// SetVersion sets the version to encode.
func (v *TxnShareAcknowledgeRequest) SetVersion(version int16) { v.Version = version }

// GetVersion returns the version to encode.
func (v *TxnShareAcknowledgeRequest) GetVersion() int16 { return v.Version }

// IsFlexible returns true: the message is flexible from v0.
func (*TxnShareAcknowledgeRequest) IsFlexible() bool { return true }

// ResponseKind returns an empty response of the same version.
func (v *TxnShareAcknowledgeRequest) ResponseKind() kmsg.Response {
	return &TxnShareAcknowledgeResponse{Version: v.Version}
}

// AppendTo appends the request body in wire form.
func (v *TxnShareAcknowledgeRequest) AppendTo(dst []byte) []byte {
	dst = kbin.AppendCompactNullableString(dst, &v.TransactionalID)
	dst = kbin.AppendCompactString(dst, v.GroupID)
	dst = kbin.AppendInt64(dst, v.ProducerID)
	dst = kbin.AppendInt16(dst, v.ProducerEpoch)
	dst = kbin.AppendCompactString(dst, v.MemberID)
	dst = kbin.AppendInt32(dst, v.MemberEpoch)
	dst = kbin.AppendCompactArrayLen(dst, len(v.Topics))
	for _, t := range v.Topics {
		dst = kbin.AppendUuid(dst, t.TopicID)
		dst = kbin.AppendCompactArrayLen(dst, len(t.Partitions))
		for _, p := range t.Partitions {
			dst = kbin.AppendInt32(dst, p.Partition)
			dst = kbin.AppendCompactArrayLen(dst, len(p.AcknowledgementBatches))
			for _, b := range p.AcknowledgementBatches {
				dst = kbin.AppendInt64(dst, b.FirstOffset)
				dst = kbin.AppendInt64(dst, b.LastOffset)
				dst = kbin.AppendCompactArrayLen(dst, len(b.AcknowledgeTypes))
				for _, t := range b.AcknowledgeTypes {
					dst = kbin.AppendInt8(dst, int8(t))
				}
				dst = appendTags(dst)
			}
			dst = appendTags(dst)
		}
		dst = appendTags(dst)
	}
	return appendTags(dst)
}

// ReadFrom decodes a request body; errors wrap ErrMalformed.
func (v *TxnShareAcknowledgeRequest) ReadFrom(src []byte) error {
	if err := checkVersion("TxnShareAcknowledgeRequest", v.Version, TxnShareAcknowledgeMaxVersion); err != nil {
		return err
	}
	r := newReader(src)
	if id := r.CompactNullableString(); id != nil {
		v.TransactionalID = *id
	} else {
		v.TransactionalID = ""
	}
	v.GroupID = r.CompactString()
	v.ProducerID = r.Int64()
	v.ProducerEpoch = r.Int16()
	v.MemberID = r.CompactString()
	v.MemberEpoch = r.Int32()
	v.Topics = make([]TxnShareAcknowledgeTopic, r.arrayLen())
	for i := range v.Topics {
		t := &v.Topics[i]
		t.TopicID = r.Uuid()
		t.Partitions = make([]TxnShareAcknowledgePartition, r.arrayLen())
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition = r.Int32()
			p.AcknowledgementBatches = make([]TxnShareAcknowledgeBatch, r.arrayLen())
			for k := range p.AcknowledgementBatches {
				b := &p.AcknowledgementBatches[k]
				b.FirstOffset = r.Int64()
				b.LastOffset = r.Int64()
				b.AcknowledgeTypes = make([]AckType, r.arrayLen())
				for x := range b.AcknowledgeTypes {
					b.AcknowledgeTypes[x] = AckType(r.Int8())
				}
				r.skipTags()
			}
			r.skipTags()
		}
		r.skipTags()
	}
	r.skipTags()
	return r.complete("TxnShareAcknowledgeRequest", v.Version)
}

// Key returns 95.
func (*TxnShareAcknowledgeResponse) Key() int16 { return TxnShareAcknowledgeKey }

// MaxVersion returns 0.
func (*TxnShareAcknowledgeResponse) MaxVersion() int16 { return TxnShareAcknowledgeMaxVersion }

// SetVersion sets the version to encode.
func (v *TxnShareAcknowledgeResponse) SetVersion(version int16) { v.Version = version }

// GetVersion returns the version to encode.
func (v *TxnShareAcknowledgeResponse) GetVersion() int16 { return v.Version }

// IsFlexible returns true: the message is flexible from v0.
func (*TxnShareAcknowledgeResponse) IsFlexible() bool { return true }

// RequestKind returns an empty request of the same version.
func (v *TxnShareAcknowledgeResponse) RequestKind() kmsg.Request {
	return &TxnShareAcknowledgeRequest{Version: v.Version}
}

// Throttle returns the throttle and whether the client throttles after
// the response (KIP-219: it does).
func (v *TxnShareAcknowledgeResponse) Throttle() (int32, bool) { return v.ThrottleMillis, true }

// AppendTo appends the response body in wire form.
func (v *TxnShareAcknowledgeResponse) AppendTo(dst []byte) []byte {
	dst = kbin.AppendInt32(dst, v.ThrottleMillis)
	dst = kbin.AppendInt16(dst, v.ErrorCode)
	dst = kbin.AppendCompactArrayLen(dst, len(v.Topics))
	for _, t := range v.Topics {
		dst = kbin.AppendUuid(dst, t.TopicID)
		dst = kbin.AppendCompactArrayLen(dst, len(t.Partitions))
		for _, p := range t.Partitions {
			dst = kbin.AppendInt32(dst, p.Partition)
			dst = kbin.AppendInt16(dst, p.ErrorCode)
			dst = kbin.AppendCompactNullableString(dst, p.ErrorMessage)
			dst = appendTags(dst)
		}
		dst = appendTags(dst)
	}
	return appendTags(dst)
}

// ReadFrom decodes a response body; errors wrap ErrMalformed.
func (v *TxnShareAcknowledgeResponse) ReadFrom(src []byte) error {
	if err := checkVersion("TxnShareAcknowledgeResponse", v.Version, TxnShareAcknowledgeMaxVersion); err != nil {
		return err
	}
	r := newReader(src)
	v.ThrottleMillis = r.Int32()
	v.ErrorCode = r.Int16()
	v.Topics = make([]TxnShareAcknowledgeTopicResponse, r.arrayLen())
	for i := range v.Topics {
		t := &v.Topics[i]
		t.TopicID = r.Uuid()
		t.Partitions = make([]TxnShareAcknowledgePartitionResponse, r.arrayLen())
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition = r.Int32()
			p.ErrorCode = r.Int16()
			p.ErrorMessage = r.CompactNullableString()
			r.skipTags()
		}
		r.skipTags()
	}
	r.skipTags()
	return r.complete("TxnShareAcknowledgeResponse", v.Version)
}
