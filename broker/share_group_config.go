package broker

// Group configs (resource type 32, GROUP): dynamic per-group settings kept
// by the cluster, as Kafka keeps them in its controller metadata. They may
// be set before the group exists and survive its deletion. DescribeConfigs
// (32_describe_configs.go) lists them; IncrementalAlterConfigs
// (44_incremental_alter_configs.go) changes them after validating every
// value. A change applies from the next decision that reads it: a new lock
// duration to the next acquisition, a new delivery limit to the next
// release.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupConfigDef is one supported group config.
type groupConfigDef struct {
	name string
	typ  kmsg.ConfigType
	doc  string
	def  func(c *Cluster) string
	// min and max bound an int config; values lists a string config's
	// allowed values.
	min, max int64
	values   []string
}

func constDefault(v string) func(*Cluster) string { return func(*Cluster) string { return v } }

var groupConfigDefs = []groupConfigDef{
	{
		name: "share.auto.offset.reset", typ: kmsg.ConfigTypeString,
		doc:    "Where a share group starts reading a partition it has no state for: latest (the high watermark) or earliest (the log start).",
		def:    constDefault("latest"),
		values: []string{"latest", "earliest"},
	},
	{
		name: "share.record.lock.duration.ms", typ: kmsg.ConfigTypeInt,
		doc: "How long a share group member holds an acquired record before it becomes available again.",
		def: func(c *Cluster) string { return strconv.FormatInt(c.cfg.shareLockDuration.Milliseconds(), 10) },
		min: 100, max: 3_600_000,
	},
	{
		name: "share.delivery.count.limit", typ: kmsg.ConfigTypeInt,
		doc: "How many times a record is delivered before it is archived instead of made available again.",
		def: func(c *Cluster) string { return strconv.FormatInt(int64(c.cfg.shareDeliveryLimit), 10) },
		min: 2, max: 10,
	},
	{
		name: "share.session.timeout.ms", typ: kmsg.ConfigTypeInt,
		doc: "How long a share group member may go without a heartbeat before it is fenced and its records are released.",
		def: constDefault("45000"),
		min: 1000, max: 3_600_000,
	},
	{
		name: "share.heartbeat.interval.ms", typ: kmsg.ConfigTypeInt,
		doc: "The heartbeat interval share group members are told to use.",
		def: constDefault("5000"),
		min: 100, max: 3_600_000,
	},
}

func groupConfigDefFor(name string) *groupConfigDef {
	for i := range groupConfigDefs {
		if groupConfigDefs[i].name == name {
			return &groupConfigDefs[i]
		}
	}
	return nil
}

// validate checks a value of the config.
func (d *groupConfigDef) validate(v string) error {
	if d.typ == kmsg.ConfigTypeInt {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not an integer", d.name, v)
		}
		if n < d.min || n > d.max {
			return fmt.Errorf("%s: %d is not in [%d, %d]", d.name, n, d.min, d.max)
		}
		return nil
	}
	for _, ok := range d.values {
		if v == ok {
			return nil
		}
	}
	return fmt.Errorf("%s: %q is not one of %v", d.name, v, d.values)
}

// groupConfigValue returns the effective value of a group config: the one
// set for group, else the default. It returns "" for an unknown name.
func (c *Cluster) groupConfigValue(group, name string) string {
	if v, ok := c.coordinators.share.groupConfigs[group][name]; ok {
		return v
	}
	if d := groupConfigDefFor(name); d != nil {
		return d.def(c)
	}
	return ""
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

func (sc *shareCoordinator) autoOffsetReset(group string) string {
	return sc.c.groupConfigValue(group, "share.auto.offset.reset")
}

func (sc *shareCoordinator) sessionTimeout(group string) time.Duration {
	return time.Duration(sc.intConfig(group, "share.session.timeout.ms")) * time.Millisecond
}

func (sc *shareCoordinator) heartbeatInterval(group string) time.Duration {
	return time.Duration(sc.intConfig(group, "share.heartbeat.interval.ms")) * time.Millisecond
}

// alterGroupConfigs applies IncrementalAlterConfigs operations to a group's
// configs, all or none. Every named config must be known; SET needs a valid
// value; APPEND and SUBTRACT apply to list configs only, and there are
// none.
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
			if err := d.validate(*op.Value); err != nil {
				return err
			}
			next[op.Name] = *op.Value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(next, op.Name)
		default:
			return fmt.Errorf("%s: operation %v is not supported: group configs take SET and DELETE (none is a list)", op.Name, op.Op)
		}
	}
	if validateOnly {
		return nil
	}
	if len(next) == 0 {
		delete(c.coordinators.share.groupConfigs, group)
	} else {
		c.coordinators.share.groupConfigs[group] = next
	}
	c.logger.Info("group configs altered", "group", group, "configs", next)
	return nil
}
