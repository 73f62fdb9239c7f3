package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Before a partition leader appends transactional records (Produce,
// TxnShareAcknowledge) and before a group coordinator writes transactional
// offsets (TxnOffsetCommit), it asks the transaction coordinator about the
// partition it writes to, through the same AddPartitionsToTxn handler
// clients use (broker form, v5; 24_add_partitions_to_txn.go): the
// coordinator answers for the producer's id, epoch and transaction state.

// txnJoin says what a broker-side AddPartitionsToTxn asks of the
// transaction coordinator.
type txnJoin int8

const (
	// txnAdd adds the partition to the producer's transaction, starting
	// one if none is ongoing: transaction version 2 clients send no
	// AddPartitionsToTxn or AddOffsetsToTxn of their own (Produce v12+,
	// TxnOffsetCommit v5+).
	txnAdd txnJoin = iota
	// txnVerifyOnly only checks that the partition is already in the
	// ongoing transaction, which the client asked for first with
	// AddPartitionsToTxn or AddOffsetsToTxn (KIP-890 part 1). A partition that is not answers TRANSACTION_ABORTABLE.
	txnVerifyOnly
)

// askTxnCoordinator sends one broker-side AddPartitionsToTxn for
// topic/partition to the coordinator of txnID and returns its answer for
// that partition (nil: added or verified). unavailable reports that no
// coordinator answered: it was unreachable, or answered NOT_COORDINATOR,
// COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS; each caller
// turns that into the retriable error its own clients retry.
func (c *Cluster) askTxnCoordinator(txnID string, pid int64, epoch int16, topic string, partition int32, join txnJoin) (err *kerr.Error, unavailable bool) {
	cp := c.coordinatorPartitionFor(coordinatorTxn, txnID)
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 5
	tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
	tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch = txnID, pid, epoch
	tx.VerifyOnly = join == txnVerifyOnly
	tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
	tt.Topic = topic
	tt.Partitions = []int32{partition}
	tx.Topics = append(tx.Topics, tt)
	req.Transactions = append(req.Transactions, tx)
	raw, rerr := c.internalRequest(cp.leader, req)
	if rerr != nil {
		c.logger.Warn("transaction coordinator unreachable", "transactional_id", txnID, "topic", topic, "partition", partition, "err", rerr)
		return nil, true
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
	switch err := kerr.TypedErrorForCode(code); err {
	case kerr.NotCoordinator, kerr.CoordinatorNotAvailable, kerr.CoordinatorLoadInProgress:
		return err, true
	default:
		return err, false
	}
}

// verifyTxnWrite is a partition leader's check before it appends
// transactional records to p. Whatever a retry can cure (no coordinator
// answered, CONCURRENT_TRANSACTIONS while the previous transaction
// completes) comes back as NOT_ENOUGH_REPLICAS, which every client
// retries; the coordinator's other errors pass through.
func (c *Cluster) verifyTxnWrite(txnID string, pid int64, epoch int16, p *partition, join txnJoin) *kerr.Error {
	err, unavailable := c.askTxnCoordinator(txnID, pid, epoch, p.topic.name, p.index, join)
	if unavailable || err == kerr.ConcurrentTransactions {
		return kerr.NotEnoughReplicas
	}
	return err
}
