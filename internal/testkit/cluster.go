package testkit

import (
	"context"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Timeout bounds the context of every test (Context), so that a broken
// test fails instead of hanging.
const Timeout = 90 * time.Second

// Context returns a context that ends after Timeout or when the test ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// RefusedAddr returns a loopback address that nothing listens on: a seed
// broker that refuses every connection.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// Client returns a kgo client on seeds, with opts, that the test closes.
func Client(t testing.TB, seeds []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// Logger logs at debug level to stderr when KSHARE_TEST_DEBUG is set, and
// discards everything otherwise.
func Logger() *slog.Logger {
	if os.Getenv("KSHARE_TEST_DEBUG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// CreateTopic creates topic with replication factor 1 and requires that
// every topic of the answer was created.
func CreateTopic(ctx context.Context, t testing.TB, cl *kgo.Client, topic string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err, "create topic %s", topic)
	for _, rt := range resp.Topics {
		require.NoError(t, kerr.ErrorForCode(rt.ErrorCode), "create topic %s", rt.Topic)
	}
}

// SetGroupConfigs sets configs of a share group (name, value pairs, such
// as "share.auto.offset.reset", "earliest") with IncrementalAlterConfigs
// on resource type GROUP.
func SetGroupConfigs(ctx context.Context, t testing.TB, cl *kgo.Client, group string, kvs ...string) {
	t.Helper()
	require.NoError(t, AlterGroupConfigs(ctx, t, cl, group, kmsg.IncrementalAlterConfigOpSet, kvs...), "group configs %v of %s", kvs, group)
}

// AlterGroupConfigs sends one IncrementalAlterConfigs request that applies
// op to each name, value pair of kvs in group's configs (DELETE sends no
// value), and returns the resource's error; a failed round trip fails t.
func AlterGroupConfigs(ctx context.Context, t testing.TB, cl *kgo.Client, group string, op kmsg.IncrementalAlterConfigOp, kvs ...string) error {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i+1 < len(kvs); i += 2 {
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Op = kvs[i], op
		if op != kmsg.IncrementalAlterConfigOpDelete {
			cfg.Value = kmsg.StringPtr(kvs[i+1])
		}
		res.Configs = append(res.Configs, cfg)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err, "group configs of %s", group)
	require.Len(t, resp.Resources, 1, "group configs of %s", group)
	return kerr.ErrorForCode(resp.Resources[0].ErrorCode)
}

// ProduceRoundRobin writes values to topic, the i-th to partition
// i % partitions, and requires that each is written. cl must use
// kgo.ManualPartitioner, so that the partitions stand as given.
func ProduceRoundRobin(ctx context.Context, t testing.TB, cl *kgo.Client, topic string, partitions int32, values ...string) {
	t.Helper()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(v)}
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

// StartOffsets returns the share group's start offset of every partition
// of topic (DescribeShareGroupOffsets): every offset below it is
// ACKNOWLEDGED or ARCHIVED.
func StartOffsets(ctx context.Context, t testing.TB, cl *kgo.Client, group, topic string) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err, "describe share group offsets of %s", group)
	require.Len(t, resp.Groups, 1, "describe share group offsets of %s", group)
	require.NoError(t, kerr.ErrorForCode(resp.Groups[0].ErrorCode), "describe share group offsets of %s", group)
	out := make(map[int32]int64)
	for _, rt := range resp.Groups[0].Topics {
		if rt.Topic != topic {
			continue
		}
		for _, rp := range rt.Partitions {
			out[rp.Partition] = rp.StartOffset
		}
	}
	return out
}

// Eventually checks cond every 20ms until it holds, and fails the test,
// naming what it waited for, if ctx ends first.
func Eventually(ctx context.Context, t testing.TB, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
