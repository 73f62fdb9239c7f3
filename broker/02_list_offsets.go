package broker

// ListOffsets: versions 1-10.
//
// Timestamps -1 (latest: the high watermark, or the last stable offset for
// read_committed), -2 (earliest), -3 (the offset of the batch with the
// largest timestamp), -4 (earliest local: the same as earliest here), -5
// (earliest pending upload: -1, there is no tiered storage), and a real
// timestamp (the first batch whose max timestamp reaches it; -1 if none).
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
			if !b.control && (best == nil || b.maxTs > best.maxTs) {
				best = b
			}
		}
		if best != nil {
			sp.Offset, sp.Timestamp = best.last, best.maxTs
		}
	case -5:
	default:
		if rp.Timestamp < 0 {
			return kerr.InvalidRequest
		}
		for _, b := range p.batches {
			if !b.control && b.maxTs >= rp.Timestamp {
				sp.Offset, sp.Timestamp = b.base, b.maxTs
				break
			}
		}
	}
	return nil
}
