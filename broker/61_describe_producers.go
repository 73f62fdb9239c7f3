package broker

// DescribeProducers (key 61).
//
// Versions: 0.
//
// Behaviour:
//   - The producer state a partition leader holds for each producer id that
//     wrote to the partition: epoch, last sequence (-1 when the producer has
//     written no idempotent batch under its current epoch), the time of its
//     last write, the coordinator epoch of the last marker, and the first
//     offset of its open transaction (-1 for none). Producers are listed by
//     id.
//   - Answered by the leader only: NOT_LEADER_OR_FOLLOWER elsewhere,
//     UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist.
//   - A producer idle for ProducerIDExpiration (Kafka's
//     producer.id.expiration.ms) with no open transaction is gone
//     (producer_expiry.go).
//
// Skipped:
//   - authorization.

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 61, min: 0, max: 0, handle: handleDescribeProducers}) }

func handleDescribeProducers(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.DescribeProducersRequest)
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		for _, idx := range t.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition = idx
			p := c.partitionOf(t.Topic, idx)
			var err *kerr.Error
			if p == nil {
				err = kerr.UnknownTopicOrPartition
			} else {
				err = p.checkLeader(r.node.id, -1)
			}
			if err != nil {
				rp.ErrorCode = err.Code
			} else {
				rp.ActiveProducers = describeProducers(p)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func describeProducers(p *partition) []kmsg.DescribeProducersResponseTopicPartitionActiveProducer {
	pids := make([]int64, 0, len(p.producers))
	for pid := range p.producers {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	out := make([]kmsg.DescribeProducersResponseTopicPartitionActiveProducer, 0, len(pids))
	for _, pid := range pids {
		ps := p.producers[pid]
		ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
		ap.ProducerID = pid
		ap.ProducerEpoch = int32(ps.epoch)
		ap.LastSequence = -1
		if n := len(ps.recent); n > 0 {
			ap.LastSequence = ps.recent[n-1].lastSeq
		}
		ap.LastTimestamp = -1
		if !ps.lastWrite.IsZero() {
			ap.LastTimestamp = ps.lastWrite.UnixMilli()
		}
		ap.CoordinatorEpoch = ps.coordinatorEpoch
		ap.CurrentTxnStartOffset = ps.txnFirst
		out = append(out, ap)
	}
	return out
}
