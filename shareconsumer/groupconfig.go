package shareconsumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/internal/retry"
)

// GroupConfig is the part of a share group's configuration that decides
// what its members read and how long they may hold it: the group configs
// (resource type GROUP) that the cluster keeps for the group, set before
// the group exists or while it runs. A zero field leaves that config as
// it is.
type GroupConfig struct {
	// AutoOffsetReset is share.auto.offset.reset: where the group starts
	// reading a partition it has no state for. "latest" (Kafka's
	// default) skips every record written before the group began, so a
	// program that writes its input first and then starts its consumer
	// reads nothing; "earliest" reads from the log start;
	// "by_duration:<ISO-8601 duration>" from that long ago.
	AutoOffsetReset string
	// RecordLockDuration is share.record.lock.duration.ms: how long a
	// member holds an acquired record before it becomes available again
	// (the consumer renews the locks of records staged in a transaction).
	// Whole milliseconds.
	RecordLockDuration time.Duration
	// DeliveryCountLimit is share.delivery.count.limit: how many times a
	// record is delivered before it is archived instead.
	DeliveryCountLimit int32
	// IsolationLevel is share.isolation.level: "read_committed" delivers
	// the records of committed transactions only (what a pipeline that
	// reads another exactly-once pipeline's output wants),
	// "read_uncommitted" (Kafka's default) every record.
	IsolationLevel string
}

// The values of GroupConfig's string fields.
const (
	ResetEarliest   = "earliest"
	ResetLatest     = "latest"
	ReadCommitted   = "read_committed"
	ReadUncommitted = "read_uncommitted"
)

// configs validates g and returns it as IncrementalAlterConfigs SET
// operations; the cluster validates the values again.
func (g GroupConfig) configs() ([]kmsg.IncrementalAlterConfigsRequestResourceConfig, error) {
	var out []kmsg.IncrementalAlterConfigsRequestResourceConfig
	set := func(name, value string) {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = name, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(value)
		out = append(out, c)
	}
	switch r := g.AutoOffsetReset; {
	case r == "":
	case r == ResetEarliest || r == ResetLatest || strings.HasPrefix(r, "by_duration:"):
		set("share.auto.offset.reset", r)
	default:
		return nil, fmt.Errorf("AutoOffsetReset %q: not earliest, latest or by_duration:<duration>", r)
	}
	switch d := g.RecordLockDuration; {
	case d == 0:
	case d < time.Millisecond || d%time.Millisecond != 0 || d/time.Millisecond > 1<<31-1:
		return nil, fmt.Errorf("RecordLockDuration %v: not a positive whole number of milliseconds that fits 32 bits", d)
	default:
		set("share.record.lock.duration.ms", strconv.FormatInt(d.Milliseconds(), 10))
	}
	switch n := g.DeliveryCountLimit; {
	case n == 0:
	case n < 0:
		return nil, fmt.Errorf("DeliveryCountLimit %d is negative", n)
	default:
		set("share.delivery.count.limit", strconv.Itoa(int(n)))
	}
	switch l := g.IsolationLevel; l {
	case "":
	case ReadCommitted, ReadUncommitted:
		set("share.isolation.level", l)
	default:
		return nil, fmt.Errorf("IsolationLevel %q: not read_committed or read_uncommitted", l)
	}
	return out, nil
}

// SetGroupConfig makes the consumer set cfg on its share group before it
// first joins the group (with IncrementalAlterConfigs, as
// AlterGroupConfig does), so that its first fetch already follows it. New
// fails with kshare.ErrUsage for a value that is invalid on its face. If
// the cluster refuses the configs, the consumer never joins, and every
// Poll returns why: kshare.ErrUsage (a value the cluster refuses),
// kshare.ErrFatal (not authorized) or kshare.ErrUnsupported (the cluster
// has no group configs). Every member that sets them sets the same values
// on the one group: give them all the same cfg.
func SetGroupConfig(cfg GroupConfig) Opt {
	return optFunc(func(c *config) { c.groupConfig = &cfg })
}

// AlterGroupConfig sets cfg on share group group through cl (for
// example Producer.Client() or Consumer.Client(), or any kgo client of
// the cluster), with IncrementalAlterConfigs on resource type GROUP. The
// group need not exist yet. It retries retriable errors within ctx. It
// returns nil once the cluster applied every config, or an error:
// kshare.ErrUsage for an invalid value (checked first, or refused by the
// cluster), a nil ctx or client, or an empty group; kshare.ErrFatal when
// the client is not authorized; kshare.ErrUnsupported when the cluster
// has no group configs; kshare.ErrAbortable when ctx ended first (nothing
// or everything may have been applied: call it again).
func AlterGroupConfig(ctx context.Context, cl *kgo.Client, group string, cfg GroupConfig) error {
	const op = "alter share group config"
	switch {
	case ctx == nil:
		return errNilContext(op)
	case cl == nil:
		return errs.Usage(op, errors.New("nil client"))
	case group == "":
		return errs.Usage(op, errors.New("empty group id"))
	}
	configs, err := cfg.configs()
	if err != nil {
		return errs.Usage(op, err)
	}
	if len(configs) == 0 {
		return nil
	}
	return alterGroupConfigs(ctx, cl, op, group, configs)
}

func alterGroupConfigs(ctx context.Context, cl *kgo.Client, op, group string, configs []kmsg.IncrementalAlterConfigsRequestResourceConfig) error {
	_, err := retry.Do(ctx, func(ctx context.Context) (struct{}, error) {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
		res.Configs = configs
		req.Resources = append(req.Resources, res)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			if retry.IsContextErr(err) || errors.Is(err, kgo.ErrClientClosed) {
				return struct{}{}, retry.Permanent(err)
			}
			return struct{}{}, err
		}
		if len(resp.Resources) != 1 {
			return struct{}{}, retry.Permanent(errs.Fatal(op, fmt.Errorf("the cluster answered %d resources for 1", len(resp.Resources))))
		}
		r := resp.Resources[0]
		kerrErr := kerr.ErrorForCode(r.ErrorCode)
		if kerrErr == nil {
			return struct{}{}, nil
		}
		cause := fmt.Errorf("group %q: %w%s", group, kerrErr, kgoclient.Detail(r.ErrorMessage))
		switch r.ErrorCode {
		case kerr.InvalidConfig.Code, kerr.InvalidRequest.Code:
			return struct{}{}, retry.Permanent(errs.Usage(op, cause))
		case kerr.UnsupportedVersion.Code:
			return struct{}{}, retry.Permanent(errs.Unsupported(op, cause))
		}
		if kerr.IsRetriable(kerrErr) {
			return struct{}{}, cause
		}
		return struct{}{}, retry.Permanent(errs.Fatal(op, cause))
	})
	if err == nil || errs.Is(err) {
		return err
	}
	return errs.Abortable(op, err)
}

// applyGroupConfig sets the SetGroupConfig configs before the first join,
// retrying until they are applied or refused, or the consumer closes. A
// refusal makes every Poll fail; it returns false then.
func (c *Consumer) applyGroupConfig() bool {
	if len(c.cfg.groupConfigs) == 0 {
		return true
	}
	err := alterGroupConfigs(c.hbCtx, c.cl, "set share group config", c.cfg.group, c.cfg.groupConfigs)
	if err == nil {
		c.logger.Debug("share group configs set", "configs", len(c.cfg.groupConfigs))
		return true
	}
	if c.hbCtx.Err() != nil {
		return false
	}
	if !errors.Is(err, kshare.ErrAbortable) {
		c.mu.Lock()
		c.stickLocked(err)
		c.mu.Unlock()
	}
	return false
}
