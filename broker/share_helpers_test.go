package broker

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// shareSetGroupConfigs sets group configs with IncrementalAlterConfigs.
func shareSetGroupConfigs(t testing.TB, cl *kgo.Client, group string, kvs ...string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i+1 < len(kvs); i += 2 {
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Value = kvs[i], &kvs[i+1]
		res.Configs = append(res.Configs, cfg)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(testCtx(t), cl)
	require.NoError(t, err)
	require.Len(t, resp.Resources, 1)
	require.NoError(t, kerr.ErrorForCode(resp.Resources[0].ErrorCode), "altering group configs %v", kvs)
}

// shareProduce writes values round-robin over the topic's partitions and
// returns, for each value, where it landed.
func shareProduce(t testing.TB, cl *kgo.Client, topic string, partitions int32, values ...string) map[string]kgo.Record {
	t.Helper()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(v)}
	}
	results := cl.ProduceSync(testCtx(t), recs...)
	require.NoError(t, results.FirstErr())
	out := make(map[string]kgo.Record, len(values))
	for _, r := range results {
		out[string(r.Record.Value)] = *r.Record
	}
	return out
}

// shareValues returns n distinct values with a prefix.
func shareValues(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + "-" + strconv.Itoa(i)
	}
	return out
}

// shareProducer returns a client that produces with a manual partitioner.
func shareProducer(t testing.TB, c *Cluster) *kgo.Client {
	return newTestClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

// shareConsumer returns a kgo share-group consumer of topic.
func shareConsumer(t testing.TB, c *Cluster, group, topic string, opts ...kgo.Opt) *kgo.Client {
	return newTestClient(t, c, append([]kgo.Opt{
		kgo.ShareGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}, opts...)...)
}

// sharePoll polls cl once with a bound, failing the test on fetch errors
// other than the context ending.
func sharePoll(t testing.TB, ctx context.Context, cl *kgo.Client) []*kgo.Record {
	t.Helper()
	pollCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	fs := cl.PollRecords(pollCtx, 1000)
	fs.EachError(func(topic string, p int32, err error) {
		if ctx.Err() == nil && pollCtx.Err() == nil {
			t.Errorf("share fetch %s/%d: %v", topic, p, err)
		}
	})
	return fs.Records()
}

// shareDelivery is one record a share consumer received.
type shareDelivery struct {
	consumer int
	value    string
	count    int32
}

// shareCollector gathers deliveries from several goroutines.
type shareCollector struct {
	mu   sync.Mutex
	seen []shareDelivery
}

func (sc *shareCollector) add(d shareDelivery) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.seen = append(sc.seen, d)
}

func (sc *shareCollector) snapshot() []shareDelivery {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return append([]shareDelivery(nil), sc.seen...)
}

// shareOffsets describes a share group's start offsets by partition
// through DescribeShareGroupOffsets at the group coordinator.
func shareOffsets(t testing.TB, cl *kgo.Client, group, topic string) map[int32]kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition {
	t.Helper()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(testCtx(t), cl)
	require.NoError(t, err)
	require.Len(t, resp.Groups, 1)
	require.NoError(t, kerr.ErrorForCode(resp.Groups[0].ErrorCode))
	out := map[int32]kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition{}
	for _, rt := range resp.Groups[0].Topics {
		if rt.Topic != topic {
			continue
		}
		for _, rp := range rt.Partitions {
			out[rp.Partition] = rp
		}
	}
	return out
}

// shareEventually polls cond until it holds or the test context ends.
func shareEventually(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// shareRecordStates returns how many records of a share-partition are in
// each state at its leader, white-box.
func shareRecordStates(t testing.TB, c *Cluster, group, topic string, partition int32) map[shareRecordState]int {
	t.Helper()
	var out map[shareRecordState]int
	require.NoError(t, c.do(func() {
		tp := c.topics[topic]
		sp := c.coordinators.share.live[shareKey{group: group, topicID: tp.id, partition: partition}]
		if sp != nil {
			out = sp.counts()
		}
	}))
	return out
}

func shareName(t testing.TB) string { return fmt.Sprintf("s%d", time.Now().UnixNano()%1e9) }
