package wire_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kshare-go/kshare/wire"
)

// The expected bytes below are written out by hand from the field list of
// TxnShareAcknowledgeRequest.json and TxnShareAcknowledgeResponse.json in
// apache/kafka PR #22357 (Shekharrajak/kafka, branch
// kip-1289-txn-ack-share-groups, commit
// d4ddb080f4f54674451c5eca75564793062f1762), not by calling the encoder:
// both messages are flexible from v0, so strings are compact (uvarint of
// length+1, then the bytes; a null nullable string is 0x00), arrays are
// compact (uvarint of count+1, then the elements), and every struct,
// including the top level, ends with a tagged-field section, here empty
// (0x00).

// goldenTxnShareAckRequest is one request of every field:
//
//	TransactionalId "tx", GroupId "g", ProducerId 4000, ProducerEpoch 7,
//	MemberId "m1", MemberEpoch 3,
//	Topics[{TopicId 01..10, Partitions[{PartitionIndex 2,
//	  AcknowledgementBatches[
//	    {FirstOffset 10, LastOffset 12, AcknowledgeTypes [ACCEPT]},
//	    {FirstOffset 13, LastOffset 14, AcknowledgeTypes [REJECT, GAP]}]}]}]
var goldenTxnShareAckRequest = []byte{
	0x03, 't', 'x', // TransactionalId: nullable compact string, len 2 -> 3
	0x02, 'g', // GroupId: compact string, len 1 -> 2
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f, 0xa0, // ProducerId int64 4000
	0x00, 0x07, // ProducerEpoch int16 7
	0x03, 'm', '1', // MemberId: compact string, len 2 -> 3
	0x00, 0x00, 0x00, 0x03, // MemberEpoch int32 3
	0x02,                                           // Topics: compact array, 1 -> 2
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // TopicId uuid
	0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10,
	0x02,                   // Partitions: 1 -> 2
	0x00, 0x00, 0x00, 0x02, // PartitionIndex int32 2
	0x03,                                           // AcknowledgementBatches: 2 -> 3
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, // FirstOffset 10
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, // LastOffset 12
	0x02, 0x01, // AcknowledgeTypes []int8: 1 -> 2, ACCEPT
	0x00,                                           // batch tags
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0d, // FirstOffset 13
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, // LastOffset 14
	0x03, 0x03, 0x00, // AcknowledgeTypes: 2 -> 3, REJECT, GAP
	0x00, // batch tags
	0x00, // partition tags
	0x00, // topic tags
	0x00, // request tags
}

func goldenRequest() *wire.TxnShareAcknowledgeRequest {
	return &wire.TxnShareAcknowledgeRequest{
		TransactionalID: "tx",
		GroupID:         "g",
		ProducerID:      4000,
		ProducerEpoch:   7,
		MemberID:        "m1",
		MemberEpoch:     3,
		Topics: []wire.TxnShareAcknowledgeTopic{{
			TopicID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			Partitions: []wire.TxnShareAcknowledgePartition{{
				Partition: 2,
				AcknowledgementBatches: []wire.TxnShareAcknowledgeBatch{
					{FirstOffset: 10, LastOffset: 12, AcknowledgeTypes: []wire.AckType{wire.AckAccept}},
					{FirstOffset: 13, LastOffset: 14, AcknowledgeTypes: []wire.AckType{wire.AckReject, wire.AckGap}},
				},
			}},
		}},
	}
}

func TestTxnShareAcknowledgeRequestGolden(t *testing.T) {
	got := goldenRequest().AppendTo(nil)
	if !bytes.Equal(got, goldenTxnShareAckRequest) {
		t.Fatalf("encoded\n%x\nwant the draft's layout\n%x", got, goldenTxnShareAckRequest)
	}
	var dec wire.TxnShareAcknowledgeRequest
	if err := dec.ReadFrom(goldenTxnShareAckRequest); err != nil {
		t.Fatal(err)
	}
	if again := dec.AppendTo(nil); !bytes.Equal(again, goldenTxnShareAckRequest) {
		t.Fatalf("decoded and encoded again\n%x", again)
	}
	b := dec.Topics[0].Partitions[0].AcknowledgementBatches[1]
	if dec.MemberID != "m1" || dec.ProducerID != 4000 || len(b.AcknowledgeTypes) != 2 || b.AcknowledgeTypes[1] != wire.AckGap {
		t.Fatalf("decoded %+v", dec)
	}
}

// A null TransactionalId (0x00) decodes as "", which brokers refuse.
func TestTxnShareAcknowledgeRequestNullTransactionalID(t *testing.T) {
	raw := append([]byte{0x00}, goldenTxnShareAckRequest[3:]...)
	var dec wire.TxnShareAcknowledgeRequest
	if err := dec.ReadFrom(raw); err != nil {
		t.Fatal(err)
	}
	if dec.TransactionalID != "" || dec.GroupID != "g" {
		t.Fatalf("decoded %+v", dec)
	}
}

// goldenTxnShareAckResponse: ThrottleTimeMs 5, ErrorCode 0,
// Responses[{TopicId 01..10, Partitions[{PartitionIndex 2, ErrorCode 42,
// ErrorMessage "no"}, {PartitionIndex 3, ErrorCode 0, ErrorMessage null}]}].
var goldenTxnShareAckResponse = []byte{
	0x00, 0x00, 0x00, 0x05, // ThrottleTimeMs int32 5
	0x00, 0x00, // ErrorCode int16 0
	0x02,                                           // Responses: 1 -> 2
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // TopicId
	0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10,
	0x03,                   // Partitions: 2 -> 3
	0x00, 0x00, 0x00, 0x02, // PartitionIndex 2
	0x00, 0x2a, // ErrorCode 42
	0x03, 'n', 'o', // ErrorMessage: nullable compact string "no"
	0x00,                   // partition tags
	0x00, 0x00, 0x00, 0x03, // PartitionIndex 3
	0x00, 0x00, // ErrorCode 0
	0x00, // ErrorMessage null
	0x00, // partition tags
	0x00, // topic tags
	0x00, // response tags
}

func TestTxnShareAcknowledgeResponseGolden(t *testing.T) {
	msg := "no"
	resp := &wire.TxnShareAcknowledgeResponse{
		ThrottleMillis: 5,
		Topics: []wire.TxnShareAcknowledgeTopicResponse{{
			TopicID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			Partitions: []wire.TxnShareAcknowledgePartitionResponse{
				{Partition: 2, ErrorCode: 42, ErrorMessage: &msg},
				{Partition: 3},
			},
		}},
	}
	if got := resp.AppendTo(nil); !bytes.Equal(got, goldenTxnShareAckResponse) {
		t.Fatalf("encoded\n%x\nwant\n%x", got, goldenTxnShareAckResponse)
	}
	var dec wire.TxnShareAcknowledgeResponse
	if err := dec.ReadFrom(goldenTxnShareAckResponse); err != nil {
		t.Fatal(err)
	}
	if p := dec.Topics[0].Partitions; len(p) != 2 || p[0].ErrorCode != 42 || *p[0].ErrorMessage != "no" || p[1].ErrorMessage != nil {
		t.Fatalf("decoded %+v", dec)
	}
}

// Only v0 exists; truncated bytes are malformed, never a panic.
func TestTxnShareAcknowledgeRequestMalformed(t *testing.T) {
	v1 := wire.TxnShareAcknowledgeRequest{Version: 1}
	if err := v1.ReadFrom(goldenTxnShareAckRequest); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("v1: %v", err)
	}
	for n := range goldenTxnShareAckRequest {
		var dec wire.TxnShareAcknowledgeRequest
		if err := dec.ReadFrom(goldenTxnShareAckRequest[:n]); !errors.Is(err, wire.ErrMalformed) {
			t.Fatalf("%d of %d bytes: %v", n, len(goldenTxnShareAckRequest), err)
		}
	}
}
