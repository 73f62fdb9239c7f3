package broker

// DescribeConfigs (key 32).
//
// Versions: 0-4. v3 brings config types and documentation.
//
// Behaviour:
//   - GROUP resources (type 32): every group config Kafka 4.4 has
//     (share_group_config.go) with its effective value, source GROUP_CONFIG
//     when set for the group and DEFAULT_CONFIG otherwise, its type and,
//     when asked, its documentation. Any group name may be described,
//     whether or not the group exists; the empty name is INVALID_REQUEST, as
//     Kafka refuses a default group resource.
//   - TOPIC resources (type 2): the configs the topic was created or altered
//     with (DYNAMIC_TOPIC_CONFIG) and the defaults of common topic configs
//     that the broker reports but does not enforce (DEFAULT_CONFIG);
//     UNKNOWN_TOPIC_OR_PARTITION for an unknown topic.
//   - BROKER resources (type 4): an empty list for an existing node id or
//     the empty name (the bundled broker exposes no broker configs).
//   - ConfigNames restricts the answer. Other resource types get
//     INVALID_REQUEST.
//
// Skipped:
//   - synonyms;
//   - authorization.

import (
	"sort"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 32, min: 0, max: 4, handle: handleDescribeConfigs}) }

// topicConfigDefaults are reported for every topic; the broker keeps one
// copy of every record in memory and enforces none of them.
var topicConfigDefaults = map[string]string{
	"cleanup.policy":         "delete",
	"compression.type":       "producer",
	"max.message.bytes":      "1048588",
	"message.timestamp.type": "CreateTime",
	"min.insync.replicas":    "1",
	"retention.bytes":        "-1",
	"retention.ms":           "604800000",
}

func handleDescribeConfigs(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, rr := range req.Resources {
		res := kmsg.NewDescribeConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		wanted := func(name string) bool {
			if rr.ConfigNames == nil {
				return true
			}
			for _, n := range rr.ConfigNames {
				if n == name {
					return true
				}
			}
			return false
		}
		var err *kerr.Error
		var msg string
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeGroupConfig:
			if rr.ResourceName == "" {
				err, msg = kerr.InvalidRequest, "the group name is empty: there is no default group resource"
				break
			}
			for _, d := range groupConfigDefs {
				if !wanted(d.name) {
					continue
				}
				cfg := describedConfig(req.Version, d.name, c.groupConfigValue(rr.ResourceName, d.name), d.typ)
				if _, set := c.coordinators.share.groupConfigs[rr.ResourceName][d.name]; set {
					cfg.Source = kmsg.ConfigSourceGroupConfig
				} else {
					cfg.Source, cfg.IsDefault = kmsg.ConfigSourceDefaultConfig, true
				}
				if req.IncludeDocumentation {
					doc := d.doc
					cfg.Documentation = &doc
				}
				res.Configs = append(res.Configs, cfg)
			}
		case kmsg.ConfigResourceTypeTopic:
			t := c.topics[rr.ResourceName]
			if t == nil {
				err, msg = kerr.UnknownTopicOrPartition, "unknown topic"
				break
			}
			names := make([]string, 0, len(t.configs)+len(topicConfigDefaults))
			for n := range t.configs {
				names = append(names, n)
			}
			for n := range topicConfigDefaults {
				if _, set := t.configs[n]; !set {
					names = append(names, n)
				}
			}
			sort.Strings(names)
			for _, n := range names {
				if !wanted(n) {
					continue
				}
				if v, set := t.configs[n]; set {
					cfg := describedConfig(req.Version, n, v, kmsg.ConfigTypeString)
					cfg.Source = kmsg.ConfigSourceDynamicTopicConfig
					res.Configs = append(res.Configs, cfg)
					continue
				}
				cfg := describedConfig(req.Version, n, topicConfigDefaults[n], kmsg.ConfigTypeString)
				cfg.Source, cfg.IsDefault = kmsg.ConfigSourceDefaultConfig, true
				res.Configs = append(res.Configs, cfg)
			}
		case kmsg.ConfigResourceTypeBroker:
			if rr.ResourceName != "" {
				id, perr := strconv.ParseInt(rr.ResourceName, 10, 32)
				if perr != nil || c.nodeByID(int32(id)) == nil {
					err, msg = kerr.InvalidRequest, "unknown broker "+rr.ResourceName
				}
			}
		default:
			err, msg = kerr.InvalidRequest, "resource type "+rr.ResourceType.String()+" is not served"
		}
		if err != nil {
			res.ErrorCode = err.Code
			res.ErrorMessage = &msg
			res.Configs = nil
		}
		resp.Resources = append(resp.Resources, res)
	}
	return resp, nil
}

func describedConfig(version int16, name, value string, typ kmsg.ConfigType) kmsg.DescribeConfigsResponseResourceConfig {
	cfg := kmsg.NewDescribeConfigsResponseResourceConfig()
	cfg.Name = name
	cfg.Value = &value
	if version >= 3 {
		cfg.ConfigType = typ
	}
	return cfg
}
