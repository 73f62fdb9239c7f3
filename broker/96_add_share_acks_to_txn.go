package broker

// AddShareAcksToTxn (key 96, KIP-1289; the key is provisional).
//
// Versions: 0. Served only while the ShareTxnAPIs option is on.
//
// Behaviour:
//   - The transaction coordinator's half of transactional share
//     acknowledgements; it mirrors AddOffsetsToTxn.
//   - For every (group, topic, partition) of the request it adds the
//     __share_group_state partition that holds that share-partition's state
//     (key "group:topicId:partition", placed by Java's String.hashCode) to
//     the producer's transaction, so that the transaction's markers reach
//     the share coordinator, which commits or releases the acknowledgements
//     staged by TxnShareAcknowledge.
//   - Same checks and errors as AddOffsetsToTxn (NOT_COORDINATOR,
//     INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
//     CONCURRENT_TRANSACTIONS); an unknown topic or partition is
//     UNKNOWN_TOPIC_OR_PARTITION and adds nothing; an empty group id or a
//     request naming no partition is INVALID_REQUEST.
//
// Skipped:
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

func init() {
	registerAPI(apiSpec{key: wire.AddShareAcksToTxnKey, min: 0, max: 0, handle: handleAddShareAcksToTxn, shareTxn: true})
}

func handleAddShareAcksToTxn(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*wire.AddShareAcksToTxnRequest)
	resp := req.ResponseKind().(*wire.AddShareAcksToTxnResponse)
	if err := c.addShareAcksToTxn(r.node.id, req, time.Now()); err != nil {
		resp.ErrorCode = err.Code
	}
	return resp, nil
}

func (c *Cluster) addShareAcksToTxn(node int32, req *wire.AddShareAcksToTxnRequest, now time.Time) *kerr.Error {
	if req.GroupID == "" {
		return kerr.InvalidRequest
	}
	seen := make(map[txnPartition]struct{})
	var parts []txnPartition
	for _, rt := range req.Topics {
		t := c.topics[rt.Name]
		if t == nil {
			return kerr.UnknownTopicOrPartition
		}
		for _, idx := range rt.Partitions {
			if idx < 0 || int(idx) >= len(t.partitions) {
				return kerr.UnknownTopicOrPartition
			}
			tp := txnPartition{wire.ShareGroupStateTopic,
				c.CoordinatorPartition(coordinatorShare, shareStateKey(req.GroupID, t.id, idx))}
			if _, dup := seen[tp]; !dup {
				seen[tp] = struct{}{}
				parts = append(parts, tp)
			}
		}
	}
	if len(parts) == 0 {
		return kerr.InvalidRequest
	}
	errs := c.addPartitionsToTxn(node, req.TransactionalID, req.ProducerID, req.ProducerEpoch, parts, false, txnVersionLegacy, now)
	for _, tp := range parts {
		if err := errs[tp]; err != nil {
			return err
		}
	}
	return nil
}
