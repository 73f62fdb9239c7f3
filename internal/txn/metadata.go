package txn

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicMeta is what metadata says about one topic.
type TopicMeta struct {
	Name    string
	ID      [16]byte        // the topic id, zero from brokers before Kafka 2.8
	Leaders map[int32]int32 // partition -> leader node
}

// topicMeta returns metadata for topics from kgo's metadata cache, or fresh
// from the cluster when fresh is set (after a NOT_LEADER answer, say). A
// topic that does not exist yet or has a partition without a leader is a
// retriable error; an authorization failure is permanent.
func (m *Manager) topicMeta(ctx context.Context, topics []string, fresh bool) (map[string]TopicMeta, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	limit := time.Duration(0) // kgo's MetadataMinAge
	if fresh {
		limit = time.Nanosecond
	}
	resp, err := m.cl.RequestCachedMetadata(ctx, req, limit)
	if err != nil {
		if isContextErr(err) {
			return nil, permanent(err)
		}
		return nil, fmt.Errorf("metadata: %w", err)
	}
	out := make(map[string]TopicMeta, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			err = fmt.Errorf("metadata of topic %q: %w", *t.Topic, err)
			if t.ErrorCode == kerr.TopicAuthorizationFailed.Code {
				return nil, permanent(err)
			}
			return nil, err
		}
		tm := TopicMeta{Name: *t.Topic, ID: t.TopicID, Leaders: make(map[int32]int32, len(t.Partitions))}
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 && p.ErrorCode != kerr.ReplicaNotAvailable.Code {
				return nil, fmt.Errorf("metadata of %s/%d: %w", *t.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
			}
			tm.Leaders[p.Partition] = p.Leader
		}
		out[*t.Topic] = tm
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok {
			return nil, fmt.Errorf("metadata of topic %q: %w", t, kerr.UnknownTopicOrPartition)
		}
	}
	return out, nil
}
