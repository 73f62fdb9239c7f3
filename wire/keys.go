package wire

import (
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// API keys of the KIP-1289 messages. Both are flexible from version 0.
const (
	// TxnShareAcknowledgeKey stages share acknowledgements inside a
	// transaction at the share-partition leader of each data partition.
	TxnShareAcknowledgeKey int16 = 95
	// AddShareAcksToTxnKey adds the __share_group_state partitions of a
	// group's acknowledged partitions to a transaction, at the transaction
	// coordinator.
	AddShareAcksToTxnKey int16 = 96
)

// TxnShareAcknowledgeMaxVersion is the newest TxnShareAcknowledge version:
// 1, at which the partition leader adds the share state partition to the
// transaction itself (the client sends no AddShareAcksToTxn). Version 0
// needs AddShareAcksToTxn first.
const TxnShareAcknowledgeMaxVersion int16 = 1

// ShareVersionFeature is the finalized feature that gates the KIP-1289 APIs,
// and MinShareVersionForTxnAcks the level it must reach: a broker that
// advertises both keys but finalizes share.version below 3 has not turned
// transactional acknowledgements on.
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

// RequestForKey returns an empty request of the given key: the two KIP-1289
// keys first, then everything kmsg knows. It returns nil for an unknown key.
func RequestForKey(key int16) kmsg.Request {
	switch key {
	case TxnShareAcknowledgeKey:
		return new(TxnShareAcknowledgeRequest)
	case AddShareAcksToTxnKey:
		return new(AddShareAcksToTxnRequest)
	}
	return kmsg.RequestForKey(key)
}

// NameForKey names a key, including the two KIP-1289 keys.
func NameForKey(key int16) string {
	switch key {
	case TxnShareAcknowledgeKey:
		return "TxnShareAcknowledge"
	case AddShareAcksToTxnKey:
		return "AddShareAcksToTxn"
	}
	return kmsg.NameForKey(key)
}

// KgoMaxVersions returns the API versions a kgo client must be allowed to
// send for KIP-1289: kgo's stable set (kversion.Stable, kgo's default
// kgo.MaxVersions) plus the two KIP-1289 keys, which kgo refuses to send
// otherwise. kshare's producer and acknowledger build their clients with
// kgo.MaxVersions(wire.KgoMaxVersions()); a kgo user who sends keys 95
// and 96 does the same.
func KgoMaxVersions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(TxnShareAcknowledgeKey, TxnShareAcknowledgeMaxVersion)
	v.SetMaxKeyVersion(AddShareAcksToTxnKey, 0)
	return v
}
