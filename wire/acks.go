package wire

import "github.com/kshare-go/kshare"

// AckType is a KIP-932 acknowledgement type as it travels on the wire:
// the AcknowledgeType of an AcknowledgementBatch. Applications choose
// among kshare.AckAccept, AckRelease and AckReject, whose values are the
// same numbers; GAP and RENEW are sent by the share consumer itself.
type AckType int8

// The acknowledgement types of the protocol. Only Accept, Reject and Gap
// are valid in TxnShareAcknowledge; Release is sent outside the
// transaction, in ShareAcknowledge; Renew extends a lock (KIP-1222) and Gap
// marks offsets without a record.
const (
	AckGap     AckType = 0
	AckAccept  AckType = 1
	AckRelease AckType = 2
	AckReject  AckType = 3
	AckRenew   AckType = 4
)

// String names the type as KIP-932 does ("ACCEPT", ...), or AckType(n)
// for a number KIP-932 does not define. The three an application chooses
// are named by kshare.AckType, whose values are the same numbers.
func (t AckType) String() string {
	switch t {
	case AckGap:
		return "GAP"
	case AckRenew:
		return "RENEW"
	}
	return kshare.AckType(t).String()
}

// Transactional reports whether t may be staged in a transaction: ACCEPT,
// REJECT and the gap marker, as in the draft of KIP-1289
// (TxnShareAcknowledge refuses the others, RELEASE included).
func (t AckType) Transactional() bool {
	return t == AckAccept || t == AckReject || t == AckGap
}
