package brokerreview_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
)

// listOffset answers ListOffsets for timestamp ts (-1 latest, -2 earliest).
func listOffset(t testing.TB, rc *rawConn, topic string, partition int32, ts int64) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version = 7
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = partition, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	got := rc.must(req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	require.Zero(t, got.ErrorCode)
	return got.Offset
}

// fetchedBytes reads topic/partition from its log start (up to
// FetchMaxBytes) and returns the record bytes and the high watermark.
func fetchedBytes(t testing.TB, rc *rawConn, topic string, partition int32) (int, int64) {
	t.Helper()
	start := listOffset(t, rc, topic, partition, -2)
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.MaxWaitMillis, req.MaxBytes, req.ReplicaID = 0, 1<<30, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = partition, 1<<30, -1, -1
	rp.FetchOffset = start
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := rc.must(req).(*kmsg.FetchResponse)
	got := resp.Topics[0].Partitions[0]
	require.Zero(t, got.ErrorCode)
	return len(got.RecordBatches), got.HighWatermark
}

// TestWriteTxnMarkersFromAClientRespectTheMemoryBudget: a cluster with a
// 4 MiB MaxBytes budget, and one WriteTxnMarkers v1 request (1 MiB) from
// an ordinary client naming one partition 250,000 times for a made-up
// producer id.
//
// Today: WriteTxnMarkers (key 27) is served to any client, and every
// mention appends a control batch (v1 markers use the legacy epoch rule,
// so the same producer epoch passes again and again), through the path
// the transaction coordinator uses, which the MaxBytes budget does not
// check (00_produce.go is the only caller of checkBudget): measured
// 19.5 MB of log from one request, in one turn of the loop (~0.9 s),
// past a 4 MiB budget, and repeatable until memory runs out. Kafka
// authorizes WriteTxnMarkers as CLUSTER_ACTION; the bundled broker has no
// ACLs, so it should at least hold writes a client asks for to the
// budget (or refuse WriteTxnMarkers from clients).
func TestWriteTxnMarkersFromAClientRespectTheMemoryBudget(t *testing.T) {
	const budget = 4 << 20
	c, pl := startCluster(t, broker.MaxBytes(budget))
	rc := dial(t, c.Bootstrap()[0])
	createTopic(t, rc, "marked", 1, nil)
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = 1
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = 424242, 0, false, 0
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic = "marked"
	mt.Partitions = make([]int32, 250000)
	m.Topics = append(m.Topics, mt)
	req.Markers = append(req.Markers, m)
	require.LessOrEqual(t, len(frame(req, 1)), 1<<20)
	start := time.Now()
	resp := rc.must(req).(*kmsg.WriteTxnMarkersResponse)
	t.Logf("answered in %v", time.Since(start))
	require.Len(t, resp.Markers, 1)
	stored, hw := fetchedBytes(t, rc, "marked", 0)
	t.Logf("log: %d bytes, high watermark %d", stored, hw)
	require.Empty(t, pl.count())
	require.LessOrEqual(t, stored, budget, "a client's markers took the log past the %d-byte budget", budget)
}

// TestOffsetCommitsRespectTheMemoryBudget: a cluster with a 4 MiB
// MaxBytes budget; a client commits offsets with 4 KiB of metadata each
// (the largest the broker accepts) for 1,000 partitions, in three groups
// that map to the same __consumer_offsets partition: 3 requests of 4 MiB.
//
// Today: offset commits are coordinator writes, which the budget does not
// check, and compaction keeps every live offset, so the log holds ~12 MiB
// of committed offsets, three times the budget, for OffsetsRetention (7
// days by default); more group names take it anywhere. The memory budget
// exists so that clients cannot exhaust the process; writes a client
// causes should count against it (or be refused past it).
func TestOffsetCommitsRespectTheMemoryBudget(t *testing.T) {
	const budget = 4 << 20
	c, pl := startCluster(t, broker.MaxBytes(budget))
	rc := dial(t, c.Bootstrap()[0])
	createTopic(t, rc, "committed", 1000, nil)
	metadata := strings.Repeat("m", 4096)
	target := c.CoordinatorPartition(0, "budget-group-0")
	var groups []string
	for i := 0; len(groups) < 3; i++ {
		if g := fmt.Sprintf("budget-group-%d", i); c.CoordinatorPartition(0, g) == target {
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version = 8
		req.Group, req.Generation = g, -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "committed"
		for p := int32(0); p < 1000; p++ {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.Metadata = p, 1, kmsg.StringPtr(metadata)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp := rc.must(req).(*kmsg.OffsetCommitResponse)
		require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
	}
	leader, err := c.Leader("__consumer_offsets", target)
	require.NoError(t, err)
	stored, _ := fetchedBytes(t, dial(t, c.Bootstrap()[leader]), "__consumer_offsets", target)
	t.Logf("__consumer_offsets-%d holds %d bytes", target, stored)
	require.Empty(t, pl.count())
	require.LessOrEqual(t, stored, budget, "committed offsets took the log past the %d-byte budget", budget)
}
