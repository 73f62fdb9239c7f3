package broker

// EndTxn (key 26).
//
// Versions: 0-5. v0-4 are TV1, v5 is TV2 (KIP-890 part 2). Below v2
// PRODUCER_FENCED reads INVALID_PRODUCER_EPOCH (pre KIP-588).
//
// Behaviour:
//   - Served by the node leading the transactional id's __transaction_state
//     partition, after checking that leadership (NOT_COORDINATOR otherwise,
//     KAFKA-21181; the LegacyStaleCoordinator debug switch lets a former
//     leader answer from its cache for a while, which reproduces the bug).
//   - TV2 (v5): the epoch is bumped before the markers, the answer carries
//     the producer id and epoch to continue with (a new id at epoch 0 once
//     the epoch is exhausted), and the retry rules of txn_transitions.go
//     apply.
//   - TV1 (v0-4): no bump, strict epoch equality, markers at the current
//     epoch.
//   - Markers are written through WriteTxnMarkers before the answer, so a
//     successful EndTxn is visible to read_committed consumers at once
//     (unless a leader refused or failed, in which case the coordinator
//     retries in the background).
//
// Skipped:
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 26, min: 0, max: 5, handle: handleEndTxn}) }

func handleEndTxn(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	pid, epoch, err := c.coordinators.txn.endTxn(r.node.id, req.TransactionalID, req.ProducerID, req.ProducerEpoch,
		req.Commit, req.Version >= 5, time.Now())
	if err != nil {
		if err == kerr.ProducerFenced && req.Version < 2 {
			err = kerr.InvalidProducerEpoch
		}
		resp.ErrorCode = err.Code
		return resp, nil
	}
	if req.Version >= 5 {
		resp.ProducerID, resp.ProducerEpoch = pid, epoch
	}
	return resp, nil
}
