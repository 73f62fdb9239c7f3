package broker

// ListOffsets (key 2).
//
// Versions: 1-10.
//
// Behaviour:
//   - Timestamps -1 (latest: the high watermark, or the last stable offset
//     for read_committed), -2 (earliest), -3 (the first record with the
//     largest timestamp), -4 (earliest local: the same as earliest here), -5
//     (latest tiered: -1, there is no tiered storage), and a real timestamp
//     (the first record, in offset order, of the first batch whose max
//     timestamp reaches it; -1 if none).
//   - Like Kafka, control records count: their timestamp is when the marker
//     was written.
//   - Records are found inside uncompressed batches; a compressed batch
//     answers with its first offset (for a timestamp) or its last (for -3),
//     since the broker never decompresses.
//   - An answer with no offset has leader epoch -1; a found record carries
//     the leader epoch of its batch.
//   - Other negative timestamps (-6, earliest pending upload, needs v11) are
//     UNSUPPORTED_VERSION, as Kafka answers.
//   - The client's current leader epoch is checked.
//   - As Kafka 4.4 answers, a partition named more than once is answered
//     once, with INVALID_REQUEST, and the answer has one entry per topic,
//     its partitions in the order the request first names them.
//   - Lookups are O(log n) in the partition's batches: by offset with a
//     binary search, by timestamp (and -3) with the log's max-timestamp tree
//     (log_index.go).
//
// Skipped:
//   - v0's MaxNumOffsets form.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 2, min: 1, max: 10, handle: handleListOffsets}) }

func handleListOffsets(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	type at struct{ topic, partition int }
	places := make(map[groupTP]at)
	dups := make(map[groupTP]bool)
	slots := topicSlots{}
	var asked []kmsg.ListOffsetsRequestTopicPartition // by place, in resp order
	var askedTopic []*topic
	for _, rt := range req.Topics {
		ti := slots.slot(rt.Topic, func() {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			resp.Topics = append(resp.Topics, st)
		})
		for _, rp := range rt.Partitions {
			tp := groupTP{topic: rt.Topic, partition: rp.Partition}
			if _, seen := places[tp]; seen {
				dups[tp] = true
				continue
			}
			st := &resp.Topics[ti]
			places[tp] = at{ti, len(st.Partitions)}
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			st.Partitions = append(st.Partitions, sp)
			asked = append(asked, rp)
			askedTopic = append(askedTopic, c.topics[rt.Topic])
		}
	}
	i := 0
	for ti := range resp.Topics {
		for pi := range resp.Topics[ti].Partitions {
			sp := &resp.Topics[ti].Partitions[pi]
			tp := groupTP{topic: resp.Topics[ti].Topic, partition: sp.Partition}
			rp, t := asked[i], askedTopic[i]
			i++
			var err *kerr.Error
			if dups[tp] {
				err = kerr.InvalidRequest
			} else {
				err = listOffset(r.node.id, t, req.IsolationLevel, rp, sp)
			}
			if err != nil {
				sp.ErrorCode = err.Code
			}
		}
	}
	return resp, nil
}

func listOffset(node int32, t *topic, isolation int8, rp kmsg.ListOffsetsRequestTopicPartition, sp *kmsg.ListOffsetsResponseTopicPartition) *kerr.Error {
	if t == nil || rp.Partition < 0 || int(rp.Partition) >= len(t.partitions) {
		return kerr.UnknownTopicOrPartition
	}
	p := t.partitions[rp.Partition]
	if err := p.checkLeader(node, rp.CurrentLeaderEpoch); err != nil {
		return err
	}
	sp.LeaderEpoch = p.leaderEpoch
	switch rp.Timestamp {
	case -1:
		sp.Offset = p.next
		if isolation == 1 {
			sp.Offset = p.lastStableOffset()
		}
	case -2, -4:
		sp.Offset = p.logStart
	case -3:
		if i := p.maxTimestampBatch(); i >= 0 {
			best := p.batches[i]
			sp.Offset, sp.Timestamp = best.last, best.maxTs
			if recs, ok := recordTimes(best.raw); ok {
				for _, rt := range recs {
					if rt.ts == best.maxTs {
						sp.Offset = best.base + int64(rt.delta)
						break
					}
				}
			}
			sp.LeaderEpoch = best.leaderEpoch()
		}
	case -5:
	default:
		if rp.Timestamp < 0 {
			return kerr.UnsupportedVersion
		}
		if i := p.firstBatchAtTime(rp.Timestamp); i >= 0 {
			b := p.batches[i]
			sp.Offset, sp.Timestamp = b.base, b.maxTs
			if recs, ok := recordTimes(b.raw); ok {
				for _, rt := range recs {
					if rt.ts >= rp.Timestamp {
						sp.Offset, sp.Timestamp = b.base+int64(rt.delta), rt.ts
						break
					}
				}
			}
			sp.LeaderEpoch = b.leaderEpoch()
		}
	}
	if sp.Offset < 0 {
		sp.LeaderEpoch = -1
	}
	return nil
}
