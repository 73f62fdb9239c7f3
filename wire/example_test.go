package wire_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/wire"
)

// The KIP-1289 messages encode and decode like any kmsg message; bytes
// that do not decode fail with ErrMalformed.
func ExampleTxnShareAcknowledgeRequest() {
	req := &wire.TxnShareAcknowledgeRequest{
		TransactionalID: "ctp-worker-0",
		GroupID:         "ctp",
		ProducerID:      4000,
		ProducerEpoch:   7,
		MemberID:        "member-1",
		MemberEpoch:     3,
		Topics: []wire.TxnShareAcknowledgeTopic{{
			TopicID: [16]byte{1},
			Partitions: []wire.TxnShareAcknowledgePartition{{
				Partition:              0,
				AcknowledgementBatches: []wire.TxnShareAcknowledgeBatch{{FirstOffset: 10, LastOffset: 12, AcknowledgeTypes: []wire.AckType{wire.AckAccept}}},
			}},
		}},
	}
	raw := req.AppendTo(nil)

	got := wire.RequestForKey(wire.TxnShareAcknowledgeKey).(*wire.TxnShareAcknowledgeRequest)
	if err := got.ReadFrom(raw); err != nil {
		fmt.Println(err)
		return
	}
	b := got.Topics[0].Partitions[0].AcknowledgementBatches[0]
	fmt.Println(wire.NameForKey(got.Key()), got.MemberID, got.ProducerEpoch, b.FirstOffset, b.LastOffset, b.AcknowledgeTypes)

	err := got.ReadFrom(raw[:len(raw)-3])
	fmt.Println(errors.Is(err, wire.ErrMalformed))
	// Output:
	// TxnShareAcknowledge member-1 7 10 12 [ACCEPT]
	// true
}

// Every acknowledgement type has its KIP-932 name; the three an
// application chooses are kshare's, with the same numbers.
func ExampleAckType() {
	var names []string
	for t := wire.AckGap; t <= wire.AckRenew+1; t++ {
		names = append(names, t.String())
	}
	fmt.Println(strings.Join(names, " "))
	fmt.Println(wire.AckType(kshare.AckReject), wire.AckType(kshare.AckReject).Transactional(), wire.AckRelease.Transactional())
	// Output:
	// GAP ACCEPT RELEASE REJECT RENEW AckType(5)
	// REJECT true false
}
