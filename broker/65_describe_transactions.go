package broker

// DescribeTransactions (key 65).
//
// Versions: 0.
//
// Behaviour:
//   - For each transactional id: its state (Kafka's names), producer id and
//     epoch, timeout, start time (-1 when no transaction has started) and
//     the partitions of the ongoing or prepared transaction.
//   - Each id is answered only by the node leading its __transaction_state
//     partition, after checking that leadership (NOT_COORDINATOR otherwise,
//     KAFKA-21181); an unknown id is TRANSACTIONAL_ID_NOT_FOUND, an empty
//     one INVALID_REQUEST.
//
// Skipped:
//   - authorization.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 65, min: 0, max: 0, handle: handleDescribeTransactions}) }

func handleDescribeTransactions(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.DescribeTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range req.TransactionalIDs {
		resp.TransactionStates = append(resp.TransactionStates, c.coordinators.txn.describe(r.node.id, id))
	}
	return resp, nil
}

func (tc *txnCoordinator) describe(node int32, id string) kmsg.DescribeTransactionsResponseTransactionState {
	st := kmsg.NewDescribeTransactionsResponseTransactionState()
	st.TransactionalID = id
	st.ProducerID, st.ProducerEpoch, st.StartTimestamp = -1, -1, -1
	if id == "" {
		st.ErrorCode = kerr.InvalidRequest.Code
		return st
	}
	sh, err := tc.shardFor(node, id)
	if err != nil {
		st.ErrorCode = err.Code
		return st
	}
	m := sh.state.txns[id]
	if m == nil {
		st.ErrorCode = kerr.TransactionalIDNotFound.Code
		return st
	}
	st.State = m.state.String()
	st.TimeoutMillis = m.timeoutMs
	st.StartTimestamp = m.startMs
	st.ProducerID, st.ProducerEpoch = m.producerID, m.epoch
	for _, tp := range sortedPartitions(m.partitions) {
		if n := len(st.Topics); n == 0 || st.Topics[n-1].Topic != tp.topic {
			t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
			t.Topic = tp.topic
			st.Topics = append(st.Topics, t)
		}
		t := &st.Topics[len(st.Topics)-1]
		t.Partitions = append(t.Partitions, tp.partition)
	}
	return st
}
