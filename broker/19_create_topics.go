package broker

// CreateTopics: versions 0-7.
//
// Creates topics with a partition count (or the DefaultPartitions option for
// -1) and configs kept as given; ValidateOnly checks without creating.
// Replication factor must be -1 or 1 (there is one copy) and manual replica
// assignments may name one node per partition, which becomes its leader.
// Errors: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION (bad or internal
// name), INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
// INVALID_REPLICA_ASSIGNMENT. Skipped: config validation (any key is kept).

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 19, min: 0, max: 7, handle: handleCreateTopics}) }

// maxPartitionsPerTopic bounds what one request can allocate.
const maxPartitionsPerTopic = 10000

func handleCreateTopics(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		// Empty, never null: the Java admin client reads the list.
		st.Configs = []kmsg.CreateTopicsResponseTopicConfig{}
		t, err := c.createTopicFromRequest(rt, req.ValidateOnly)
		if err != nil {
			st.ErrorCode = err.code.Code
			msg := err.msg
			st.ErrorMessage = &msg
		} else if t != nil {
			st.TopicID = t.id
			st.NumPartitions = int32(len(t.partitions))
			st.ReplicationFactor = 1
			for name, value := range t.configs {
				cfg := kmsg.NewCreateTopicsResponseTopicConfig()
				cfg.Name, cfg.Value = name, kmsg.StringPtr(value)
				cfg.Source = 1 // DYNAMIC_TOPIC_CONFIG
				st.Configs = append(st.Configs, cfg)
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

type topicError struct {
	code *kerr.Error
	msg  string
}

func (c *Cluster) createTopicFromRequest(rt kmsg.CreateTopicsRequestTopic, validateOnly bool) (*topic, *topicError) {
	if err := validTopicName(rt.Topic); err != nil {
		return nil, &topicError{kerr.InvalidTopicException, err.Error()}
	}
	if strings.HasPrefix(rt.Topic, "__") {
		return nil, &topicError{kerr.InvalidTopicException, "names starting with __ are reserved for internal topics"}
	}
	if c.topics[rt.Topic] != nil {
		return nil, &topicError{kerr.TopicAlreadyExists, fmt.Sprintf("topic %q already exists", rt.Topic)}
	}
	if rt.ReplicationFactor != -1 && rt.ReplicationFactor != 1 {
		return nil, &topicError{kerr.InvalidReplicationFactor, "the bundled cluster keeps one copy of each partition: replication factor must be 1 or -1"}
	}
	n := rt.NumPartitions
	var leaders []int32
	if len(rt.ReplicaAssignment) > 0 {
		if n != -1 {
			return nil, &topicError{kerr.InvalidRequest, "both a partition count and a replica assignment were given"}
		}
		n = int32(len(rt.ReplicaAssignment))
		for i, a := range rt.ReplicaAssignment {
			if a.Partition != int32(i) || len(a.Replicas) != 1 || c.nodeByID(a.Replicas[0]) == nil {
				return nil, &topicError{kerr.InvalidReplicaAssignment, "each partition, in order, needs exactly one existing node"}
			}
			leaders = append(leaders, a.Replicas[0])
		}
	}
	if n == -1 {
		n = c.cfg.defaultPartitions
	}
	if n < 1 || n > maxPartitionsPerTopic {
		return nil, &topicError{kerr.InvalidPartitions, fmt.Sprintf("partition count %d is not in 1..%d", n, maxPartitionsPerTopic)}
	}
	if validateOnly {
		return nil, nil
	}
	configs := make(map[string]string, len(rt.Configs))
	for _, cfg := range rt.Configs {
		if cfg.Value != nil {
			configs[cfg.Name] = *cfg.Value
		}
	}
	t := c.createTopic(rt.Topic, n, configs, false)
	for i, leader := range leaders {
		t.partitions[i].leader = leader
	}
	c.logger.Info("topic created", "topic", t.name, "partitions", n)
	return t, nil
}

// validTopicName applies Kafka's topic name rules.
func validTopicName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("topic name %q is not allowed", name)
	case len(name) > 249:
		return fmt.Errorf("topic name is %d characters; at most 249 are allowed", len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("topic name %q has %q; only ASCII alphanumerics, '.', '_' and '-' are allowed", name, r)
		}
	}
	return nil
}
