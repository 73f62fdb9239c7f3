package differential_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

func scenarioFindCoordinator(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("fc")
	id := tg.createTopic(ctx, topic, 1)
	where := func(code int16, node int32, host string, port int32) string {
		if code != 0 {
			return errName(code)
		}
		self := node == tg.node && host != "" && port > 0
		return fmt.Sprintf("OK self=%t", self)
	}
	single := func(step string, version int16, keyType int8, key string) {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType, req.CoordinatorKey = keyType, key
		resp := tg.send(ctx, version, req).(*kmsg.FindCoordinatorResponse)
		tr.add(step, "%s", where(resp.ErrorCode, resp.NodeID, resp.Host, resp.Port))
	}
	batched := func(step string, keyType int8, keys ...string) {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType, req.CoordinatorKeys = keyType, keys
		resp := tg.send(ctx, vFindBatched, req).(*kmsg.FindCoordinatorResponse)
		var out []string
		for _, c := range resp.Coordinators {
			key := strings.ReplaceAll(c.Key, tg.prefix, "")
			key = strings.ReplaceAll(key, base64.RawURLEncoding.EncodeToString(id[:]), "<topicId>")
			out = append(out, fmt.Sprintf("%s=%s", key, where(c.ErrorCode, c.NodeID, c.Host, c.Port)))
		}
		tr.add(step, "top=%s [%s]", errName(resp.ErrorCode), strings.Join(out, " "))
	}
	shareKey := tg.name("sg") + ":" + base64.RawURLEncoding.EncodeToString(id[:]) + ":0"

	single("group, v3", vFindCoordinator, 0, tg.name("group"))
	single("transaction, v3", vFindCoordinator, 1, tg.name("txn"))
	single("share, v3", vFindCoordinator, 2, shareKey)
	single("invalid type 3, v3", vFindCoordinator, 3, tg.name("x"))
	single("empty group id, v3", vFindCoordinator, 0, "")
	single("empty transactional id, v3", vFindCoordinator, 1, "")
	single("group, v0", 0, 0, tg.name("group"))
	batched("two groups, batched", 0, tg.name("g1"), tg.name("g2"))
	batched("transactions, batched", 1, tg.name("t1"), tg.name("t2"))
	batched("share key, batched", 2, shareKey)
	uuid := base64.RawURLEncoding.EncodeToString(id[:])
	for _, k := range []struct{ what, key string }{
		{"without colons", tg.name("no-colons")},
		{"with a malformed topic id", tg.name("sg") + ":not-a-uuid:0"},
		{"with a non-numeric partition", tg.name("sg") + ":" + uuid + ":x"},
		{"with a negative partition", tg.name("sg") + ":" + uuid + ":-1"},
		{"with an empty group", ":" + uuid + ":0"},
		{"with an empty topic id", tg.name("sg") + "::0"},
		{"with four parts", tg.name("sg") + ":" + uuid + ":0:1"},
		{"with the zero topic id", tg.name("sg") + ":AAAAAAAAAAAAAAAAAAAAAA:0"},
		{"with an unknown topic id", tg.name("sg") + ":AAAAAAAAAAAAAAAAAAAAAQ:0"},
		{"with a padded topic id", tg.name("sg") + ":" + base64.URLEncoding.EncodeToString(id[:]) + ":0"},
	} {
		batched("share key "+k.what+", batched", 2, k.key)
	}
	batched("invalid type 5, batched", 5, tg.name("g1"))
	batched("empty keys, batched", 1, "", tg.name("t3"))
	batched("no keys, batched", 0)
}

// sdkKeys are the API keys kshare's clients, kgo and the Java clients of
// the test matrix send; their version ranges are compared one by one.
var sdkKeys = []int16{0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 22, 23, 24, 25, 26, 27, 28,
	32, 42, 44, 45, 46, 47, 61, 65, 66, 68, 69, 76, 77, 78, 79, 90, 91, 92, 95, 96}

func scenarioApiVersions(ctx context.Context, tg *target, tr *transcript) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "kshare-differential", "1"
	resp := tg.send(ctx, vApiVersions, req).(*kmsg.ApiVersionsResponse)
	tr.code("error", resp.ErrorCode)
	served := make(map[int16]kmsg.ApiVersionsResponseApiKey)
	for _, k := range resp.ApiKeys {
		served[k.ApiKey] = k
	}
	sdk := make(map[int16]bool)
	for _, key := range sdkKeys {
		sdk[key] = true
		name := wire.NameForKey(key)
		if k, ok := served[key]; ok {
			tr.add(fmt.Sprintf("key %02d %s", key, name), "v%d-%d", k.MinVersion, k.MaxVersion)
		} else {
			tr.add(fmt.Sprintf("key %02d %s", key, name), "not served")
		}
	}
	var others []string
	for _, k := range resp.ApiKeys {
		if !sdk[k.ApiKey] {
			others = append(others, fmt.Sprintf("%d", k.ApiKey))
		}
	}
	tr.add("other keys served", "%s", strings.Join(others, " "))
	var finalized []string
	for _, f := range resp.FinalizedFeatures {
		finalized = append(finalized, fmt.Sprintf("%s=%d", f.Name, f.MaxVersionLevel))
	}
	sort.Strings(finalized)
	tr.add("finalized features", "%s", strings.Join(finalized, " "))
}

// groupConfigs describes one group's configs (all when names is nil).
func (tg *target) groupConfigs(ctx context.Context, group string, names []string) string {
	tg.t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeGroupConfig, group, names
	req.Resources = append(req.Resources, res)
	resp := tg.send(ctx, vDescribeConfigs, req).(*kmsg.DescribeConfigsResponse)
	if len(resp.Resources) != 1 {
		return fmt.Sprintf("%d resources answered", len(resp.Resources))
	}
	r := resp.Resources[0]
	if r.ErrorCode != 0 {
		return errName(r.ErrorCode)
	}
	var out []string
	for _, c := range r.Configs {
		v := "<null>"
		if c.Value != nil {
			v = *c.Value
		}
		out = append(out, fmt.Sprintf("%s=%s(source=%d readOnly=%t type=%d)", c.Name, v, c.Source, c.ReadOnly, c.ConfigType))
	}
	sort.Strings(out)
	return "OK " + strings.Join(out, " ")
}

// groupConfigsSettled describes a group's configs until the answer contains
// want, or gives the last answer after a while: the real Kafka applies a
// group config through its metadata log and describes it a moment after it
// answered the alteration, so describing at once can show the old value.
func (tg *target) groupConfigsSettled(ctx context.Context, group string, names []string, want string) string {
	tg.t.Helper()
	return tg.eventually(ctx, func() string { return tg.groupConfigs(ctx, group, names) },
		func(s string) bool { return strings.Contains(s, want) })
}

// alterGroupConfig sets (op 0) or deletes (op 1) one group config.
func (tg *target) alterGroupConfig(ctx context.Context, group string, op int8, name string, value *string, validateOnly bool) string {
	tg.t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.ValidateOnly = validateOnly
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = name, kmsg.IncrementalAlterConfigOp(op), value
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp := tg.send(ctx, vIncrAlter, req).(*kmsg.IncrementalAlterConfigsResponse)
	if len(resp.Resources) != 1 {
		return fmt.Sprintf("%d resources answered", len(resp.Resources))
	}
	return errName(resp.Resources[0].ErrorCode)
}

func scenarioGroupConfigs(ctx context.Context, tg *target, tr *transcript) {
	group := tg.name("cfg-group")
	key := "share.auto.offset.reset"
	settled := func(names []string, want string) string {
		return tg.groupConfigsSettled(ctx, group, names, want)
	}
	tr.add("describe before", "%s", tg.groupConfigs(ctx, group, []string{key}))
	tr.add("set earliest, validate only", "%s", tg.alterGroupConfig(ctx, group, 0, key, kmsg.StringPtr("earliest"), true))
	tr.add("after validate only", "%s", tg.groupConfigs(ctx, group, []string{key}))
	tr.add("set earliest", "%s", tg.alterGroupConfig(ctx, group, 0, key, kmsg.StringPtr("earliest"), false))
	tr.add("describe after set", "%s", settled([]string{key}, "=earliest("))
	tr.add("set an invalid value", "%s", tg.alterGroupConfig(ctx, group, 0, key, kmsg.StringPtr("sometimes"), false))
	tr.add("set by_duration", "%s", tg.alterGroupConfig(ctx, group, 0, key, kmsg.StringPtr("by_duration:PT1H"), false))
	tr.add("describe after by_duration", "%s", settled([]string{key}, "=by_duration:PT1H("))
	tr.add("set an unknown config", "%s", tg.alterGroupConfig(ctx, group, 0, "no.such.group.config", kmsg.StringPtr("1"), false))
	tr.add("set share.record.lock.duration.ms below the minimum", "%s", tg.alterGroupConfig(ctx, group, 0, "share.record.lock.duration.ms", kmsg.StringPtr("10"), false))
	tr.add("set share.delivery.count.limit 3", "%s", tg.alterGroupConfig(ctx, group, 0, "share.delivery.count.limit", kmsg.StringPtr("3"), false))
	tr.add("append to a non-list config", "%s", tg.alterGroupConfig(ctx, group, 2, key, kmsg.StringPtr("earliest"), false))
	tr.add("delete", "%s", tg.alterGroupConfig(ctx, group, 1, key, nil, false))
	tr.add("describe after delete", "%s", settled([]string{key}, "=latest(source=5"))
	tr.add("empty group name", "%s", tg.alterGroupConfig(ctx, "", 0, key, kmsg.StringPtr("earliest"), false))
	// Every config with its value, source and type: the defaults, and
	// share.delivery.count.limit as set above.
	tr.add("every group config", "%s", settled(nil, "share.delivery.count.limit=3("))
}
