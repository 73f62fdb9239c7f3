package broker

// DeleteRecords (key 21).
//
// Versions: 0-2.
//
// Behaviour:
//   - Moves a partition's log start offset forward to the requested offset
//     (-1 means the high watermark), as Kafka does: the low watermark
//     answered is the new log start offset, which may sit inside a batch
//     (that batch stays until the log start passes it, and fetches below the
//     log start get OFFSET_OUT_OF_RANGE); batches wholly before it are
//     dropped at once and their memory counts no more against MaxBytes.
//   - Errors: an offset past the high watermark, or below -1, is
//     OFFSET_OUT_OF_RANGE; a topic whose cleanup.policy lacks "delete"
//     POLICY_VIOLATION; an internal topic INVALID_TOPIC_EXCEPTION; an
//     unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION; a partition
//     this node does not lead NOT_LEADER_OR_FOLLOWER. Every error answers
//     low watermark -1.
//   - Like Kafka, a partition named twice is answered once, with the last
//     offset given for it, and the answer groups partitions by topic (here
//     in the order the request first names them).
//
// Skipped:
//   - TimeoutMillis (there is no replication to wait for);
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 21, min: 0, max: 2, handle: handleDeleteRecords}) }

func handleDeleteRecords(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.DeleteRecordsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	type target struct {
		topic  int // index in resp.Topics
		offset int64
	}
	targets := make(map[groupTP]*target)
	var order []groupTP
	slots := topicSlots{}
	for _, rt := range req.Topics {
		ti := slots.slot(rt.Topic, func() {
			st := kmsg.NewDeleteRecordsResponseTopic()
			st.Topic = rt.Topic
			resp.Topics = append(resp.Topics, st)
		})
		for _, rp := range rt.Partitions {
			tp := groupTP{topic: rt.Topic, partition: rp.Partition}
			if t := targets[tp]; t != nil {
				t.offset = rp.Offset // the last one named wins
				continue
			}
			targets[tp] = &target{topic: ti, offset: rp.Offset}
			order = append(order, tp)
		}
	}
	for _, tp := range order {
		t := targets[tp]
		sp := kmsg.NewDeleteRecordsResponseTopicPartition()
		sp.Partition = tp.partition
		low, err := c.deleteRecords(r.node.id, tp, t.offset)
		sp.LowWatermark = low
		if err != nil {
			sp.ErrorCode, sp.LowWatermark = err.Code, -1
		}
		resp.Topics[t.topic].Partitions = append(resp.Topics[t.topic].Partitions, sp)
	}
	return resp, nil
}

// deleteRecords moves one partition's log start offset to offset and
// returns the new low watermark.
func (c *Cluster) deleteRecords(node int32, tp groupTP, offset int64) (int64, *kerr.Error) {
	p := c.partitionOf(tp.topic, tp.partition)
	switch {
	case p == nil:
		return -1, kerr.UnknownTopicOrPartition
	case p.topic.internal:
		return -1, kerr.InvalidTopicException
	}
	if err := p.checkLeader(node, -1); err != nil {
		return -1, err
	}
	if !p.topic.retention.delete {
		return -1, kerr.PolicyViolation
	}
	if offset == -1 {
		offset = p.next
	}
	if offset < 0 || offset > p.next {
		return -1, kerr.OffsetOutOfRange
	}
	if offset > p.logStart {
		c.logger.Info("records deleted", "topic", tp.topic, "partition", tp.partition, "log_start", offset)
		c.advanceLogStart(p, offset)
		c.armRetention(p, time.Now())
	}
	return p.logStart, nil
}
