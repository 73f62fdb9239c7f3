package broker

// Group configs (resource type 32, GROUP): dynamic per-group settings kept
// by the cluster, as Kafka keeps them in its controller metadata. They may
// be set before the group exists and survive its deletion. DescribeConfigs
// (32_describe_configs.go) lists them; IncrementalAlterConfigs
// (44_incremental_alter_configs.go) changes them after validating every
// value. A change applies from the next decision that reads it: a new lock
// duration to the next acquisition, a new delivery limit to the next
// release.
//
// The set is Kafka 4.4's (GroupConfig), with its defaults, types and
// validation, so that tools see what they see on Kafka. The share configs
// are enforced, with wider bounds than Kafka's default broker bounds for
// the lock duration, session timeout and heartbeat interval (tests use
// short ones; a Kafka broker lowers its bounds with
// group.share.min.record.lock.duration.ms and the like). The KIP-848
// consumer group configs consumer.session.timeout.ms and
// consumer.heartbeat.interval.ms are enforced with Kafka's bounds; their
// defaults are the cluster's (ConsumerGroupSessionTimeout,
// ConsumerGroupHeartbeatInterval). The streams.* configs (streams groups
// are not served), consumer.assignment.interval.ms and
// share.assignment.interval.ms (assignment is synchronous here) are
// validated and listed but change nothing. The errors.deadletterqueue.*
// configs drive the dead-letter queue (share_dlq.go); as on Kafka, setting
// the topic name only refuses a name starting with "__".

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupConfigDef is one group config.
type groupConfigDef struct {
	name string
	typ  kmsg.ConfigType
	doc  string
	def  func(c *Cluster) string
	// min and max bound an int config, unless bounds (the cluster's
	// settings) does.
	min, max int64
	bounds   func(cfg *config) (min, max int64)
	// check validates a string or list config; nil accepts anything.
	check func(v string) error
}

func constDefault(v string) func(*Cluster) string { return func(*Cluster) string { return v } }

func oneOf(values ...string) func(string) error {
	return func(v string) error {
		if slices.Contains(values, v) {
			return nil
		}
		return fmt.Errorf("%q is not one of %s", v, strings.Join(values, ", "))
	}
}

// groupConfigDefs is the group config set, sorted by name.
var groupConfigDefs = []groupConfigDef{
	{
		name: "consumer.assignment.interval.ms", typ: kmsg.ConfigTypeInt, def: constDefault("1000"), min: 0, max: 15000,
		doc: "How often the assignment of a consumer group (KIP-848) is recomputed. Not used: the bundled broker assigns on every heartbeat that changes the group.",
	},
	{
		name: "consumer.heartbeat.interval.ms", typ: kmsg.ConfigTypeInt, min: 5000, max: 15000,
		doc: "The heartbeat interval consumer group (KIP-848) members are told to use.",
		def: func(c *Cluster) string { return strconv.FormatInt(c.cfg.consumerHeartbeatInterval.Milliseconds(), 10) },
	},
	{
		name: "consumer.session.timeout.ms", typ: kmsg.ConfigTypeInt, min: 45000, max: 60000,
		doc: "How long a consumer group (KIP-848) member may go without a heartbeat before it is fenced and its partitions reassigned.",
		def: func(c *Cluster) string { return strconv.FormatInt(c.cfg.consumerSessionTimeout.Milliseconds(), 10) },
	},
	{
		name: "errors.deadletterqueue.copy.record.enable", typ: kmsg.ConfigTypeBoolean, def: constDefault("false"),
		doc: "When writing onto the dead-letter queue topic, whether the record carries the original record's key and value, or only the context headers.",
	},
	{
		name: "errors.deadletterqueue.topic.name", typ: kmsg.ConfigTypeString, def: constDefault(""),
		doc: "The share group's dead-letter queue topic; empty (the default) for none. Records rejected or archived at the delivery limit are written to it.",
		check: func(v string) error {
			if strings.HasPrefix(v, "__") {
				return fmt.Errorf("a dead-letter queue topic may not start with __")
			}
			return nil
		},
	},
	{
		name: "share.assignment.interval.ms", typ: kmsg.ConfigTypeInt, def: constDefault("1000"), min: 0, max: 15000,
		doc: "How often a share group's assignment is recomputed. Not used: the bundled broker assigns on every heartbeat that changes the group.",
	},
	{
		name: "share.auto.offset.reset", typ: kmsg.ConfigTypeString, def: constDefault(shareResetLatest),
		doc: "Where a share group starts reading a partition it has no state for: latest (the high watermark), earliest (the log start), " +
			"or by_duration:<ISO-8601 duration, PnDTnHnMn.nS, not negative> (the first record whose timestamp is at or after now minus the duration; the high watermark when there is none).",
		check: func(v string) error {
			_, err := parseShareOffsetReset(v)
			return err
		},
	},
	{
		name: "share.delivery.count.limit", typ: kmsg.ConfigTypeInt, min: 2, max: 10,
		doc: "How many times a record is delivered before it is archived instead of made available again.",
		def: func(c *Cluster) string { return strconv.FormatInt(int64(c.cfg.shareDeliveryLimit), 10) },
	},
	{
		name: "share.heartbeat.interval.ms", typ: kmsg.ConfigTypeInt, def: constDefault("5000"), min: 100, max: 3_600_000,
		doc: "The heartbeat interval share group members are told to use.",
	},
	{
		name: "share.isolation.level", typ: kmsg.ConfigTypeString, def: constDefault(shareReadUncommitted),
		doc: "Which transactional records a share group delivers: read_uncommitted (every record up to the high watermark, " +
			"those of open and aborted transactions included) or read_committed (records up to the last stable offset, never those of aborted transactions).",
		check: oneOf(shareReadCommitted, shareReadUncommitted),
	},
	{
		name: "share.partition.max.record.locks", typ: kmsg.ConfigTypeInt, def: constDefault("2000"), min: 100, max: 4000,
		doc: "How many offsets a share-partition keeps in flight: no new batch is acquired while the window from the start offset holds this many.",
	},
	{
		name: "share.record.lock.duration.ms", typ: kmsg.ConfigTypeInt,
		doc: "How long a share group member holds an acquired record before it becomes available again.",
		def: func(c *Cluster) string { return strconv.FormatInt(c.cfg.shareLockDuration.Milliseconds(), 10) },
		bounds: func(cfg *config) (int64, int64) {
			return cfg.shareMinLock.Milliseconds(), cfg.shareMaxLock.Milliseconds()
		},
	},
	{
		name: "share.renew.acknowledge.enable", typ: kmsg.ConfigTypeBoolean, def: constDefault("true"),
		doc: "Whether members may renew their acquisition locks with the RENEW acknowledgement (KIP-1222).",
	},
	{
		name: "share.session.timeout.ms", typ: kmsg.ConfigTypeInt, def: constDefault("45000"), min: 1000, max: 3_600_000,
		doc: "How long a share group member may go without a heartbeat before it is fenced. As on Kafka, a fenced member keeps its records until its share session or that session's connection closes, or their locks expire.",
	},
	{
		name: "streams.assignment.interval.ms", typ: kmsg.ConfigTypeInt, def: constDefault("1000"), min: 0, max: 15000,
		doc: "How often a streams group's assignment is recomputed. Not used: streams groups are not served.",
	},
	{
		name: "streams.assignor.name", typ: kmsg.ConfigTypeString, def: constDefault("sticky"), check: oneOf("sticky"),
		doc: "The task assignor of a streams group. Not used: streams groups are not served.",
	},
	{
		name: "streams.heartbeat.interval.ms", typ: kmsg.ConfigTypeInt, def: constDefault("5000"), min: 5000, max: 15000,
		doc: "The heartbeat interval of streams group members. Not used: streams groups are not served.",
	},
	{
		name: "streams.initial.rebalance.delay.ms", typ: kmsg.ConfigTypeInt, def: constDefault("3000"), min: 0, max: math.MaxInt32,
		doc: "How long a new streams group waits for members before its first assignment. Not used: streams groups are not served.",
	},
	{
		name: "streams.num.standby.replicas", typ: kmsg.ConfigTypeInt, def: constDefault("0"), min: 0, max: 2,
		doc: "How many standby replicas each streams task has. Not used: streams groups are not served.",
	},
	{
		name: "streams.rack.aware.assignment.tags", typ: kmsg.ConfigTypeList, def: constDefault(""),
		doc: "Client tag keys a streams group spreads standby replicas over. Not used: streams groups are not served.",
		check: func(v string) error {
			seen := map[string]bool{}
			for _, tag := range strings.Split(v, ",") {
				if v != "" && tag == "" {
					return fmt.Errorf("a tag key is empty")
				}
				if seen[tag] {
					return fmt.Errorf("tag key %q is listed twice", tag)
				}
				seen[tag] = true
			}
			return nil
		},
	},
	{
		name: "streams.session.timeout.ms", typ: kmsg.ConfigTypeInt, def: constDefault("45000"), min: 45000, max: 60000,
		doc: "The session timeout of streams group members. Not used: streams groups are not served.",
	},
}

// Values of share.isolation.level and share.auto.offset.reset.
const (
	shareReadCommitted   = "read_committed"
	shareReadUncommitted = "read_uncommitted"
	shareResetLatest     = "latest"
	shareResetEarliest   = "earliest"
	shareResetByDuration = "by_duration:"
)

func groupConfigDefFor(name string) *groupConfigDef {
	for i := range groupConfigDefs {
		if groupConfigDefs[i].name == name {
			return &groupConfigDefs[i]
		}
	}
	return nil
}

// normalize validates a value of the config and returns it as it is kept:
// trimmed, as Kafka parses config values, and in canonical form for ints,
// booleans and lists.
func (d *groupConfigDef) normalize(cfg *config, v string) (string, error) {
	v = strings.TrimSpace(v)
	switch d.typ {
	case kmsg.ConfigTypeInt:
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return "", fmt.Errorf("%s: %q is not a 32-bit integer", d.name, v)
		}
		lo, hi, hint := d.min, d.max, ""
		if d.bounds != nil {
			lo, hi = d.bounds(cfg)
			hint = " (the broker's bounds: ShareLockDurationBounds, kshare-broker -min-lock-duration and -max-lock-duration; Kafka's group.share.min/max.record.lock.duration.ms)"
		}
		if n < lo || n > hi {
			return "", fmt.Errorf("%s: %d is not in [%d, %d]%s", d.name, n, lo, hi, hint)
		}
		return strconv.FormatInt(n, 10), nil
	case kmsg.ConfigTypeBoolean:
		switch strings.ToLower(v) {
		case "true", "false":
			return strings.ToLower(v), nil
		}
		return "", fmt.Errorf("%s: %q is neither true nor false", d.name, v)
	case kmsg.ConfigTypeList:
		items := strings.Split(v, ",")
		for i := range items {
			items[i] = strings.TrimSpace(items[i])
		}
		v = strings.Join(items, ",")
	}
	if d.check != nil {
		if err := d.check(v); err != nil {
			return "", fmt.Errorf("%s: %w", d.name, err)
		}
	}
	return v, nil
}

// groupConfigValue returns the effective value of a group config: the one
// set for group, else the cluster's default (GroupConfigDefault), else
// Kafka's. It returns "" for an unknown name.
func (c *Cluster) groupConfigValue(group, name string) string {
	if v, ok := c.coordinators.share.groupConfigs[group][name]; ok {
		return v
	}
	if v, ok := c.cfg.groupDefaults[name]; ok {
		return v
	}
	if d := groupConfigDefFor(name); d != nil {
		return d.def(c)
	}
	return ""
}

// normalizeGroupDefaults validates the GroupConfigDefault values as a SET
// of the config would, and keeps them normalized.
func (cfg *config) normalizeGroupDefaults() error {
	for name, v := range cfg.groupDefaults {
		d := groupConfigDefFor(name)
		if d == nil {
			return fmt.Errorf("broker: GroupConfigDefault(%q): unknown group config", name)
		}
		normalized, err := d.normalize(cfg, v)
		if err != nil {
			return fmt.Errorf("broker: GroupConfigDefault: %w", err)
		}
		cfg.groupDefaults[name] = normalized
	}
	return nil
}

func (sc *shareCoordinator) intConfig(group, name string) int64 {
	n, _ := strconv.ParseInt(sc.c.groupConfigValue(group, name), 10, 64) // validated on the way in
	return n
}

func (sc *shareCoordinator) lockDuration(group string) time.Duration {
	return time.Duration(sc.intConfig(group, "share.record.lock.duration.ms")) * time.Millisecond
}

func (sc *shareCoordinator) deliveryLimit(group string) int32 {
	return int32(sc.intConfig(group, "share.delivery.count.limit"))
}

func (sc *shareCoordinator) maxRecordLocks(group string) int {
	return int(sc.intConfig(group, "share.partition.max.record.locks"))
}

func (sc *shareCoordinator) readCommitted(group string) bool {
	return sc.c.groupConfigValue(group, "share.isolation.level") == shareReadCommitted
}

func (sc *shareCoordinator) renewEnabled(group string) bool {
	return sc.c.groupConfigValue(group, "share.renew.acknowledge.enable") == "true"
}

// autoOffsetReset returns the group's share.auto.offset.reset strategy.
func (sc *shareCoordinator) autoOffsetReset(group string) shareOffsetReset {
	r, err := parseShareOffsetReset(sc.c.groupConfigValue(group, "share.auto.offset.reset"))
	if err != nil { // validated on the way in; a default cannot fail
		sc.c.logger.Error("share.auto.offset.reset does not parse; using latest", "group", group, "err", err)
		return shareOffsetReset{}
	}
	return r
}

func (sc *shareCoordinator) sessionTimeout(group string) time.Duration {
	return time.Duration(sc.intConfig(group, "share.session.timeout.ms")) * time.Millisecond
}

func (sc *shareCoordinator) heartbeatInterval(group string) time.Duration {
	return time.Duration(sc.intConfig(group, "share.heartbeat.interval.ms")) * time.Millisecond
}

// alterGroupConfigs applies IncrementalAlterConfigs operations to a group's
// configs, all or none. Every named config must be known; SET needs a valid
// value; APPEND and SUBTRACT are refused, as Kafka refuses them for group
// configs, the list config included.
func (c *Cluster) alterGroupConfigs(group string, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig, validateOnly bool) error {
	next := make(map[string]string)
	for k, v := range c.coordinators.share.groupConfigs[group] {
		next[k] = v
	}
	for _, op := range ops {
		d := groupConfigDefFor(op.Name)
		if d == nil {
			return fmt.Errorf("unknown group config %q", op.Name)
		}
		switch op.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if op.Value == nil {
				return fmt.Errorf("%s: SET needs a value", op.Name)
			}
			normalized, err := d.normalize(&c.cfg, *op.Value)
			if err != nil {
				return err
			}
			next[op.Name] = normalized
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(next, op.Name)
		default:
			return fmt.Errorf("%s: operation %v is not supported: group configs take SET and DELETE", op.Name, op.Op)
		}
	}
	if validateOnly {
		return nil
	}
	sc := c.coordinators.share
	if len(next) == 0 {
		delete(sc.groupConfigs, group)
	} else {
		sc.groupConfigs[group] = next
	}
	if g := sc.groups[group]; g != nil {
		for _, m := range g.members {
			sc.armSession(g, m) // the session timeout may have changed
		}
	}
	c.logger.Info("group configs altered", "group", group, "configs", next)
	return nil
}
