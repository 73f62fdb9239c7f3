package broker

// Produce (key 0).
//
// Versions: 3-13. v11 brought TRANSACTION_ABORTABLE; from v12 the leader
// adds a transactional batch's partition to the transaction itself (TV2);
// v13 names topics by id.
//
// Behaviour:
//   - Each partition carries exactly one complete record batch of magic 2,
//     as Kafka requires from v3 (anything else, or none, is INVALID_RECORD),
//     CRC-checked (CORRUPT_MESSAGE).
//   - Idempotent and transactional batches get per-producer sequence and
//     epoch checks and retried-batch detection (the last five batches); a
//     producer the partition has no state for may start at any sequence, as
//     in Kafka.
//   - acks 0, 1 and -1 are all the same: there is one replica.
//   - A request with transactional records but no transactional id is
//     refused for every partition with
//     TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers.
//   - The first batch of a transaction at a partition is checked with the
//     transaction coordinator (txn_verify.go): from v12 the leader adds the
//     partition to the transaction, below v12 it only verifies that the
//     client added it (KIP-890 part 1: a partition it did not add is
//     TRANSACTION_ABORTABLE from v11, INVALID_TXN_STATE below); a fenced
//     epoch is INVALID_PRODUCER_EPOCH, as Kafka answers; a coordinator that
//     cannot answer yet is NOT_ENOUGH_REPLICAS. Later batches of that open
//     transaction (same producer id, epoch and transactional id) are not
//     asked about again, as on Kafka.
//   - Clients may not write to internal topics (INVALID_TOPIC_EXCEPTION).
//   - A batch larger than the topic's max.message.bytes (default 1048588,
//     Kafka's message.max.bytes) is MESSAGE_TOO_LARGE for its partition,
//     checked before the CRC as Kafka checks it; the size is the whole
//     batch, its 12-byte log overhead included (topic_limits.go).
//   - An uncompressed batch whose record count (header) differs from the
//     records its bytes frame is INVALID_RECORD, as Kafka's log validator
//     answers; the count moves the end offset, so a lie would make offsets
//     without records (or records sharing one offset).
//   - Past the MaxBytes budget a partition's records are refused with
//     POLICY_VIOLATION and a message naming the budget (docs/broker.md).
//   - Like Kafka, a partition named twice is appended once, with the records
//     given last, and answered once.
//
// Skipped:
//   - quotas;
//   - record-level validation of compressed batches (the broker stores
//     batches as they arrive, so a compressed batch's record count is
//     trusted);
//   - timestamp overrides.

import (
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 0, min: 3, max: 13, handle: handleProduce}) }

func handleProduce(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	now := time.Now()
	var txnID string
	if req.TransactionID != nil {
		txnID = *req.TransactionID
	}
	// Kafka refuses the whole request when transactional records come
	// without a transactional id: it cannot authorize them.
	var refuseAll *kerr.Error
	if req.TransactionID == nil && hasTransactionalRecords(req) {
		refuseAll = kerr.TransactionalIDAuthorizationFailed
	}
	dedupProducePartitions(req)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		t, unknown := c.topicForRequest(req.Version >= 13, rt.Topic, rt.TopicID)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset = -1
			sp.LogAppendTime = -1
			errCode := refuseAll
			if errCode == nil {
				errCode = c.produceOne(r, t, unknown, txnID, req.Version, rp, now, &sp)
			}
			if errCode != nil {
				sp.ErrorCode = errCode.Code
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil // handleFrame drops it for acks=0
}

// dedupProducePartitions rewrites a produce that names a partition twice
// as Kafka reads it: one append, of the records given last, answered once
// (here in the place of the first mention).
func dedupProducePartitions(req *kmsg.ProduceRequest) {
	type key struct {
		name      string
		id        [16]byte
		partition int32
	}
	type at struct{ topic, partition int }
	seen := make(map[key]at)
	dup := false
	for ti, rt := range req.Topics {
		for pi, rp := range rt.Partitions {
			k := key{name: rt.Topic, id: rt.TopicID, partition: rp.Partition}
			if first, ok := seen[k]; ok {
				req.Topics[first.topic].Partitions[first.partition].Records = rp.Records
				dup = true
				continue
			}
			seen[k] = at{ti, pi}
		}
	}
	if !dup {
		return
	}
	kept := make(map[at]bool, len(seen))
	for _, a := range seen {
		kept[a] = true
	}
	topics := req.Topics[:0]
	for ti, rt := range req.Topics {
		parts := rt.Partitions[:0]
		for pi, rp := range rt.Partitions {
			if kept[at{ti, pi}] {
				parts = append(parts, rp)
			}
		}
		if len(parts) > 0 {
			rt.Partitions = parts
			topics = append(topics, rt)
		}
	}
	req.Topics = topics
}

func hasTransactionalRecords(req *kmsg.ProduceRequest) bool {
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if firstBatchTransactional(rp.Records) {
				return true
			}
		}
	}
	return false
}

// topicForRequest finds a topic by id (byID) or name; unknown is the error
// for a missing one.
func (c *Cluster) topicForRequest(byID bool, name string, id [16]byte) (*topic, *kerr.Error) {
	if byID {
		if t := c.topicsByID[id]; t != nil {
			return t, nil
		}
		return nil, kerr.UnknownTopicID
	}
	if t := c.topics[name]; t != nil {
		return t, nil
	}
	return nil, kerr.UnknownTopicOrPartition
}

func (c *Cluster) produceOne(r *request, t *topic, unknown *kerr.Error, txnID string, version int16, rp kmsg.ProduceRequestTopicPartition, now time.Time, sp *kmsg.ProduceResponseTopicPartition) *kerr.Error {
	if t == nil {
		return unknown
	}
	if rp.Partition < 0 || int(rp.Partition) >= len(t.partitions) {
		return kerr.UnknownTopicOrPartition
	}
	p := t.partitions[rp.Partition]
	if err := p.checkLeader(r.node.id, -1); err != nil {
		if err == kerr.NotLeaderForPartition {
			sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = p.leader, p.leaderEpoch
		}
		return err
	}
	if t.internal {
		return kerr.InvalidTopicException
	}
	batches, err := splitBatches(rp.Records, version, t.maxMessageBytes())
	if err != nil {
		var be *errBatch
		if errors.As(err, &be) {
			msg := be.msg
			sp.ErrorMessage = &msg
			return be.code
		}
		return kerr.CorruptMessage
	}
	if err, msg := c.checkBudget(batches); err != nil {
		sp.ErrorMessage = &msg
		return err
	}
	for i, b := range batches {
		if b.txn {
			if txnID == "" {
				return kerr.TransactionalIDNotFound
			}
			if err := c.verifyTransactionalProduce(txnID, b.pid, b.epoch, p, version); err != nil {
				return err
			}
		}
		base, _, kerrCode := p.appendProduced(b, now)
		if kerrCode != nil {
			return kerrCode
		}
		if b.txn {
			// The coordinator vouched for (txnID, pid) when this
			// transaction's first batch came: later batches of it here
			// skip the question only under the same id.
			p.producers[b.pid].txnID = txnID
		}
		if i == 0 {
			sp.BaseOffset = base
		}
	}
	sp.LogStartOffset = p.logStart
	return nil
}

// verifyTransactionalProduce checks a transactional batch with the
// transaction coordinator before it is appended: produce v12+ (TV2) adds
// the partition to the transaction, older versions only verify that the
// client added it (KIP-890 part 1). A fenced producer reads
// INVALID_PRODUCER_EPOCH, never PRODUCER_FENCED, as Kafka's leaders answer
// it; produce v11 brought TRANSACTION_ABORTABLE (KIP-1050), so older
// versions read INVALID_TXN_STATE instead, as Kafka tells them.
//
// As Kafka's leaders do, it asks only for the first batch of a transaction
// at the partition: once the partition holds an open transaction of this
// producer id and epoch, begun by a batch the coordinator of the same
// transactional id vouched for, the coordinator has the partition in it,
// and its marker closes it at the partition before the producer can start
// another (transaction version 2 bumps the epoch at every EndTxn; a version
// 1 producer waits for the markers before it adds partitions again). A
// batch naming another transactional id is asked about, and refused.
func (c *Cluster) verifyTransactionalProduce(txnID string, pid int64, epoch int16, p *partition, version int16) *kerr.Error {
	if ps := p.producers[pid]; ps != nil && ps.txnFirst >= 0 && ps.epoch == epoch && ps.txnID == txnID {
		return nil
	}
	join := txnVerifyOnly
	if version >= 12 {
		join = txnAdd
	}
	switch err := c.verifyTxnWrite(txnID, pid, epoch, p, join); {
	case err == kerr.ProducerFenced:
		return kerr.InvalidProducerEpoch
	case err == kerr.TransactionAbortable && version < 11:
		return kerr.InvalidTxnState
	default:
		return err
	}
}
