package broker

// InitProducerId (key 22).
//
// Versions: 0-5. v3 brings KIP-360's producer id and epoch; below v4,
// PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH, as Kafka does for
// clients that predate KIP-588.
//
// Behaviour:
//   - A null transactional id (an idempotent producer) gets a fresh producer
//     id from any node, at epoch 0 (FirstProducerEpoch).
//   - A transactional id is served by the node leading its
//     __transaction_state partition (NOT_COORDINATOR elsewhere): the first
//     call allocates a producer id, later calls bump the epoch.
//   - A KIP-360 call (v3+, with the producer id and epoch the producer
//     holds) bumps it again, is answered again when it retries a bump whose
//     answer was lost, and is PRODUCER_FENCED when another producer took
//     over.
//   - An ongoing transaction is fenced and aborted first (the answer is
//     CONCURRENT_TRANSACTIONS; the retry gets the new epoch), and an
//     exhausted epoch rotates to a new producer id at epoch 0.
//   - A timeout above MaxTransactionTimeout (or not positive) is
//     INVALID_TRANSACTION_TIMEOUT; an empty transactional id, or only one of
//     producer id and epoch set, is INVALID_REQUEST.
//
// Skipped:
//   - v6's two-phase commit (KIP-939), which kmsg does not have;
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 22, min: 0, max: 5, handle: handleInitProducerID}) }

func handleInitProducerID(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	pid, epoch, err := c.initProducerID(r.node.id, req, time.Now())
	if err != nil {
		if err == kerr.ProducerFenced && req.Version < 4 {
			err = kerr.InvalidProducerEpoch
		}
		resp.ErrorCode = err.Code
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = pid, epoch
	return resp, nil
}

func (c *Cluster) initProducerID(node int32, req *kmsg.InitProducerIDRequest, now time.Time) (int64, int16, *kerr.Error) {
	var expect *producerIDAndEpoch
	if req.Version >= 3 {
		switch {
		case req.ProducerID < 0 && req.ProducerEpoch < 0:
		case req.ProducerID < 0 || req.ProducerEpoch < 0:
			return -1, -1, kerr.InvalidRequest
		default:
			expect = &producerIDAndEpoch{id: req.ProducerID, epoch: req.ProducerEpoch}
		}
	}
	if req.TransactionalID == nil {
		return c.allocProducerID(), c.cfg.firstProducerEpoch, nil
	}
	return c.coordinators.txn.initProducerID(node, *req.TransactionalID, req.TransactionTimeoutMillis, expect, now)
}
