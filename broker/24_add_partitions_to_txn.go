package broker

// AddPartitionsToTxn (key 24).
//
// Versions: 0-5. v0-3 are the client form of TV1, v4-5 the broker form.
// Below v2 PRODUCER_FENCED reads INVALID_PRODUCER_EPOCH; below v5
// TRANSACTION_ABORTABLE reads INVALID_TXN_STATE.
//
// Behaviour:
//   - Client form (v0-3): the producer adds the partitions it is about to
//     write, one transaction per request.
//   - Broker form (v4-5), which partition leaders and group coordinators
//     send (txn_verify.go), batched over transactions: VerifyOnly=false adds
//     the partition for a TV2 producer (produce v12+, TxnOffsetCommit v5+:
//     the broker adds it itself), VerifyOnly=true only checks that a TV1
//     client added it (KIP-890 part 1) and answers TRANSACTION_ABORTABLE for
//     a partition it did not.
//   - Either form is served by the node leading the transactional id's
//     __transaction_state partition after checking that leadership
//     (NOT_COORDINATOR otherwise: KAFKA-21181, which names the verify path
//     and the "already added" shortcut among the stale answers).
//   - Adding starts the transaction and its timeout clock if none is
//     ongoing; partitions already in an ongoing transaction answer at once.
//   - A broker-form add (VerifyOnly=false) after a transaction that ended
//     with EndTxn below v5 at the same epoch is TRANSACTION_ABORTABLE: the
//     leader's add may start a transaction only because transaction
//     version 2 bumps the epoch at every EndTxn.
//   - A wrong producer id is INVALID_PRODUCER_ID_MAPPING, a wrong epoch
//     PRODUCER_FENCED, a prepared transaction CONCURRENT_TRANSACTIONS.
//   - An unknown topic or partition fails the whole transaction:
//     UNKNOWN_TOPIC_OR_PARTITION for it, OPERATION_NOT_ATTEMPTED for the
//     rest, as in Kafka.
//
// Skipped:
//   - authorization;
//   - the cap on the number of transactions in one v4+ request.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 24, min: 0, max: 5, handle: handleAddPartitionsToTxn}) }

func handleAddPartitionsToTxn(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	now := time.Now()
	mapErr := func(err *kerr.Error) int16 {
		switch {
		case err == nil:
			return 0
		case err == kerr.ProducerFenced && req.Version < 2:
			return kerr.InvalidProducerEpoch.Code
		case err == kerr.TransactionAbortable && req.Version < 5:
			return kerr.InvalidTxnState.Code
		}
		return err.Code
	}
	if req.Version < 4 {
		var parts []txnPartition
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				parts = append(parts, txnPartition{t.Topic, p})
			}
		}
		errs := c.addPartitionsToTxn(r.node.id, req.TransactionalID, req.ProducerID, req.ProducerEpoch, parts, false, txnVersionLegacy, now)
		for _, t := range req.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition = p
				rp.ErrorCode = mapErr(errs[txnPartition{t.Topic, p}])
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	}
	for _, tx := range req.Transactions {
		var parts []txnPartition
		for _, t := range tx.Topics {
			for _, p := range t.Partitions {
				parts = append(parts, txnPartition{t.Topic, p})
			}
		}
		errs := c.addPartitionsToTxn(r.node.id, tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, parts, tx.VerifyOnly, txnVersion2, now)
		rtx := kmsg.NewAddPartitionsToTxnResponseTransaction()
		rtx.TransactionalID = tx.TransactionalID
		for _, t := range tx.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
				rp.Partition = p
				rp.ErrorCode = mapErr(errs[txnPartition{t.Topic, p}])
				rt.Partitions = append(rt.Partitions, rp)
			}
			rtx.Topics = append(rtx.Topics, rt)
		}
		resp.Transactions = append(resp.Transactions, rtx)
	}
	return resp, nil
}

// addPartitionsToTxn adds (or, verifyOnly, verifies) the partitions of one
// transaction and returns the error of each; a missing entry is success.
func (c *Cluster) addPartitionsToTxn(node int32, txnID string, pid int64, epoch int16, parts []txnPartition, verifyOnly bool, tv int8, now time.Time) map[txnPartition]*kerr.Error {
	errs := make(map[txnPartition]*kerr.Error, len(parts))
	setAll := func(err *kerr.Error) map[txnPartition]*kerr.Error {
		for _, tp := range parts {
			errs[tp] = err
		}
		return errs
	}
	unknown := false
	for _, tp := range parts {
		if c.partitionOf(tp.topic, tp.partition) == nil {
			unknown = true
		}
	}
	if unknown {
		for _, tp := range parts {
			if c.partitionOf(tp.topic, tp.partition) == nil {
				errs[tp] = kerr.UnknownTopicOrPartition
			} else {
				errs[tp] = kerr.OperationNotAttempted
			}
		}
		return errs
	}
	if txnID == "" {
		return setAll(kerr.InvalidRequest)
	}
	tc := c.coordinators.txn
	sh, err := tc.shardFor(node, txnID)
	if err != nil {
		return setAll(err)
	}
	if !verifyOnly {
		return setAll(tc.addPartitions(sh, txnID, pid, epoch, parts, tv, now))
	}
	verified, err := tc.verifyPartitions(sh, txnID, pid, epoch, parts)
	if err != nil {
		return setAll(err)
	}
	return verified
}
