package wire

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// AddShareAcksToTxnTopic names the data partitions of one topic whose share
// state partitions join the transaction.
type AddShareAcksToTxnTopic struct {
	Name       string
	Partitions []int32
}

// AddShareAcksToTxnRequest (key 96, v0, flexible) asks the transaction
// coordinator to add the __share_group_state partition of every (group,
// topic, partition) to the producer's ongoing transaction. It mirrors
// AddOffsetsToTxn; the broker computes the state partitions.
type AddShareAcksToTxnRequest struct {
	Version         int16
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	GroupID         string
	Topics          []AddShareAcksToTxnTopic
}

// AddShareAcksToTxnResponse answers AddShareAcksToTxnRequest.
type AddShareAcksToTxnResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
}

// AcknowledgementBatch is one contiguous offset range and what to do with it.
type AcknowledgementBatch struct {
	FirstOffset     int64
	LastOffset      int64
	AcknowledgeType AckType
}

// TxnShareAcknowledgePartition carries the batches of one partition.
type TxnShareAcknowledgePartition struct {
	Partition              int32
	AcknowledgementBatches []AcknowledgementBatch
}

// TxnShareAcknowledgeTopic carries the partitions of one topic, by id.
type TxnShareAcknowledgeTopic struct {
	TopicID    [16]byte
	Partitions []TxnShareAcknowledgePartition
}

// TxnShareAcknowledgeRequest (key 95, v0-1, flexible) stages acknowledgements
// in a transaction at the share-partition leader of each partition it
// names. Staged records go TX_PENDING until a marker on the share state
// partition commits or aborts them. Both versions have the same layout; they
// differ in who puts the share state partition in the transaction: at v0
// the client does, with AddShareAcksToTxn first, and the leader only
// verifies it; at v1 the leader adds it itself, as a transaction version 2
// leader does for Produce v12 (KIP-890), so the client sends no
// AddShareAcksToTxn.
type TxnShareAcknowledgeRequest struct {
	Version         int16
	TransactionalID string
	GroupID         string
	MemberID        string
	MemberEpoch     int32
	ProducerID      int64
	ProducerEpoch   int16
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
	_ kmsg.Request  = (*AddShareAcksToTxnRequest)(nil)
	_ kmsg.Response = (*AddShareAcksToTxnResponse)(nil)
	_ kmsg.Request  = (*TxnShareAcknowledgeRequest)(nil)
	_ kmsg.Response = (*TxnShareAcknowledgeResponse)(nil)
)

// Key returns 96.
func (*AddShareAcksToTxnRequest) Key() int16 { return AddShareAcksToTxnKey }

// MaxVersion returns 0.
func (*AddShareAcksToTxnRequest) MaxVersion() int16 { return 0 }

// SetVersion sets the version to encode.
func (v *AddShareAcksToTxnRequest) SetVersion(version int16) { v.Version = version }

// GetVersion returns the version to encode.
func (v *AddShareAcksToTxnRequest) GetVersion() int16 { return v.Version }

// IsFlexible returns true: the message is flexible from v0.
func (*AddShareAcksToTxnRequest) IsFlexible() bool { return true }

// ResponseKind returns an empty response of the same version.
func (v *AddShareAcksToTxnRequest) ResponseKind() kmsg.Response {
	return &AddShareAcksToTxnResponse{Version: v.Version}
}

// AppendTo appends the request body in wire form.
func (v *AddShareAcksToTxnRequest) AppendTo(dst []byte) []byte {
	dst = kbin.AppendCompactString(dst, v.TransactionalID)
	dst = kbin.AppendInt64(dst, v.ProducerID)
	dst = kbin.AppendInt16(dst, v.ProducerEpoch)
	dst = kbin.AppendCompactString(dst, v.GroupID)
	dst = kbin.AppendCompactArrayLen(dst, len(v.Topics))
	for _, t := range v.Topics {
		dst = kbin.AppendCompactString(dst, t.Name)
		dst = kbin.AppendCompactArrayLen(dst, len(t.Partitions))
		for _, p := range t.Partitions {
			dst = kbin.AppendInt32(dst, p)
		}
		dst = appendTags(dst)
	}
	return appendTags(dst)
}

// ReadFrom decodes a request body; errors wrap ErrMalformed.
func (v *AddShareAcksToTxnRequest) ReadFrom(src []byte) error {
	if err := checkVersion("AddShareAcksToTxnRequest", v.Version, 0); err != nil {
		return err
	}
	r := newReader(src)
	v.TransactionalID = r.CompactString()
	v.ProducerID = r.Int64()
	v.ProducerEpoch = r.Int16()
	v.GroupID = r.CompactString()
	v.Topics = make([]AddShareAcksToTxnTopic, r.arrayLen())
	for i := range v.Topics {
		t := &v.Topics[i]
		t.Name = r.CompactString()
		t.Partitions = make([]int32, r.arrayLen())
		for j := range t.Partitions {
			t.Partitions[j] = r.Int32()
		}
		r.skipTags()
	}
	r.skipTags()
	return r.complete("AddShareAcksToTxnRequest", v.Version)
}

// Key returns 96.
func (*AddShareAcksToTxnResponse) Key() int16 { return AddShareAcksToTxnKey }

// MaxVersion returns 0.
func (*AddShareAcksToTxnResponse) MaxVersion() int16 { return 0 }

// SetVersion sets the version to encode.
func (v *AddShareAcksToTxnResponse) SetVersion(version int16) { v.Version = version }

// GetVersion returns the version to encode.
func (v *AddShareAcksToTxnResponse) GetVersion() int16 { return v.Version }

// IsFlexible returns true: the message is flexible from v0.
func (*AddShareAcksToTxnResponse) IsFlexible() bool { return true }

// RequestKind returns an empty request of the same version.
func (v *AddShareAcksToTxnResponse) RequestKind() kmsg.Request {
	return &AddShareAcksToTxnRequest{Version: v.Version}
}

// Throttle returns the throttle and whether the client throttles after
// the response (KIP-219: it does).
func (v *AddShareAcksToTxnResponse) Throttle() (int32, bool) { return v.ThrottleMillis, true }

// AppendTo appends the response body in wire form.
func (v *AddShareAcksToTxnResponse) AppendTo(dst []byte) []byte {
	dst = kbin.AppendInt32(dst, v.ThrottleMillis)
	dst = kbin.AppendInt16(dst, v.ErrorCode)
	return appendTags(dst)
}

// ReadFrom decodes a response body; errors wrap ErrMalformed.
func (v *AddShareAcksToTxnResponse) ReadFrom(src []byte) error {
	if err := checkVersion("AddShareAcksToTxnResponse", v.Version, 0); err != nil {
		return err
	}
	r := newReader(src)
	v.ThrottleMillis = r.Int32()
	v.ErrorCode = r.Int16()
	r.skipTags()
	return r.complete("AddShareAcksToTxnResponse", v.Version)
}

// Key returns 95.
func (*TxnShareAcknowledgeRequest) Key() int16 { return TxnShareAcknowledgeKey }

// MaxVersion returns 1.
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
	dst = kbin.AppendCompactString(dst, v.TransactionalID)
	dst = kbin.AppendCompactString(dst, v.GroupID)
	dst = kbin.AppendCompactString(dst, v.MemberID)
	dst = kbin.AppendInt32(dst, v.MemberEpoch)
	dst = kbin.AppendInt64(dst, v.ProducerID)
	dst = kbin.AppendInt16(dst, v.ProducerEpoch)
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
				dst = kbin.AppendInt8(dst, int8(b.AcknowledgeType))
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
	v.TransactionalID = r.CompactString()
	v.GroupID = r.CompactString()
	v.MemberID = r.CompactString()
	v.MemberEpoch = r.Int32()
	v.ProducerID = r.Int64()
	v.ProducerEpoch = r.Int16()
	v.Topics = make([]TxnShareAcknowledgeTopic, r.arrayLen())
	for i := range v.Topics {
		t := &v.Topics[i]
		t.TopicID = r.Uuid()
		t.Partitions = make([]TxnShareAcknowledgePartition, r.arrayLen())
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition = r.Int32()
			p.AcknowledgementBatches = make([]AcknowledgementBatch, r.arrayLen())
			for k := range p.AcknowledgementBatches {
				b := &p.AcknowledgementBatches[k]
				b.FirstOffset = r.Int64()
				b.LastOffset = r.Int64()
				b.AcknowledgeType = AckType(r.Int8())
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

// MaxVersion returns 1.
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
