package broker

// AlterShareGroupOffsets (key 91, KIP-932).
//
// Versions: 0.
//
// Behaviour:
//   - Sets the start offset of share-partitions of an empty share group, at
//     its group coordinator (NOT_COORDINATOR elsewhere).
//   - Top-level errors, as on Kafka: an empty group id is INVALID_GROUP_ID,
//     a classic or consumer group's name GROUP_ID_NOT_FOUND, a group with
//     members NON_EMPTY_GROUP. A name no group has gets an empty share
//     group, as on Kafka 4.4.
//   - Per partition: an unknown topic, or a partition the topic does not
//     have, is UNKNOWN_TOPIC_OR_PARTITION; the others get a fresh share
//     state at the next state epoch starting at the given offset (every
//     in-flight record state, and acknowledgements staged by open
//     transactions, are dropped), as Kafka's InitializeShareGroupState does;
//     the group's next member reads from there.
//   - A negative start offset starts where share.auto.offset.reset says.
//   - A partition named more than once is reset once, to the offset given
//     for it last, and every entry gets that answer.
//
// Cost: one state reset per distinct partition, whatever the request's
// length (resetting again for every repeat wrote two state records each
// time: naming one partition 80,000 times held the loop for a second).
//
// Skipped:
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() {
	registerAPI(apiSpec{key: 91, min: 0, max: 0, handle: handleAlterShareGroupOffsets})
}

func handleAlterShareGroupOffsets(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.AlterShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.AlterShareGroupOffsetsResponse)
	sc := c.coordinators.share
	if err, msg := sc.checkOffsetsAdmin(r.node.id, req.GroupID, true); err != nil {
		resp.ErrorCode, resp.ErrorMessage = err.Code, &msg
		return resp, nil
	}
	now := time.Now()
	last := make(map[shareKey]int64)
	for _, rt := range req.Topics {
		if t := c.topics[rt.Topic]; t != nil && !t.internal {
			for _, rp := range rt.Partitions {
				last[shareKey{group: req.GroupID, topicID: t.id, partition: rp.Partition}] = rp.StartOffset
			}
		}
	}
	reset := make(map[shareKey]*kerr.Error, len(last))
	for _, rt := range req.Topics {
		st := kmsg.NewAlterShareGroupOffsetsResponseTopic()
		st.Topic = rt.Topic
		t := c.topics[rt.Topic]
		if t != nil && !t.internal {
			st.TopicID = t.id
		}
		for _, rp := range rt.Partitions {
			sp := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			var err *kerr.Error
			if t == nil || t.internal || rp.Partition < 0 || int(rp.Partition) >= len(t.partitions) {
				err = kerr.UnknownTopicOrPartition
			} else {
				key := shareKey{group: req.GroupID, topicID: t.id, partition: rp.Partition}
				var done bool
				if err, done = reset[key]; !done {
					err = sc.resetShareState(key, t.partitions[rp.Partition], last[key], now)
					reset[key] = err
				}
			}
			if err != nil {
				sp.ErrorCode = err.Code
				msg := err.Description
				sp.ErrorMessage = &msg
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
