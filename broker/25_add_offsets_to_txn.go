package broker

// AddOffsetsToTxn (key 25).
//
// Versions: 0-4. Below v2 PRODUCER_FENCED reads INVALID_PRODUCER_EPOCH.
//
// Behaviour:
//   - Adds the group's __consumer_offsets partition (placed by Java's
//     String.hashCode, as Kafka places it) to the producer's transaction, so
//     that the transaction's markers reach the group coordinator, which then
//     makes the group's transactional offset commits visible or drops them.
//   - Same checks and errors as AddPartitionsToTxn's client form:
//     NOT_COORDINATOR on a node that does not lead the transactional id's
//     __transaction_state partition, INVALID_PRODUCER_ID_MAPPING,
//     PRODUCER_FENCED, CONCURRENT_TRANSACTIONS while the previous
//     transaction is being completed.
//   - TV2 clients do not send it: TxnOffsetCommit v5+ has the group
//     coordinator add the partition.
//
// Skipped:
//   - group authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

func init() { registerAPI(apiSpec{key: 25, min: 0, max: 4, handle: handleAddOffsetsToTxn}) }

func handleAddOffsetsToTxn(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	tp := txnPartition{wire.ConsumerOffsetsTopic, c.CoordinatorPartition(coordinatorGroup, req.Group)}
	errs := c.addPartitionsToTxn(r.node.id, req.TransactionalID, req.ProducerID, req.ProducerEpoch,
		[]txnPartition{tp}, false, txnVersionLegacy, time.Now())
	if err := errs[tp]; err != nil {
		if err == kerr.ProducerFenced && req.Version < 2 {
			err = kerr.InvalidProducerEpoch
		}
		resp.ErrorCode = err.Code
	}
	return resp, nil
}
