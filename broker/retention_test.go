package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// createTopicWith creates a topic with configs through the wire.
func createTopicWith(t testing.TB, c *Cluster, name string, partitions int32, configs map[string]string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	for k, v := range configs {
		cfg := kmsg.NewCreateTopicsRequestTopicConfig()
		cfg.Name, cfg.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, cfg)
	}
	req.Topics = append(req.Topics, rt)
	resp := txnWire(t, c, 0, req).(*kmsg.CreateTopicsResponse)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
}

// logShape returns a partition's log start, end, batch count and size.
func logShape(t testing.TB, c *Cluster, topic string, partition int32) (start, end int64, batches int, bytes int64) {
	t.Helper()
	require.NoError(t, c.do(func() {
		p := c.partitionOf(topic, partition)
		start, end, batches, bytes = p.logStart, p.next, len(p.batches), p.bytes
	}))
	return
}

func TestRetentionMsDeletesWholeBatchesFromTheHead(t *testing.T) {
	c := newTestCluster(t, RetentionCheckInterval(time.Millisecond))
	createTopicWith(t, c, "r", 1, map[string]string{"retention.ms": "60000"})
	now := time.Now().UnixMilli()
	// Old, old, a future timestamp (it holds back what follows, as a
	// segment with a future timestamp does in Kafka), old, new.
	stamps := []int64{now - 120000, now - 90000, now + 3600000, now - 100000, now}
	appendBatches(t, c, "r", 0, len(stamps), func(i int) int64 { return stamps[i] })
	require.Eventually(t, func() bool {
		start, _, _, _ := logShape(t, c, "r", 0)
		return start == 2
	}, 10*time.Second, time.Millisecond)
	start, end, batches, bytes := logShape(t, c, "r", 0)
	require.Equal(t, int64(2), start)
	require.Equal(t, int64(5), end)
	require.Equal(t, 3, batches)
	require.Equal(t, int64(3*batchSize(t)), bytes)

	resp := txnWire(t, c, 0, fetchReq("r", 1<<20, 0, 0, fetchPart(0, 0, 1<<20))).(*kmsg.FetchResponse)
	require.ErrorIs(t, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode), kerr.OffsetOutOfRange)
	lo := txnWire(t, c, 0, listOffsetsReq("r", []int32{0}, -2)).(*kmsg.ListOffsetsResponse)
	require.Equal(t, int64(2), lo.Topics[0].Partitions[0].Offset)
	var stored int64
	require.NoError(t, c.do(func() { stored = c.storedBytes }))
	require.Equal(t, internalBytes(t, c)+bytes, stored, "freed bytes leave the budget's count")
}

func TestRetentionBytesKeepsAtLeastTheLimit(t *testing.T) {
	c := newTestCluster(t, RetentionCheckInterval(time.Millisecond))
	size := int64(batchSize(t))
	createTopicWith(t, c, "rb", 1, map[string]string{"retention.bytes": "250"})
	appendBatches(t, c, "rb", 0, 10, func(int) int64 { return time.Now().UnixMilli() })
	// Kafka's rule: delete from the head while what remains is still at
	// least retention.bytes.
	want := int((10*size - 250) / size)
	require.Eventually(t, func() bool {
		start, _, _, _ := logShape(t, c, "rb", 0)
		return start == int64(want)
	}, 10*time.Second, time.Millisecond)
	_, _, batches, bytes := logShape(t, c, "rb", 0)
	require.GreaterOrEqual(t, bytes, int64(250))
	require.Less(t, bytes-size, int64(250))
	require.Equal(t, 10-want, batches)
	// Above the limit by less than a batch is where Kafka's rule stops:
	// the next check is retention.ms's, not another one at once.
	var next time.Time
	require.NoError(t, c.do(func() { next = c.partitionOf("rb", 0).retention.at }))
	require.True(t, next.After(time.Now().Add(24*time.Hour)), "next retention check at %v", next)
}

func TestRetentionIsNotEnforcedWithoutDeletePolicyOrOnInternalTopics(t *testing.T) {
	c := newTestCluster(t, RetentionCheckInterval(time.Millisecond))
	createTopicWith(t, c, "compacted", 1, map[string]string{"cleanup.policy": "compact", "retention.ms": "1"})
	appendBatches(t, c, "compacted", 0, 3, func(int) int64 { return 1 })
	require.NoError(t, c.do(func() {
		require.False(t, c.partitionOf("compacted", 0).retention.armed())
	}))
	start, _, _, _ := logShape(t, c, "compacted", 0)
	require.Equal(t, int64(0), start)

	// Turning the delete policy on through IncrementalAlterConfigs arms it.
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "compacted"
	op := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	op.Name, op.Op, op.Value = "cleanup.policy", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("delete")
	res.Configs = append(res.Configs, op)
	req.Resources = append(req.Resources, res)
	alter := txnWire(t, c, 0, req).(*kmsg.IncrementalAlterConfigsResponse)
	require.NoError(t, kerr.ErrorForCode(alter.Resources[0].ErrorCode))
	require.Eventually(t, func() bool {
		start, _, _, _ := logShape(t, c, "compacted", 0)
		return start == 3
	}, 10*time.Second, time.Millisecond)
}

func deleteRecordsReq(topic string, offsets map[int32]int64) *kmsg.DeleteRecordsRequest {
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.Version = 2
	req.TimeoutMillis = 1000
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	for p := int32(0); p < 10; p++ {
		if off, ok := offsets[p]; ok {
			rp := kmsg.NewDeleteRecordsRequestTopicPartition()
			rp.Partition, rp.Offset = p, off
			rt.Partitions = append(rt.Partitions, rp)
		}
	}
	req.Topics = append(req.Topics, rt)
	return req
}

func TestDeleteRecords(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "d", 2)
	createTopicWith(t, c, "keep", 1, map[string]string{"cleanup.policy": "compact"})
	appendBatches(t, c, "d", 0, 5, func(int) int64 { return time.Now().UnixMilli() })
	leader, err := c.Leader("d", 0)
	require.NoError(t, err)
	send := func(node int32, req *kmsg.DeleteRecordsRequest) map[string]map[int32]kmsg.DeleteRecordsResponseTopicPartition {
		resp := txnWire(t, c, node, req).(*kmsg.DeleteRecordsResponse)
		out := map[string]map[int32]kmsg.DeleteRecordsResponseTopicPartition{}
		for _, rt := range resp.Topics {
			out[rt.Topic] = map[int32]kmsg.DeleteRecordsResponseTopicPartition{}
			for _, rp := range rt.Partitions {
				out[rt.Topic][rp.Partition] = rp
			}
		}
		return out
	}

	// Inside a batch: the log start moves there, the batch before it goes.
	got := send(leader, deleteRecordsReq("d", map[int32]int64{0: 2}))["d"][0]
	require.NoError(t, kerr.ErrorForCode(got.ErrorCode))
	require.Equal(t, int64(2), got.LowWatermark)
	start, _, batches, _ := logShape(t, c, "d", 0)
	require.Equal(t, int64(2), start)
	require.Equal(t, 3, batches)
	// Lower than the log start: nothing changes.
	got = send(leader, deleteRecordsReq("d", map[int32]int64{0: 1}))["d"][0]
	require.Equal(t, int64(2), got.LowWatermark)
	// -1 is the high watermark.
	got = send(leader, deleteRecordsReq("d", map[int32]int64{0: -1}))["d"][0]
	require.Equal(t, int64(5), got.LowWatermark)
	_, _, batches, bytes := logShape(t, c, "d", 0)
	require.Zero(t, batches)
	require.Zero(t, bytes)

	for name, tc := range map[string]struct {
		node   int32
		req    *kmsg.DeleteRecordsRequest
		topic  string
		errors *kerr.Error
	}{
		"past the high watermark": {leader, deleteRecordsReq("d", map[int32]int64{0: 6}), "d", kerr.OffsetOutOfRange},
		"below -1":                {leader, deleteRecordsReq("d", map[int32]int64{0: -2}), "d", kerr.OffsetOutOfRange},
		"not the leader":          {1 - leader, deleteRecordsReq("d", map[int32]int64{0: 0}), "d", kerr.NotLeaderForPartition},
		"unknown partition":       {0, deleteRecordsReq("d", map[int32]int64{7: 0}), "d", kerr.UnknownTopicOrPartition},
		"unknown topic":           {0, deleteRecordsReq("nope", map[int32]int64{0: 0}), "nope", kerr.UnknownTopicOrPartition},
		"internal topic":          {0, deleteRecordsReq("__consumer_offsets", map[int32]int64{0: 0}), "__consumer_offsets", kerr.InvalidTopicException},
		"compacted topic":         {0, deleteRecordsReq("keep", map[int32]int64{0: 0}), "keep", kerr.PolicyViolation},
	} {
		for _, rp := range send(tc.node, tc.req)[tc.topic] {
			require.ErrorIs(t, kerr.ErrorForCode(rp.ErrorCode), tc.errors, name)
			require.Equal(t, int64(-1), rp.LowWatermark, name)
		}
	}

	// A partition named twice is answered once, with the last offset.
	appendBatches(t, c, "d", 1, 4, func(int) int64 { return time.Now().UnixMilli() })
	leader1, err := c.Leader("d", 1)
	require.NoError(t, err)
	req := deleteRecordsReq("d", map[int32]int64{1: 3})
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = 1, 1
	req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
	resp := txnWire(t, c, leader1, req).(*kmsg.DeleteRecordsResponse)
	require.Len(t, resp.Topics[0].Partitions, 1)
	require.Equal(t, int64(1), resp.Topics[0].Partitions[0].LowWatermark)
}

// TestMaxBytesRefusesProduceAndKeepsServingReads: past the budget a
// produce is refused with POLICY_VIOLATION naming the limit; reads go on,
// and deleting records makes room again.
func TestMaxBytesRefusesProduceAndKeepsServingReads(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "budget", 1)
	internal := internalBytes(t, c)
	size := int64(batchSize(t))
	budget := internal + 3*size
	require.NoError(t, c.do(func() { c.cfg.maxBytes = budget }))
	produce := func() kmsg.ProduceResponseTopicPartition {
		return txnWire(t, c, 0, produceReq("budget", plainBatch("v"))).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	}
	for i := 0; i < 3; i++ {
		require.NoError(t, kerr.ErrorForCode(produce().ErrorCode))
	}
	refused := produce()
	require.ErrorIs(t, kerr.ErrorForCode(refused.ErrorCode), kerr.PolicyViolation)
	require.NotNil(t, refused.ErrorMessage)
	require.Contains(t, *refused.ErrorMessage, "-max-bytes")
	require.True(t, strings.Contains(*refused.ErrorMessage, "memory budget"), *refused.ErrorMessage)
	_, end, _, _ := logShape(t, c, "budget", 0)
	require.Equal(t, int64(3), end, "nothing of the refused batch is stored")

	resp := txnWire(t, c, 0, fetchReq("budget", 1<<20, 0, 0, fetchPart(0, 0, 1<<20))).(*kmsg.FetchResponse)
	got, err := decodeFetched(resp.Topics[0].Partitions[0].RecordBatches)
	require.NoError(t, err)
	require.Equal(t, []int64{0, 1, 2}, got, "reads keep working past the budget")

	dr := txnWire(t, c, 0, deleteRecordsReq("budget", map[int32]int64{0: 2})).(*kmsg.DeleteRecordsResponse)
	require.NoError(t, kerr.ErrorForCode(dr.Topics[0].Partitions[0].ErrorCode))
	require.NoError(t, kerr.ErrorForCode(produce().ErrorCode), "deleted records make room")
}

// internalBytes is what the internal topics hold.
func internalBytes(t testing.TB, c *Cluster) int64 {
	t.Helper()
	var n int64
	require.NoError(t, c.do(func() {
		for _, tp := range c.topics {
			if tp.internal {
				for _, p := range tp.partitions {
					n += p.bytes
				}
			}
		}
	}))
	return n
}

// TestShareGroupSkipsDeletedRecords: records deleted before a share group
// reads them are never delivered; the group moves on to what is left.
func TestShareGroupSkipsDeletedRecords(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "sq", 1)
	m := shareJoin(t, c, "sg", "m1", "sq")
	appendBatches(t, c, "sq", 0, 6, func(int) int64 { return time.Now().UnixMilli() })
	got := m.fetch("sq", 0)
	require.Len(t, got, 6)
	require.NoError(t, m.acknowledge("sq", 0, 0, 1, wire.AckAccept))
	require.NoError(t, m.acknowledge("sq", 0, 2, 5, wire.AckRelease))
	dr := txnWire(t, c, 0, deleteRecordsReq("sq", map[int32]int64{0: 4})).(*kmsg.DeleteRecordsResponse)
	require.NoError(t, kerr.ErrorForCode(dr.Topics[0].Partitions[0].ErrorCode))
	got = m.fetch("sq", 0)
	require.Equal(t, map[int64]int16{4: 2, 5: 2}, got, "2 and 3 are gone with their batches")
}

// TestRetentionWaitsOneIntervalAfterCreation: as Kafka's first retention
// check comes a while after start, records with old timestamps are not
// deleted the moment they arrive.
func TestRetentionWaitsOneIntervalAfterCreation(t *testing.T) {
	c := newTestCluster(t, RetentionCheckInterval(time.Hour))
	createTopicWith(t, c, "old", 1, map[string]string{"retention.ms": "1000"})
	appendBatches(t, c, "old", 0, 3, func(int) int64 { return 0 }) // 1970
	var due time.Time
	require.NoError(t, c.do(func() { due = c.partitionOf("old", 0).retention.at }))
	require.True(t, due.After(time.Now().Add(59*time.Minute)), "first check at %v", due)
	start, _, _, _ := logShape(t, c, "old", 0)
	require.Zero(t, start)
}
