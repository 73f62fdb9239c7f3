package wire

import (
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// TxnShareAcknowledgeKey is the API key of TxnShareAcknowledge (KIP-1289),
// flexible from version 0: it stages share acknowledgements inside a
// transaction at the share-partition leader of each data partition. It is
// the key apache/kafka PR #22357 assigns; KIP-1289 has no other message
// (no AddShareAcksToTxn: the leader adds the share state partition to the
// transaction itself).
const TxnShareAcknowledgeKey int16 = 95

// TxnShareAcknowledgeMaxVersion is the newest TxnShareAcknowledge version:
// 0, the draft's only one.
const TxnShareAcknowledgeMaxVersion int16 = 0

// ShareVersionFeature is the finalized feature that gates the KIP-1289 APIs,
// and MinShareVersionForTxnAcks the level it must reach: a broker that
// advertises key 95 but finalizes share.version below 3 has not turned
// transactional acknowledgements on. In the draft's ShareVersion, level 3
// (KIP-1289) comes after level 2 (the share-group DLQ, KIP-1191), and
// every level enables what the levels below it do.
const (
	ShareVersionFeature        = "share.version"
	MinShareVersionForTxnAcks  = 3
	TransactionVersionFeature  = "transaction.version"
	ShareGroupStateTopic       = "__share_group_state"
	TransactionStateTopic      = "__transaction_state"
	ConsumerOffsetsTopic       = "__consumer_offsets"
	transactionVersionTV2Level = 2
)

// MinTransactionVersionForTV2 is the finalized transaction.version at which a
// broker runs KIP-890 part 2 transactions (epoch bump on every EndTxn, no
// client AddPartitionsToTxn).
const MinTransactionVersionForTV2 = transactionVersionTV2Level

// RequestForKey returns an empty request of the given key: the KIP-1289
// key first, then everything kmsg knows. It returns nil for an unknown key.
func RequestForKey(key int16) kmsg.Request {
	if key == TxnShareAcknowledgeKey {
		return new(TxnShareAcknowledgeRequest)
	}
	return kmsg.RequestForKey(key)
}

// NameForKey names a key, including the KIP-1289 key.
func NameForKey(key int16) string {
	if key == TxnShareAcknowledgeKey {
		return "TxnShareAcknowledge"
	}
	return kmsg.NameForKey(key)
}

// KgoMaxVersions returns the API versions a kgo client must be allowed to
// send for KIP-1289: kgo's stable set (kversion.Stable, kgo's default
// kgo.MaxVersions) plus the KIP-1289 key, which kgo refuses to send
// otherwise. kshare's producer and acknowledger build their clients with
// kgo.MaxVersions(wire.KgoMaxVersions()); a kgo user who sends key 95 does
// the same.
func KgoMaxVersions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(TxnShareAcknowledgeKey, TxnShareAcknowledgeMaxVersion)
	return v
}
