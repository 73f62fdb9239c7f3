package broker

// ListOffsets: versions 1-10.
//
// Timestamps -1 (latest: the high watermark, or the last stable offset for
// read_committed), -2 (earliest), -3 (the first record with the largest
// timestamp), -4 (earliest local: the same as earliest here), -5 (latest
// tiered: -1, there is no tiered storage), and a real timestamp (the first
// record, in offset order, of the first batch whose max timestamp reaches
// it; -1 if none). Like Kafka, control records count: their timestamp is
// when the marker was written. Records are found inside uncompressed
// batches; a compressed batch answers with its first offset (for a
// timestamp) or its last (for -3), since the broker never decompresses.
// An answer with no offset has leader epoch -1; a found record carries the
// leader epoch of its batch. Other negative timestamps (-6, earliest
// pending upload, needs v11) are UNSUPPORTED_VERSION, as Kafka answers.
// The client's current leader epoch is checked. Skipped: v0's
// MaxNumOffsets form.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 2, min: 1, max: 10, handle: handleListOffsets}) }

func handleListOffsets(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		t := c.topics[rt.Topic]
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			if err := listOffset(r.node.id, t, req.IsolationLevel, rp, &sp); err != nil {
				sp.ErrorCode = err.Code
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
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
		var best *storedBatch
		for _, b := range p.batches {
			if best == nil || b.maxTs > best.maxTs {
				best = b
			}
		}
		if best != nil {
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
		for _, b := range p.batches {
			if b.maxTs < rp.Timestamp {
				continue
			}
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
			break
		}
	}
	if sp.Offset < 0 {
		sp.LeaderEpoch = -1
	}
	return nil
}
