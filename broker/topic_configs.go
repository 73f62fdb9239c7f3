package broker

// The topic configs Kafka 4.4 knows, with its defaults and its validation,
// so that CreateTopics refuses what Kafka refuses (INVALID_CONFIG) and
// lists a new topic's configs as Kafka does. Of these the broker enforces
// max.message.bytes (topic_limits.go) and cleanup.policy's "delete",
// retention.ms and retention.bytes (retention.go, per batch rather than
// per segment); the others are stored and described only.

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

type topicConfigKind int8

const (
	cfgLong topicConfigKind = iota
	cfgInt
	cfgDouble
	cfgBool
	cfgEnum      // one of values, case-sensitive
	cfgList      // comma-separated items, each one of values
	cfgThrottled // "*" or partition:broker pairs
	cfgNoTiering // a boolean that must stay false: there is no tiered storage
	cfgGzipLevel // -1 or 1..9
	cfgUnbounded // a long without bounds
)

// topicConfigSpec is one config: its kind, default, bounds (numbers are at
// least min and, when max is not 0, at most max) and allowed values.
type topicConfigSpec struct {
	kind     topicConfigKind
	def      string
	min, max float64
	values   []string
}

const maxLong = "9223372036854775807"

// topicConfigSpecs is Kafka 4.4's topic config set (LogConfig) with the
// bounds its validators apply.
var topicConfigSpecs = map[string]topicConfigSpec{
	"cleanup.policy":                          {kind: cfgList, def: "delete", values: []string{"compact", "delete"}},
	"compression.gzip.level":                  {kind: cfgGzipLevel, def: "-1"},
	"compression.lz4.level":                   {kind: cfgInt, def: "9", min: 1, max: 17},
	"compression.type":                        {kind: cfgEnum, def: "producer", values: []string{"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"}},
	"compression.zstd.level":                  {kind: cfgInt, def: "3", min: -131072, max: 22},
	"delete.retention.ms":                     {kind: cfgLong, def: "86400000", min: 0},
	"errors.deadletterqueue.group.enable":     {kind: cfgBool, def: "false"},
	"file.delete.delay.ms":                    {kind: cfgLong, def: "60000", min: 0},
	"flush.messages":                          {kind: cfgLong, def: maxLong, min: 1},
	"flush.ms":                                {kind: cfgLong, def: maxLong, min: 0},
	"follower.replication.throttled.replicas": {kind: cfgThrottled, def: ""},
	"index.interval.bytes":                    {kind: cfgInt, def: "4096", min: 0},
	"leader.replication.throttled.replicas":   {kind: cfgThrottled, def: ""},
	"local.retention.bytes":                   {kind: cfgLong, def: "-2", min: -2},
	"local.retention.ms":                      {kind: cfgLong, def: "-2", min: -2},
	"max.compaction.lag.ms":                   {kind: cfgLong, def: maxLong, min: 1},
	"max.decompressed.message.bytes":          {kind: cfgInt, def: "2147483639", min: 1},
	"max.message.bytes":                       {kind: cfgInt, def: "1048588", min: 0},
	"message.timestamp.after.max.ms":          {kind: cfgLong, def: "3600000", min: 0},
	"message.timestamp.before.max.ms":         {kind: cfgLong, def: maxLong, min: 0},
	"message.timestamp.type":                  {kind: cfgEnum, def: "CreateTime", values: []string{"CreateTime", "LogAppendTime"}},
	"min.cleanable.dirty.ratio":               {kind: cfgDouble, def: "0.5", min: 0, max: 1},
	"min.compaction.lag.ms":                   {kind: cfgLong, def: "0", min: 0},
	"min.insync.replicas":                     {kind: cfgInt, def: "1", min: 1},
	"preallocate":                             {kind: cfgBool, def: "false"},
	"remote.copy.lag.bytes":                   {kind: cfgLong, def: "-1", min: -1},
	"remote.copy.lag.ms":                      {kind: cfgLong, def: "0", min: -1},
	"remote.log.copy.disable":                 {kind: cfgBool, def: "false"},
	"remote.log.delete.on.disable":            {kind: cfgBool, def: "false"},
	"remote.storage.enable":                   {kind: cfgNoTiering, def: "false"},
	"retention.bytes":                         {kind: cfgUnbounded, def: "-1"},
	"retention.ms":                            {kind: cfgLong, def: "604800000", min: -1},
	"segment.bytes":                           {kind: cfgInt, def: "1073741824", min: 1 << 20},
	"segment.index.bytes":                     {kind: cfgInt, def: "10485760", min: 4},
	"segment.jitter.ms":                       {kind: cfgLong, def: "0", min: 0},
	"segment.ms":                              {kind: cfgLong, def: "604800000", min: 1},
	"unclean.leader.election.enable":          {kind: cfgBool, def: "false"},
}

var throttledReplicas = regexp.MustCompile(`^\s*(\*|[0-9]+:[0-9]+(\s*,\s*[0-9]+:[0-9]+)*\s*,?)\s*$`)

// validateTopicConfig checks one config of a new topic as Kafka does and
// returns Kafka's reason when it refuses it.
func validateTopicConfig(name, value string) error {
	spec, ok := topicConfigSpecs[name]
	if !ok {
		return fmt.Errorf("unknown topic config name: %s", name)
	}
	invalid := func(why string) error {
		return fmt.Errorf("invalid value %s for configuration %s: %s", value, name, why)
	}
	v := strings.TrimSpace(value)
	inRange := func(n float64) error {
		switch {
		case n < spec.min:
			return invalid(fmt.Sprintf("value must be at least %v", spec.min))
		case spec.max != 0 && n > spec.max:
			return invalid(fmt.Sprintf("value must be no more than %v", spec.max))
		}
		return nil
	}
	switch spec.kind {
	case cfgLong, cfgUnbounded:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return invalid("not a number of type LONG")
		}
		if spec.kind == cfgUnbounded {
			return nil
		}
		return inRange(float64(n))
	case cfgInt, cfgGzipLevel:
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return invalid("not a number of type INT")
		}
		if spec.kind == cfgGzipLevel {
			if n != -1 && (n < 1 || n > 9) {
				return invalid("value must be between 1 and 9 or equal to -1")
			}
			return nil
		}
		return inRange(float64(n))
	case cfgDouble:
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(n) {
			return invalid("not a number of type DOUBLE")
		}
		return inRange(n)
	case cfgBool, cfgNoTiering:
		if !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
			return invalid("expected value to be either true or false")
		}
		if spec.kind == cfgNoTiering && strings.EqualFold(v, "true") {
			return fmt.Errorf("tiered storage is disabled in the broker: %s cannot be enabled", name)
		}
	case cfgEnum:
		if !containsString(spec.values, v) {
			return invalid("string must be one of: " + strings.Join(spec.values, ", "))
		}
	case cfgList:
		if v == "" {
			return nil
		}
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			switch {
			case item == "":
				return fmt.Errorf("configuration %q values must not be empty", name)
			case !containsString(spec.values, item):
				return invalid("string must be one of: " + strings.Join(spec.values, ", "))
			}
		}
	case cfgThrottled:
		if v != "" && !throttledReplicas.MatchString(v) {
			return invalid("must be the literal '*' or a list of replicas in the format [partitionId]:[brokerId],...")
		}
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// topicConfigSource numbers, as CreateTopics and DescribeConfigs name them.
const (
	configSourceDynamicTopic int8 = 1
	configSourceDefault      int8 = 5
)

// topicConfigEntry is one config of a topic as CreateTopics lists it.
type topicConfigEntry struct {
	name, value string
	source      int8
}

// effectiveTopicConfigs lists every topic config Kafka knows, in name
// order: the topic's own value where it set one, the default otherwise.
func effectiveTopicConfigs(set map[string]string) []topicConfigEntry {
	out := make([]topicConfigEntry, 0, len(topicConfigSpecs))
	for name, spec := range topicConfigSpecs {
		e := topicConfigEntry{name: name, value: spec.def, source: configSourceDefault}
		if v, ok := set[name]; ok {
			e.value, e.source = v, configSourceDynamicTopic
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
