package broker

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// batchOfSize builds a one-record batch of exactly size bytes, log
// overhead included.
func batchOfSize(t testing.TB, size int) []byte {
	t.Helper()
	for n := max(0, size-80); n <= size; n++ {
		if b := buildBatch([]kv{{value: make([]byte, n)}}, -1, -1, -1, false, false, time.Now()); len(b) == size {
			return b
		}
	}
	t.Fatalf("no one-record batch has %d bytes", size)
	return nil
}

// produceBatches sends one Produce request with a batch per partition of
// topic and returns each partition's error.
func produceBatches(t testing.TB, c *Cluster, topic string, batches map[int32][]byte) map[int32]error {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version = 12
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for p, b := range batches {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = p, b
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp := groupAwait(t, groupSend(t, c, 0, req)).(*kmsg.ProduceResponse)
	out := make(map[int32]error)
	for _, sp := range resp.Topics[0].Partitions {
		out[sp.Partition] = kerr.ErrorForCode(sp.ErrorCode)
	}
	return out
}

func endOffset(t testing.TB, c *Cluster, topic string, partition int32) int64 {
	t.Helper()
	var end int64
	require.NoError(t, c.do(func() { end = c.partitionOf(topic, partition).endOffset() }))
	return end
}

func setTopicConfig(t testing.TB, c *Cluster, topic, name, value string) {
	t.Helper()
	require.NoError(t, c.do(func() { c.topics[topic].configs[name] = value }))
}

// TestProduceMessageTooLarge: every batch is held to its topic's
// max.message.bytes (the whole batch, log overhead included), per
// partition, before its CRC is checked; the broker default is 1048588.
func TestProduceMessageTooLarge(t *testing.T) {
	c := newTestCluster(t) // one node leads every partition
	createTopic(t, c, "small", 2)
	setTopicConfig(t, c, "small", "max.message.bytes", "1024")

	errs := produceBatches(t, c, "small", map[int32][]byte{0: batchOfSize(t, 1024), 1: batchOfSize(t, 1025)})
	require.NoError(t, errs[0], "a batch of exactly the limit is accepted")
	require.ErrorIs(t, errs[1], kerr.MessageTooLarge, "one byte more is not, for that partition only")
	require.Equal(t, int64(1), endOffset(t, c, "small", 0))
	require.Equal(t, int64(0), endOffset(t, c, "small", 1), "nothing of the refused batch was written")

	corrupt := batchOfSize(t, 2000)
	corrupt[len(corrupt)-1] ^= 0xff
	require.ErrorIs(t, produceBatches(t, c, "small", map[int32][]byte{0: corrupt})[0], kerr.MessageTooLarge,
		"the size is checked before the CRC")
	corrupt = batchOfSize(t, 500)
	corrupt[len(corrupt)-1] ^= 0xff
	require.ErrorIs(t, produceBatches(t, c, "small", map[int32][]byte{0: corrupt})[0], kerr.CorruptMessage)

	createTopic(t, c, "default", 1)
	require.NoError(t, produceBatches(t, c, "default", map[int32][]byte{0: batchOfSize(t, defaultMaxMessageBytes)})[0])
	require.ErrorIs(t, produceBatches(t, c, "default", map[int32][]byte{0: batchOfSize(t, defaultMaxMessageBytes+1)})[0], kerr.MessageTooLarge)

	// A value stored without validation (IncrementalAlterConfigs keeps
	// topic configs as given) that does not parse counts as the default.
	setTopicConfig(t, c, "default", "max.message.bytes", "lots")
	require.NoError(t, produceBatches(t, c, "default", map[int32][]byte{0: batchOfSize(t, 4096)})[0])
	require.Equal(t, 0, c.handlerPanics)
}

// TestProduceMessageTooLargeKgo: a client sees MESSAGE_TOO_LARGE for a
// record above the topic's limit set at creation, and its other records
// still land.
func TestProduceMessageTooLargeKgo(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	cl := newTestClient(t, c)
	resp, err := kadm.NewClient(cl).CreateTopic(testCtx(t), 1, 1, map[string]*string{"max.message.bytes": kmsg.StringPtr("2048")}, "limited")
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	value := make([]byte, 4096)
	_, _ = rand.Read(value) // incompressible: kgo compresses batches
	big := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: "limited", Value: value})
	require.ErrorIs(t, big.FirstErr(), kerr.MessageTooLarge)
	small := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: "limited", Value: make([]byte, 100)})
	require.NoError(t, small.FirstErr())
}
