package broker

// CreateTopics (key 19).
//
// Versions: 0-7. From v5 the answer lists every topic config.
//
// Behaviour:
//   - Creates topics with a partition count (or the DefaultPartitions option
//     for -1); ValidateOnly checks without creating and answers what would
//     be created.
//   - The replication factor must be -1 or 1 (there is one copy), and manual
//     replica assignments may name one node per partition, which becomes its
//     leader.
//   - Configs are checked against Kafka's topic configs (topic_configs.go)
//     and kept as given; the answer lists every topic config with its value,
//     as Kafka does from v5.
//   - Errors, in Kafka's order: INVALID_REQUEST for a name given twice in
//     one request (answered once), INVALID_TOPIC_EXCEPTION (bad name),
//     TOPIC_ALREADY_EXISTS (internal topics included),
//     INVALID_TOPIC_EXCEPTION for a name that collides with an existing one
//     once '.' and '_' are treated alike, INVALID_PARTITIONS,
//     INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT,
//     INVALID_CONFIG.
//   - A request whose valid topics add up to more than 10,000 partitions
//     creates nothing: every topic is POLICY_VIOLATION "Excessively large
//     number of partitions per request.", as on Kafka since KAFKA-17870.
//
// Cost:
//   - Two passes over the request's topics (validate and count, then
//     create), each O(1) per topic besides its partitions; at most 10,000
//     partitions are created per request.
//
// Skipped:
//   - authorization.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 19, min: 0, max: 7, handle: handleCreateTopics}) }

// maxPartitionsPerTopic bounds one topic of a request, and
// maxPartitionsPerRequest the sum over the topics a request creates: the
// limit Kafka's controller sets since KAFKA-17870 (10,000 records per user
// operation), without which a 2 KiB request allocates a million
// partitions in one turn of the loop.
const (
	maxPartitionsPerTopic   = 10000
	maxPartitionsPerRequest = 10000
)

func handleCreateTopics(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	count := make(map[string]int, len(req.Topics))
	for _, rt := range req.Topics {
		count[rt.Topic]++
	}
	// A first pass validates every topic and adds up the partitions the
	// request would create; past the limit Kafka refuses every topic.
	total := int64(0)
	for _, rt := range req.Topics {
		if count[rt.Topic] == 1 {
			if t, err := c.createTopicFromRequest(rt, true); err == nil {
				total += int64(t.partitions)
			}
		}
	}
	tooMany := total > maxPartitionsPerRequest
	answered := make(map[string]bool, len(req.Topics))
	resp.Topics = make([]kmsg.CreateTopicsResponseTopic, 0, len(req.Topics))
	for _, rt := range req.Topics {
		if answered[rt.Topic] {
			continue
		}
		answered[rt.Topic] = true
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		// Empty, never null: the Java admin client reads the list.
		st.Configs = []kmsg.CreateTopicsResponseTopicConfig{}
		var t *topicPlan
		var err *topicError
		switch {
		case count[rt.Topic] > 1:
			err = &topicError{kerr.InvalidRequest, "the topic is named more than once in the request"}
		case tooMany:
			// Kafka's words, for every topic of the request.
			err = &topicError{kerr.PolicyViolation, "Excessively large number of partitions per request."}
		default:
			t, err = c.createTopicFromRequest(rt, req.ValidateOnly)
		}
		if err != nil {
			st.ErrorCode = err.code.Code
			msg := err.msg
			st.ErrorMessage = &msg
		} else {
			st.TopicID = t.id
			st.NumPartitions = t.partitions
			st.ReplicationFactor = 1
			st.Configs = createdTopicConfigs(t.configs)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// defaultCreatedConfigs is the config list of a topic created without
// configs. Every such answer shares it: answers are only read, and a
// request creating thousands of topics then costs no more than their
// names.
var defaultCreatedConfigs = topicConfigList(nil)

// createdTopicConfigs lists every topic config with its value and source,
// for a CreateTopics answer.
func createdTopicConfigs(set map[string]string) []kmsg.CreateTopicsResponseTopicConfig {
	if len(set) == 0 {
		return defaultCreatedConfigs
	}
	return topicConfigList(set)
}

func topicConfigList(set map[string]string) []kmsg.CreateTopicsResponseTopicConfig {
	entries := effectiveTopicConfigs(set)
	out := make([]kmsg.CreateTopicsResponseTopicConfig, 0, len(entries))
	for _, e := range entries {
		cfg := kmsg.NewCreateTopicsResponseTopicConfig()
		cfg.Name, cfg.Value, cfg.Source = e.name, kmsg.StringPtr(e.value), e.source
		out = append(out, cfg)
	}
	return out
}

type topicError struct {
	code *kerr.Error
	msg  string
}

// topicPlan is what a CreateTopics entry creates (or, validating only,
// would create).
type topicPlan struct {
	id         [16]byte
	partitions int32
	configs    map[string]string
}

func (c *Cluster) createTopicFromRequest(rt kmsg.CreateTopicsRequestTopic, validateOnly bool) (*topicPlan, *topicError) {
	if err := validTopicName(rt.Topic); err != nil {
		return nil, &topicError{kerr.InvalidTopicException, err.Error()}
	}
	if c.topics[rt.Topic] != nil {
		return nil, &topicError{kerr.TopicAlreadyExists, fmt.Sprintf("topic %q already exists", rt.Topic)}
	}
	if other := c.collidingTopic(rt.Topic); other != "" {
		return nil, &topicError{kerr.InvalidTopicException, fmt.Sprintf("topic %q collides with existing topic %q ('.' and '_' are treated alike)", rt.Topic, other)}
	}
	n := rt.NumPartitions
	var leaders []int32
	if len(rt.ReplicaAssignment) > 0 {
		if n != -1 || rt.ReplicationFactor != -1 {
			return nil, &topicError{kerr.InvalidRequest, "both a partition count or replication factor and a replica assignment were given"}
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
	if len(leaders) == 0 && rt.ReplicationFactor != -1 && rt.ReplicationFactor != 1 {
		return nil, &topicError{kerr.InvalidReplicationFactor, "the bundled cluster keeps one copy of each partition: replication factor must be 1 or -1"}
	}
	configs := make(map[string]string, len(rt.Configs))
	for _, cfg := range rt.Configs {
		if cfg.Value == nil {
			continue
		}
		if err := validateTopicConfig(cfg.Name, *cfg.Value); err != nil {
			return nil, &topicError{kerr.InvalidConfig, err.Error()}
		}
		configs[cfg.Name] = *cfg.Value
	}
	if validateOnly {
		// Kafka answers a validation with an id too, for a topic that
		// never exists.
		return &topicPlan{id: newTopicID(), partitions: n, configs: configs}, nil
	}
	t := c.createTopic(rt.Topic, n, configs, false)
	for i, leader := range leaders {
		t.partitions[i].leader = leader
	}
	c.logger.Info("topic created", "topic", t.name, "partitions", n)
	return &topicPlan{id: t.id, partitions: n, configs: t.configs}, nil
}

// collidingTopic returns an existing topic whose name equals name once '.'
// and '_' are treated alike (Kafka refuses such a pair: their metric names
// would clash), or "". The index makes it O(1) per name.
func (c *Cluster) collidingTopic(name string) string {
	if t := c.topicsByNorm[normalizedTopicName(name)]; t != nil && t.name != name {
		return t.name
	}
	return ""
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
