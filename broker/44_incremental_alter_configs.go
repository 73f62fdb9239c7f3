package broker

// IncrementalAlterConfigs (key 44).
//
// Versions: 0-1.
//
// Behaviour:
//   - GROUP resources (type 32): SET and DELETE of Kafka 4.4's group configs
//     (share_group_config.go), every value validated, all of a resource's
//     changes applied or none (INVALID_CONFIG with the reason, also for
//     APPEND and SUBTRACT, which Kafka refuses for every group config, the
//     list one included). The empty group name is Kafka's "default group
//     resource", refused with INVALID_REQUEST. As on Kafka 4.4, a
//     errors.deadletterqueue.topic.name starting with "__" is INVALID_CONFIG;
//     the prefix, the topic's existence and its opt-in are checked only
//     when a dead-letter record is written (share_dlq.go).
//   - TOPIC resources (type 2): SET, DELETE, and APPEND/SUBTRACT on
//     comma-separated values, kept in the topic's configs without validation
//     (as CreateTopics keeps them); UNKNOWN_TOPIC_OR_PARTITION for an
//     unknown topic. A change re-arms the topic's retention (retention.go).
//   - ValidateOnly checks without changing anything. Other resource types
//     get INVALID_REQUEST.
//
// Skipped:
//   - broker configs;
//   - authorization.

import (
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 44, min: 0, max: 1, handle: handleIncrementalAlterConfigs}) }

func handleIncrementalAlterConfigs(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, rr := range req.Resources {
		res := kmsg.NewIncrementalAlterConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		var err *kerr.Error
		var msg string
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeGroupConfig:
			if rr.ResourceName == "" {
				err, msg = kerr.InvalidRequest, "the group name is empty: there is no default group resource"
			} else if aerr := c.alterGroupConfigs(rr.ResourceName, rr.Configs, req.ValidateOnly); aerr != nil {
				err, msg = kerr.InvalidConfig, aerr.Error()
			}
		case kmsg.ConfigResourceTypeTopic:
			t := c.topics[rr.ResourceName]
			if t == nil {
				err, msg = kerr.UnknownTopicOrPartition, "unknown topic"
			} else if aerr := c.alterTopicConfigs(t, rr.Configs, req.ValidateOnly); aerr != "" {
				err, msg = kerr.InvalidConfig, aerr
			}
		default:
			err, msg = kerr.InvalidRequest, "resource type "+rr.ResourceType.String()+" is not served"
		}
		if err != nil {
			res.ErrorCode = err.Code
			res.ErrorMessage = &msg
		}
		resp.Resources = append(resp.Resources, res)
	}
	return resp, nil
}

// alterTopicConfigs applies the operations to a copy of the topic's
// configs and installs it unless validateOnly; it returns why it refused.
func (c *Cluster) alterTopicConfigs(t *topic, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig, validateOnly bool) string {
	next := make(map[string]string, len(t.configs))
	for k, v := range t.configs {
		next[k] = v
	}
	for _, op := range ops {
		if op.Name == "" {
			return "a config name is empty"
		}
		if op.Op != kmsg.IncrementalAlterConfigOpDelete && op.Value == nil {
			return op.Name + ": " + op.Op.String() + " needs a value"
		}
		switch op.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			next[op.Name] = *op.Value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(next, op.Name)
		case kmsg.IncrementalAlterConfigOpAppend:
			items := splitConfigList(next[op.Name])
			for _, v := range splitConfigList(*op.Value) {
				if !slices.Contains(items, v) {
					items = append(items, v)
				}
			}
			next[op.Name] = strings.Join(items, ",")
		case kmsg.IncrementalAlterConfigOpSubtract:
			var kept []string
			drop := splitConfigList(*op.Value)
			for _, v := range splitConfigList(next[op.Name]) {
				if !slices.Contains(drop, v) {
					kept = append(kept, v)
				}
			}
			next[op.Name] = strings.Join(kept, ",")
		default:
			return op.Name + ": unknown operation " + op.Op.String()
		}
	}
	if !validateOnly {
		c.setConfigs(t, next)
	}
	return ""
}

func splitConfigList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
