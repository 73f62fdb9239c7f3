package broker

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// verifyTransactionalProduce asks the transaction coordinator of txnID,
// through the same AddPartitionsToTxn handler clients use (broker form, v5),
// to add p to the producer's transaction (produce v12+, TV2) or to confirm
// the client already added it (older produce versions, KIP-890 part 1).
// Coordinator errors that a retry can cure come back as
// NOT_ENOUGH_REPLICAS, which every client retries; the rest pass through.
func (c *Cluster) verifyTransactionalProduce(txnID string, pid int64, epoch int16, p *partition, produceVersion int16) *kerr.Error {
	cp := c.coordinatorPartitionFor(coordinatorTxn, txnID)
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 5
	tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
	tx.TransactionalID = txnID
	tx.ProducerID = pid
	tx.ProducerEpoch = epoch
	tx.VerifyOnly = produceVersion < 12
	tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
	tt.Topic = p.topic.name
	tt.Partitions = []int32{p.index}
	tx.Topics = append(tx.Topics, tt)
	req.Transactions = append(req.Transactions, tx)
	raw, err := c.internalRequest(cp.leader, req)
	if err != nil {
		c.logger.Warn("transaction verification failed", "transactional_id", txnID, "err", err)
		return kerr.NotEnoughReplicas
	}
	resp := raw.(*kmsg.AddPartitionsToTxnResponse)
	code := resp.ErrorCode
	for _, rt := range resp.Transactions {
		for _, rtt := range rt.Topics {
			for _, rp := range rtt.Partitions {
				if rp.ErrorCode != 0 {
					code = rp.ErrorCode
				}
			}
		}
	}
	switch kerrCode := kerr.ErrorForCode(code); {
	case kerrCode == nil:
		return nil
	case produceVersion < 11 && errors.Is(kerrCode, kerr.TransactionAbortable):
		// Produce v11 brought TRANSACTION_ABORTABLE (KIP-1050); older
		// clients get INVALID_TXN_STATE, as Kafka tells them.
		return kerr.InvalidTxnState
	case errors.Is(kerrCode, kerr.NotCoordinator), errors.Is(kerrCode, kerr.CoordinatorNotAvailable),
		errors.Is(kerrCode, kerr.CoordinatorLoadInProgress), errors.Is(kerrCode, kerr.ConcurrentTransactions):
		return kerr.NotEnoughReplicas
	default:
		var ke *kerr.Error
		if errors.As(kerrCode, &ke) {
			return ke
		}
		return kerr.UnknownServerError
	}
}
