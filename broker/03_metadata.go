package broker

// Metadata (key 3).
//
// Versions: 0-12. v10 brings topic ids and lookup by id.
//
// Behaviour:
//   - Lists every node as a broker and every partition's single leader
//     (which is also its only replica and ISR), with its leader epoch, so
//     that after a reassignment clients see the new leader as Kafka would
//     show it.
//   - A request for a missing topic creates it (default partition count)
//     when AllowAutoTopicCreation is set (v4+; always for v0-3, as Kafka's
//     auto.create.topics.enable=true) and answers it at once (Kafka answers
//     UNKNOWN_TOPIC_OR_PARTITION first and lists the topic once its
//     controller has created it: docs/differences.md).
//   - A name Kafka does not allow gets INVALID_TOPIC_EXCEPTION.
//   - Internal topics are listed only when asked for by name or in an
//     all-topics request, as Kafka does.
//
// Skipped:
//   - authorized operations (always -2147483648, "not requested");
//   - racks;
//   - v13's top-level error.

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 3, min: 0, max: 12, handle: handleMetadata}) }

const clusterID = "kshare-bundled-cluster"

func handleMetadata(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	for _, n := range c.nodes {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = n.id, n.host, n.port
		resp.Brokers = append(resp.Brokers, b)
	}
	id := clusterID
	resp.ClusterID = &id
	resp.ControllerID = 0

	if req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0) {
		names := make([]string, 0, len(c.topics))
		for name := range c.topics {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			resp.Topics = append(resp.Topics, c.describeTopic(c.topics[name]))
		}
		return resp, nil
	}
	autoCreate := req.Version < 4 || req.AllowAutoTopicCreation
	for _, rt := range req.Topics {
		var t *topic
		switch {
		case rt.Topic != nil && *rt.Topic != "":
			t = c.topics[*rt.Topic]
			if t == nil && autoCreate && validTopicName(*rt.Topic) == nil {
				t = c.createTopic(*rt.Topic, c.cfg.defaultPartitions, nil, false)
				c.logger.Info("topic auto-created", "topic", t.name, "partitions", len(t.partitions))
			}
		case rt.TopicID != [16]byte{}:
			t = c.topicsByID[rt.TopicID]
		}
		if t == nil {
			st := kmsg.NewMetadataResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			switch {
			case rt.Topic == nil:
				st.ErrorCode = kerr.UnknownTopicID.Code
			case validTopicName(*rt.Topic) != nil:
				st.ErrorCode = kerr.InvalidTopicException.Code
			default:
				st.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
			resp.Topics = append(resp.Topics, st)
			continue
		}
		resp.Topics = append(resp.Topics, c.describeTopic(t))
	}
	return resp, nil
}

func (c *Cluster) describeTopic(t *topic) kmsg.MetadataResponseTopic {
	st := kmsg.NewMetadataResponseTopic()
	name := t.name
	st.Topic, st.TopicID, st.IsInternal = &name, t.id, t.internal
	for _, p := range t.partitions {
		sp := kmsg.NewMetadataResponseTopicPartition()
		sp.Partition = p.index
		sp.Leader = p.leader
		sp.LeaderEpoch = p.leaderEpoch
		sp.Replicas = []int32{p.leader}
		sp.ISR = []int32{p.leader}
		st.Partitions = append(st.Partitions, sp)
	}
	return st
}
