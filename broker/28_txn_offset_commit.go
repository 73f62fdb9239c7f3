package broker

// TxnOffsetCommit (key 28).
//
// Versions: 0-6. v3 brings member and generation, v4 TRANSACTION_ABORTABLE
// (KIP-1050), v5 transaction version 2 (the request does AddOffsetsToTxn's
// job), v6 topic ids and GROUP_ID_NOT_FOUND for a missing group.
//
// Behaviour:
//   - Commits offsets inside a transaction, at the group's coordinator
//     (NOT_COORDINATOR from any other node).
//   - The group and member are checked as for OffsetCommit, except that a
//     commit without member and generation (v0-2 carry neither) is accepted
//     while the group has members, and a rebalance awaiting its leader does
//     not refuse it; v3+ check the member (UNKNOWN_MEMBER_ID,
//     FENCED_INSTANCE_ID) and generation (ILLEGAL_GENERATION; a missing
//     group is GROUP_ID_NOT_FOUND from v6).
//   - A KIP-848 consumer group is checked as for OffsetCommit with the
//     member epoch as the generation (any version: a transactional commit is
//     exempt from OffsetCommit's v9 rule), so a consumer's
//     consume-transform-produce commits its group's offsets in the
//     transaction.
//   - Then the transaction coordinator of the transactional id is asked,
//     through the same AddPartitionsToTxn handler (broker form) the network
//     uses (txn_verify.go), to add the group's __consumer_offsets partition
//     to the producer's transaction (v5+) or to verify that AddOffsetsToTxn
//     added it (v0-4). Its answer (e.g. INVALID_PRODUCER_EPOCH,
//     PRODUCER_FENCED, INVALID_TXN_STATE) becomes every partition's error,
//     and a coordinator that cannot answer COORDINATOR_NOT_AVAILABLE. As
//     Kafka's partition verification maps them, PRODUCER_FENCED reads
//     INVALID_PRODUCER_EPOCH for every version (clients expect that from a
//     partition), and TRANSACTION_ABORTABLE reads INVALID_TXN_STATE for
//     v0-3.
//   - The offsets are written as one transactional batch with the producer's
//     id and epoch and stay invisible (OffsetFetch answers the previous
//     offset, or UNSTABLE_OFFSET_COMMIT with RequireStable) until the
//     transaction's COMMIT marker lands on that partition; ABORT discards
//     them.
//   - v6 names topics by id (UNKNOWN_TOPIC_ID).
//   - Past the MaxBytes budget nothing is written and every valid partition
//     gets INVALID_COMMIT_OFFSET_SIZE, as OffsetCommit answers.
//
// Skipped:
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 28, min: 0, max: 6, handle: handleTxnOffsetCommit}) }

func handleTxnOffsetCommit(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.TxnOffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	g := c.coordinators.group
	now := time.Now()
	byID := req.Version >= 6

	who := offsetCommitter{
		memberID:      req.MemberID,
		instanceID:    req.InstanceID,
		generation:    req.Generation,
		transactional: true,
		version:       req.Version,
	}
	st, groupErr := g.commitShard(r.node.id, req.Group, who)
	var writes []offsetWrite
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			w := c.newOffsetWrite(byID, rt.Topic, rt.TopicID, rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, now)
			if groupErr == nil {
				g.checkCommitPartition(st, req.Group, who, &w)
			}
			writes = append(writes, w)
		}
	}
	if groupErr == nil && anyValid(writes) {
		partition := c.CoordinatorPartition(coordinatorGroup, req.Group)
		join := txnVerifyOnly
		if req.Version >= 5 {
			join = txnAdd
		}
		groupErr = g.addOffsetsToTxn(req.TransactionalID, req.ProducerID, req.ProducerEpoch, partition, join)
		switch {
		case groupErr == kerr.ProducerFenced:
			groupErr = kerr.InvalidProducerEpoch
		case groupErr == kerr.TransactionAbortable && req.Version < 4:
			groupErr = kerr.InvalidTxnState
		}
	}
	if groupErr != nil {
		for i := range writes {
			writes[i].err = groupErr
		}
	} else {
		g.writeOffsets(st, req.Group, writes, req.ProducerID, req.ProducerEpoch, now)
	}
	i := 0
	for _, rt := range req.Topics {
		st := kmsg.NewTxnOffsetCommitResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			sp.Partition = rp.Partition
			if err := writes[i].err; err != nil {
				sp.ErrorCode = err.Code
			}
			i++
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

func anyValid(writes []offsetWrite) bool {
	for _, w := range writes {
		if w.err == nil {
			return true
		}
	}
	return false
}
