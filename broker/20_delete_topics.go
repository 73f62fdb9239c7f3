package broker

// DeleteTopics (key 20).
//
// Versions: 0-6. v6 deletes by topic id too.
//
// Behaviour:
//   - Deletes topics by name, or by id from v6.
//   - Internal topics cannot be deleted (INVALID_TOPIC_EXCEPTION).
//   - Deletion is immediate: parked fetches of the topic are answered at
//     once with UNKNOWN_TOPIC_OR_PARTITION, and the topic's records stop
//     counting against MaxBytes.
//
// Skipped:
//   - TimeoutMillis (deletion is immediate);
//   - authorization.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 20, min: 0, max: 6, handle: handleDeleteTopics}) }

func handleDeleteTopics(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	targets := req.Topics
	if req.Version < 6 {
		targets = nil
		for _, name := range req.TopicNames {
			name := name
			targets = append(targets, kmsg.DeleteTopicsRequestTopic{Topic: &name})
		}
	}
	for _, rt := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		var t *topic
		if rt.Topic != nil {
			t = c.topics[*rt.Topic]
		} else {
			t = c.topicsByID[rt.TopicID]
		}
		switch {
		case t == nil && rt.Topic == nil:
			st.ErrorCode = kerr.UnknownTopicID.Code
		case t == nil:
			st.ErrorCode = kerr.UnknownTopicOrPartition.Code
		case t.internal:
			st.ErrorCode = kerr.InvalidTopicException.Code
		default:
			name := t.name
			st.Topic, st.TopicID = &name, t.id
			c.deleteTopic(t)
			c.logger.Info("topic deleted", "topic", name)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
