package broker

// TxnShareAcknowledge (key 95, KIP-1289), in the layout and with the
// semantics of apache/kafka PR #22357 (docs/protocol.md names the commit).
//
// Versions: 0 (the draft's only version). Served only while the
// ShareTxnAPIs option is on (the default).
//
// Behaviour:
//   - Sent to the leader of each data partition. TransactionalId (null is
//     refused), GroupId and MemberId are required, and a transactional
//     producer id and epoch (INVALID_REQUEST). The member must be in the
//     group (UNKNOWN_MEMBER_ID) at its current member epoch: an older epoch
//     is STALE_MEMBER_EPOCH, a newer one FENCED_MEMBER_EPOCH. These errors
//     are set at the top level and on every partition.
//   - Per partition, all or nothing: AcknowledgeTypes holds one type for
//     the whole batch or one per offset; only ACCEPT, REJECT and the gap
//     marker are valid, RELEASE, RENEW and unknown types are refused
//     (INVALID_REQUEST; a release goes in ShareAcknowledge, outside the
//     transaction); every offset must be ACQUIRED by this member under an
//     unexpired lock (INVALID_RECORD_STATE).
//   - The leader adds the partition's __share_group_state partition to the
//     producer's transaction itself, starting the transaction if none is
//     ongoing, as a transaction version 2 leader does for Produce v12
//     (KIP-890 part 2); there is no AddShareAcksToTxn. The coordinator's
//     answers pass through (e.g. PRODUCER_FENCED, INVALID_PRODUCER_EPOCH
//     for a wrong epoch), and what a retry can cure (no coordinator,
//     CONCURRENT_TRANSACTIONS while the previous transaction completes)
//     comes back as NOT_ENOUGH_REPLICAS. After a transaction that ended
//     with EndTxn below v5 (no epoch bump) the coordinator refuses the add
//     at that epoch (INVALID_TXN_STATE), since a late request of the ended
//     transaction would open a new one.
//   - The share coordinator then appends a transactional record of the
//     staged acknowledgements, with the producer's id and epoch, to that
//     partition (INVALID_PRODUCER_EPOCH for an epoch older than the one it
//     has seen), and the records go TX_PENDING: their lock stops, and only a
//     marker on that partition resolves them. A commit marker makes ACCEPT
//     acknowledged and REJECT and gaps archived; an abort marker makes every
//     staged record available again at once (or archived at the delivery
//     limit). A committed REJECT and an abort at the limit write the
//     group's dead-letter record (share_dlq.go), as a REJECT outside a
//     transaction does on Kafka 4.4 (the draft says nothing of the DLQ).
//   - A retry from the same producer id and epoch of a staging already
//     applied (its answer was lost) is answered again as success without a
//     write, also by a leader that took the partition over since (the
//     staging's epoch is in __share_group_state).
//   - NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_ID and
//     UNKNOWN_TOPIC_OR_PARTITION as for ShareAcknowledge.
//
// Skipped:
//   - authorization: the draft checks WRITE on the transactional id
//     (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and READ on the group
//     (GROUP_AUTHORIZATION_FAILED); the bundled broker has no principals
//     and no ACLs (docs/differences.md), so every request is allowed.

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

func init() {
	registerAPI(apiSpec{key: wire.TxnShareAcknowledgeKey, min: 0, max: wire.TxnShareAcknowledgeMaxVersion, handle: handleTxnShareAcknowledge, shareTxn: true})
}

func handleTxnShareAcknowledge(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*wire.TxnShareAcknowledgeRequest)
	resp := req.ResponseKind().(*wire.TxnShareAcknowledgeResponse)
	sc := c.coordinators.share
	now := time.Now()
	top, topMsg := (*kerr.Error)(nil), ""
	switch {
	case req.TransactionalID == "" || req.GroupID == "" || req.MemberID == "":
		top, topMsg = kerr.InvalidRequest, "TransactionalId, GroupId and MemberId are required"
	case req.ProducerID < 0 || req.ProducerEpoch < 0:
		top, topMsg = kerr.InvalidRequest, "a transactional producer id and epoch are required"
	default:
		top, topMsg = sc.checkMemberEpoch(req.GroupID, req.MemberID, req.MemberEpoch)
		// Records a release of the member's ended session still has to
		// reach must not be staged first.
		sc.finishRelease(shareSessionKey{group: req.GroupID, member: req.MemberID, node: r.node.id}, now)
	}
	if top != nil {
		resp.ErrorCode = top.Code
	}
	for _, rt := range req.Topics {
		st := wire.TxnShareAcknowledgeTopicResponse{TopicID: rt.TopicID}
		for _, rp := range rt.Partitions {
			pr := wire.TxnShareAcknowledgePartitionResponse{Partition: rp.Partition}
			err, msg := top, topMsg
			if err == nil {
				err, msg = sc.stageTxnAcks(r.node.id, req, rt.TopicID, rp, now)
			}
			if err != nil {
				setError(&pr.ErrorCode, &pr.ErrorMessage, err, msg)
			}
			st.Partitions = append(st.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// stageTxnAcks stages one partition's acknowledgements in the producer's
// transaction, or nothing of them.
func (sc *shareCoordinator) stageTxnAcks(node int32, req *wire.TxnShareAcknowledgeRequest, topicID [16]byte, rp wire.TxnShareAcknowledgePartition, now time.Time) (*kerr.Error, string) {
	batches := make([]shareAckBatch, 0, len(rp.AcknowledgementBatches))
	for _, b := range rp.AcknowledgementBatches {
		types := make([]int8, len(b.AcknowledgeTypes))
		for i, t := range b.AcknowledgeTypes {
			types[i] = int8(t)
		}
		batches = append(batches, shareAckBatch{first: b.FirstOffset, last: b.LastOffset, types: types})
	}
	acks, perr := parseShareAcks(batches, wire.AckType.Transactional)
	if perr != nil {
		return kerr.InvalidRequest, perr.Error()
	}
	p, err := sc.sharePartitionAt(topicID, rp.Partition, node)
	if err != nil {
		return err, ""
	}
	key := shareKey{group: req.GroupID, topicID: topicID, partition: rp.Partition}
	sp, err := sc.livePartition(key, p, node, now)
	if err != nil {
		return err, ""
	}
	if sp.stagedBy(acks, req.ProducerID, req.ProducerEpoch) {
		return nil, "" // a retry of a staging already applied
	}
	if err, msg := sp.checkHeld(req.MemberID, acks, now); err != nil {
		return err, msg
	}
	statePartition := sc.statePartition(key)
	if err := sc.c.verifyTxnWrite(req.TransactionalID, req.ProducerID, req.ProducerEpoch, statePartition, txnAdd); err != nil {
		if err == kerr.TransactionAbortable {
			err = kerr.InvalidTxnState
		}
		return err, fmt.Sprintf("adding %s-%d to the producer's transaction: %s", statePartition.topic.name, statePartition.index, err.Message)
	}
	v := &shareStateValue{Kind: shareKindStaged, StateEpoch: sp.stateEpoch, Staged: sp.staged(acks)}
	if err := sc.writeState(key, v, req.ProducerID, req.ProducerEpoch, now); err != nil {
		return err, ""
	}
	sp.stage(acks, req.ProducerID, req.ProducerEpoch)
	sc.c.logger.Debug("share acknowledgements staged", "key", key.String(), "producer_id", req.ProducerID, "epoch", req.ProducerEpoch, "batches", len(v.Staged))
	return nil, ""
}
