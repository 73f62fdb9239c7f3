package differential_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Request versions the scenarios pin, so that both targets get the same
// request even where their highest versions differ. Each is served by the
// real Kafka 4.4 and by the bundled broker.
const (
	vMetadata        = 12 // names and topic ids, no top-level error (v13)
	vCreateTopics    = 7
	vDeleteTopics    = 6
	vProduce         = 11 // idempotent and TV1 transactional produce
	vProduceTV2      = 12 // the leader adds the partition to the transaction
	vFetch           = 12 // the last version that names topics
	vFetchByID       = 13
	vListOffsets     = 9
	vFindCoordinator = 3 // the single-key form
	vFindBatched     = 6 // the batched form, with share keys
	vInitProducerID  = 5
	vEndTxnTV1       = 4
	vEndTxnTV2       = 5
	vAddPartitions   = 3
	vAddOffsets      = 4
	vTxnOffsetTV1    = 4
	vTxnOffsetTV2    = 5
	vOffsetFetch     = 8 // the first batched version, with RequireStable
	vDescribeProds   = 0
	vDescribeTxns    = 0
	vListTxns        = 2
	vApiVersions     = 3
	vDescribeConfigs = 4
	vIncrAlter       = 1
	vShareHeartbeat  = 1
	vShareFetch      = 1
	vShareAck        = 1
)

// createTopic creates a topic with replication factor 1 and waits until
// every partition has a leader; it returns the topic id.
func (tg *target) createTopic(ctx context.Context, topic string, partitions int32) [16]byte {
	tg.t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp := tg.send(ctx, vCreateTopics, req).(*kmsg.CreateTopicsResponse)
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		tg.t.Fatalf("%s: create topic %s: %+v", tg.kind, topic, resp.Topics)
	}
	return tg.waitTopic(ctx, topic, partitions)
}

// waitTopic waits until the metadata shows topic with partitions led
// partitions and returns its id.
func (tg *target) waitTopic(ctx context.Context, topic string, partitions int32) [16]byte {
	tg.t.Helper()
	var id [16]byte
	tg.retry(ctx, "wait for topic "+topic, func() error {
		st := tg.metadataTopic(ctx, topic, false)
		if st.ErrorCode != 0 {
			return codeErr(st.ErrorCode)
		}
		if int32(len(st.Partitions)) != partitions {
			return fmt.Errorf("%d of %d partitions", len(st.Partitions), partitions)
		}
		for _, p := range st.Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 {
				return fmt.Errorf("partition %d: %s, leader %d", p.Partition, errName(p.ErrorCode), p.Leader)
			}
		}
		id = st.TopicID
		return nil
	})
	// The leader may learn of its new partition a moment after the
	// metadata shows it; a listing of its offsets proves it serves it.
	for p := int32(0); p < partitions; p++ {
		tg.retry(ctx, fmt.Sprintf("wait for %s/%d to be served", topic, p), func() error {
			return codeErr(tg.listOffset(ctx, topic, p, -1, 0, -1).ErrorCode)
		})
	}
	return id
}

// metadataTopic asks for one topic by name.
func (tg *target) metadataTopic(ctx context.Context, topic string, autoCreate bool) kmsg.MetadataResponseTopic {
	tg.t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = autoCreate
	resp := tg.send(ctx, vMetadata, req).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 {
		tg.t.Fatalf("%s: metadata for %s returned %d topics", tg.kind, topic, len(resp.Topics))
	}
	return resp.Topics[0]
}

// produce sends one partition's records at version with acks=-1 and
// returns the partition's answer.
func (tg *target) produce(ctx context.Context, version int16, txnID *string, acks int16, topic string, partition int32, records []byte) kmsg.ProduceResponseTopicPartition {
	tg.t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.TransactionID = txnID
	req.Acks = acks
	req.TimeoutMillis = 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := tg.send(ctx, version, req).(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		tg.t.Fatalf("%s: produce to %s/%d: %d topics in the response", tg.kind, topic, partition, len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0]
}

// produceResult records a produce answer: error and base offset.
func produceResult(p kmsg.ProduceResponseTopicPartition) string {
	if p.ErrorCode != 0 {
		return errName(p.ErrorCode)
	}
	return fmt.Sprintf("OK base=%d", p.BaseOffset)
}

// mustProduce produces a batch that has to succeed (setup).
func (tg *target) mustProduce(ctx context.Context, version int16, txnID *string, topic string, partition int32, b batch) int64 {
	tg.t.Helper()
	p := tg.produce(ctx, version, txnID, -1, topic, partition, b.encode())
	if p.ErrorCode != 0 {
		tg.t.Fatalf("%s: produce to %s/%d: %s", tg.kind, topic, partition, errName(p.ErrorCode))
	}
	return p.BaseOffset
}

// fetchOpts tunes a fetch; the zero value is a read_uncommitted fetch
// without a current leader epoch (-1).
type fetchOpts struct {
	readCommitted bool
	// withEpoch sends leaderEpoch as the client's current leader epoch.
	withEpoch   bool
	leaderEpoch int32
}

// fetch fetches one partition by name (v12) at offset, without waiting.
func (tg *target) fetch(ctx context.Context, topic string, partition int32, offset int64, o fetchOpts) (*kmsg.FetchResponse, kmsg.FetchResponseTopicPartition) {
	tg.t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = 1 << 20
	if o.readCommitted {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = partition
	rp.FetchOffset = offset
	rp.PartitionMaxBytes = 1 << 20
	rp.CurrentLeaderEpoch = -1
	if o.withEpoch {
		rp.CurrentLeaderEpoch = o.leaderEpoch
	}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := tg.send(ctx, vFetch, req).(*kmsg.FetchResponse)
	if resp.ErrorCode != 0 {
		return resp, kmsg.FetchResponseTopicPartition{}
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		tg.t.Fatalf("%s: fetch %s/%d: unexpected shape %+v", tg.kind, topic, partition, resp.Topics)
	}
	return resp, resp.Topics[0].Partitions[0]
}

// fetchResult records a fetch answer, naming producer ids through pids.
func (tg *target) fetchResult(p kmsg.FetchResponseTopicPartition, pids *pidNames) string {
	tg.t.Helper()
	f, err := readBatches(p.RecordBatches)
	if err != nil {
		tg.t.Fatalf("%s: fetch response: %v", tg.kind, err)
	}
	var aborted []string
	for _, a := range p.AbortedTransactions {
		aborted = append(aborted, fmt.Sprintf("%s@%d", pids.name(a.ProducerID), a.FirstOffset))
	}
	sort.Strings(aborted)
	return fmt.Sprintf("%s hwm=%d lso=%d logStart=%d %s aborted=[%s]", errName(p.ErrorCode),
		p.HighWatermark, p.LastStableOffset, p.LogStartOffset, f, strings.Join(aborted, " "))
}

// listOffset lists one partition's offset for timestamp ts.
func (tg *target) listOffset(ctx context.Context, topic string, partition int32, ts int64, isolation int8, leaderEpoch int32) kmsg.ListOffsetsResponseTopicPartition {
	tg.t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = partition
	rp.Timestamp = ts
	rp.CurrentLeaderEpoch = leaderEpoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := tg.send(ctx, vListOffsets, req).(*kmsg.ListOffsetsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		tg.t.Fatalf("%s: list offsets %s/%d: unexpected shape", tg.kind, topic, partition)
	}
	return resp.Topics[0].Partitions[0]
}

func listOffsetResult(p kmsg.ListOffsetsResponseTopicPartition) string {
	if p.ErrorCode != 0 {
		return errName(p.ErrorCode)
	}
	return fmt.Sprintf("OK offset=%d timestamp=%d", p.Offset, p.Timestamp)
}

// pidNames names producer ids in the order a scenario meets them (P1,
// P2, ...), so transcripts never carry the absolute ids, which differ.
type pidNames struct{ names map[int64]string }

func (n *pidNames) name(pid int64) string {
	if pid < 0 {
		return fmt.Sprint(pid)
	}
	if n.names == nil {
		n.names = make(map[int64]string)
	}
	if s, ok := n.names[pid]; ok {
		return s
	}
	s := fmt.Sprintf("P%d", len(n.names)+1)
	n.names[pid] = s
	return s
}

// initProducerID sends InitProducerId v5.
func (tg *target) initProducerID(ctx context.Context, version int16, txnID *string, timeoutMs int32, pid int64, epoch int16) *kmsg.InitProducerIDResponse {
	tg.t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = txnID
	req.TransactionTimeoutMillis = timeoutMs
	req.ProducerID, req.ProducerEpoch = pid, epoch
	return tg.send(ctx, version, req).(*kmsg.InitProducerIDResponse)
}

// retriableCoordinatorError reports the answers a coordinator gives while
// it loads or finishes the previous transaction.
func retriableCoordinatorError(code int16) bool {
	err := kerr.ErrorForCode(code)
	return errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.NotCoordinator) ||
		errors.Is(err, kerr.CoordinatorLoadInProgress) || errors.Is(err, kerr.ConcurrentTransactions)
}

// initTxn initializes a transactional id (setup), waiting out a
// coordinator that is still loading, and returns its id and epoch.
func (tg *target) initTxn(ctx context.Context, txnID string, timeoutMs int32) (int64, int16) {
	tg.t.Helper()
	var resp *kmsg.InitProducerIDResponse
	tg.retry(ctx, "init "+txnID, func() error {
		resp = tg.initProducerID(ctx, vInitProducerID, &txnID, timeoutMs, -1, -1)
		if retriableCoordinatorError(resp.ErrorCode) {
			return codeErr(resp.ErrorCode)
		}
		if resp.ErrorCode != 0 {
			return backoff.Permanent(codeErr(resp.ErrorCode))
		}
		return nil
	})
	return resp.ProducerID, resp.ProducerEpoch
}

// idempotentPID gets a producer id for an idempotent producer.
func (tg *target) idempotentPID(ctx context.Context) (int64, int16) {
	tg.t.Helper()
	var resp *kmsg.InitProducerIDResponse
	tg.retry(ctx, "idempotent InitProducerId", func() error {
		resp = tg.initProducerID(ctx, vInitProducerID, nil, 0, -1, -1)
		if retriableCoordinatorError(resp.ErrorCode) {
			return codeErr(resp.ErrorCode)
		}
		if resp.ErrorCode != 0 {
			return backoff.Permanent(codeErr(resp.ErrorCode))
		}
		return nil
	})
	return resp.ProducerID, resp.ProducerEpoch
}

// endTxn sends EndTxn.
func (tg *target) endTxn(ctx context.Context, version int16, txnID string, pid int64, epoch int16, commit bool) *kmsg.EndTxnResponse {
	tg.t.Helper()
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID = txnID
	req.ProducerID, req.ProducerEpoch = pid, epoch
	req.Commit = commit
	return tg.send(ctx, version, req).(*kmsg.EndTxnResponse)
}

// endTxnResult records an EndTxn answer relative to the producer id and
// epoch the producer had.
func endTxnResult(resp *kmsg.EndTxnResponse, pids *pidNames, epoch int16) string {
	if resp.ErrorCode != 0 {
		return errName(resp.ErrorCode)
	}
	return fmt.Sprintf("OK id=%s epoch=%s", pids.name(resp.ProducerID), relEpoch(resp.ProducerEpoch, epoch))
}

// relEpoch writes an epoch relative to a base epoch: "e", "e+1", "e-1";
// -1 stays -1.
func relEpoch(epoch, base int16) string {
	switch d := int(epoch) - int(base); {
	case epoch == -1:
		return "-1"
	case d == 0:
		return "e"
	case d > 0:
		return fmt.Sprintf("e+%d", d)
	default:
		return fmt.Sprintf("e%d", d)
	}
}

// describeTxn describes one transactional id.
func (tg *target) describeTxn(ctx context.Context, txnID string) kmsg.DescribeTransactionsResponseTransactionState {
	tg.t.Helper()
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{txnID}
	resp := tg.send(ctx, vDescribeTxns, req).(*kmsg.DescribeTransactionsResponse)
	if len(resp.TransactionStates) != 1 {
		tg.t.Fatalf("%s: describe %s: %d states", tg.kind, txnID, len(resp.TransactionStates))
	}
	return resp.TransactionStates[0]
}

// describeTxnResult records a transaction's description relative to the
// producer's first epoch.
func describeTxnResult(st kmsg.DescribeTransactionsResponseTransactionState, pids *pidNames, epoch int16, prefix string) string {
	if st.ErrorCode != 0 {
		return errName(st.ErrorCode)
	}
	var parts []string
	for _, t := range st.Topics {
		ps := append([]int32(nil), t.Partitions...)
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		parts = append(parts, fmt.Sprintf("%s%v", strings.TrimPrefix(t.Topic, prefix), ps))
	}
	sort.Strings(parts)
	started := "no"
	if st.StartTimestamp > 0 {
		started = "yes"
	}
	return fmt.Sprintf("%s id=%s epoch=%s timeout=%d started=%s partitions=[%s]", st.State,
		pids.name(st.ProducerID), relEpoch(st.ProducerEpoch, epoch), st.TimeoutMillis, started, strings.Join(parts, " "))
}

// waitTxnSettled waits until a transaction is neither being prepared nor
// waiting for markers: the real Kafka answers EndTxn before its markers are
// written, the bundled broker after.
func (tg *target) waitTxnSettled(ctx context.Context, txnID string) {
	tg.t.Helper()
	tg.retry(ctx, "wait for "+txnID+" to settle", func() error {
		st := tg.describeTxn(ctx, txnID)
		if st.ErrorCode != 0 {
			return codeErr(st.ErrorCode)
		}
		if strings.HasPrefix(st.State, "Prepare") {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
}

// waitStable waits until no transaction holds a partition's last stable
// offset below its high watermark.
func (tg *target) waitStable(ctx context.Context, topic string, partition int32) {
	tg.t.Helper()
	tg.retry(ctx, fmt.Sprintf("wait for %s/%d to be stable", topic, partition), func() error {
		end := tg.listOffset(ctx, topic, partition, -1, 0, -1)
		stable := tg.listOffset(ctx, topic, partition, -1, 1, -1)
		if end.ErrorCode != 0 || stable.ErrorCode != 0 {
			return fmt.Errorf("%s, %s", errName(end.ErrorCode), errName(stable.ErrorCode))
		}
		if end.Offset != stable.Offset {
			return fmt.Errorf("last stable offset %d, high watermark %d", stable.Offset, end.Offset)
		}
		return nil
	})
}
