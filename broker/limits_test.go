package broker

// Bounded work per request: Kafka's validation of repeated partitions,
// logarithmic lookups, capped answers, parked fetches that cost nothing
// until their partitions change, and name checks through an index. Work is
// asserted as counts the loop keeps (loopStats) or as shapes of answers,
// never as durations; the figures are in abuse_bench_test.go.

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// appendBatches stores n one-record batches in topic/partition directly,
// with the timestamps ts(i), and returns the partition.
func appendBatches(t testing.TB, c *Cluster, topic string, index int32, n int, ts func(i int) int64) *partition {
	t.Helper()
	var p *partition
	require.NoError(t, c.do(func() {
		p = c.partitionOf(topic, index)
		for i := 0; i < n; i++ {
			when := time.UnixMilli(ts(i))
			raw := buildBatch([]kv{{value: []byte("v")}}, -1, -1, -1, false, false, when)
			p.store(raw, 0, -1, -1, false, false, when.UnixMilli(), time.Now())
		}
	}))
	return p
}

// loopStatsOf reads the loop's counters.
func loopStatsOf(t testing.TB, c *Cluster) loopStats {
	t.Helper()
	var s loopStats
	require.NoError(t, c.do(func() { s = c.stats }))
	return s
}

func listOffsetsReq(topic string, partitions []int32, ts int64) *kmsg.ListOffsetsRequest {
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version = 10
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, ts, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// TestListOffsetsRepeatedPartitionIsInvalidRequest answers as Kafka 4.4
// does (integration/differential checks it against Kafka): a partition
// named more than once gets one answer, INVALID_REQUEST, and costs no
// lookup; the others are answered normally, once per partition, grouped
// under one entry per topic.
func TestListOffsetsRepeatedPartitionIsInvalidRequest(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "lo", 2)
	appendBatches(t, c, "lo", 1, 3, func(int) int64 { return time.Now().UnixMilli() })

	req := listOffsetsReq("lo", []int32{0, 1, 0}, -1)
	again := kmsg.NewListOffsetsRequestTopic()
	again.Topic = "lo"
	again.Partitions = req.Topics[0].Partitions[:1] // partition 0 a third time, in another topic entry
	req.Topics = append(req.Topics, again)
	many := listOffsetsReq("lo", nil, -1)
	for i := 0; i < 5000; i++ {
		many.Topics[0].Partitions = append(many.Topics[0].Partitions, req.Topics[0].Partitions[1])
	}

	resp := txnWire(t, c, 0, req).(*kmsg.ListOffsetsResponse)
	require.Len(t, resp.Topics, 1)
	require.Len(t, resp.Topics[0].Partitions, 2)
	p0, p1 := resp.Topics[0].Partitions[0], resp.Topics[0].Partitions[1]
	require.Equal(t, int32(0), p0.Partition)
	require.ErrorIs(t, kerr.ErrorForCode(p0.ErrorCode), kerr.InvalidRequest)
	require.Equal(t, int64(-1), p0.Offset)
	require.Equal(t, int32(1), p1.Partition)
	require.NoError(t, kerr.ErrorForCode(p1.ErrorCode))
	require.Equal(t, int64(3), p1.Offset)

	resp = txnWire(t, c, 0, many).(*kmsg.ListOffsetsResponse)
	require.Len(t, resp.Topics[0].Partitions, 1, "5000 mentions, one answer")
	require.ErrorIs(t, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode), kerr.InvalidRequest)
}

// TestListOffsetsByTimestampIsLogarithmic compares every kind of lookup
// with a scan over batches whose timestamps go up and down, and bounds the
// index nodes a lookup visits.
func TestListOffsetsByTimestampIsLogarithmic(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "times", 1)
	const n = 20000
	rng := rand.New(rand.NewSource(7))
	base := time.Now().Add(-time.Hour).UnixMilli()
	stamps := make([]int64, n)
	for i := range stamps {
		stamps[i] = base + rng.Int63n(int64(n)) // unordered, with ties
	}
	p := appendBatches(t, c, "times", 0, n, func(i int) int64 { return stamps[i] })
	bound := 4*bits.Len(uint(n)) + 4
	for _, target := range []int64{-3, base, base + n/2, base + n - 1, base + n + 5, base + rng.Int63n(n)} {
		want, wantTs := int64(-1), int64(-1)
		if target == -3 {
			best := 0
			for i := range stamps {
				if stamps[i] > stamps[best] {
					best = i
				}
			}
			want, wantTs = int64(best), stamps[best]
		} else {
			for i := range stamps {
				if stamps[i] >= target {
					want, wantTs = int64(i), stamps[i]
					break
				}
			}
		}
		resp := txnWire(t, c, p.leader, listOffsetsReq("times", []int32{0}, target)).(*kmsg.ListOffsetsResponse)
		got := resp.Topics[0].Partitions[0]
		require.NoError(t, kerr.ErrorForCode(got.ErrorCode))
		require.Equal(t, want, got.Offset, "timestamp %d", target)
		require.Equal(t, wantTs, got.Timestamp, "timestamp %d", target)
		var visits int
		require.NoError(t, c.do(func() { visits = p.tsIndex.visits }))
		require.LessOrEqual(t, visits, bound, "a lookup must visit O(log n) index nodes, not scan %d batches", n)
	}
}

func fetchReq(topic string, maxBytes, minBytes, maxWaitMs int32, parts ...kmsg.FetchRequestTopicPartition) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.ReplicaID = -1
	req.MaxBytes, req.MinBytes, req.MaxWaitMillis = maxBytes, minBytes, maxWaitMs
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rt.Partitions = parts
	req.Topics = append(req.Topics, rt)
	return req
}

func fetchPart(partition int32, offset int64, maxBytes int32) kmsg.FetchRequestTopicPartition {
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, maxBytes
	rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
	return rp
}

// TestFetchRepeatedPartitionIsReadOnce: Kafka reads a fetch as a map, so a
// partition named twice is answered once, with its last parameters.
func TestFetchRepeatedPartitionIsReadOnce(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "f", 2)
	appendBatches(t, c, "f", 0, 5, func(int) int64 { return time.Now().UnixMilli() })
	before := loopStatsOf(t, c)
	req := fetchReq("f", 1<<20, 0, 0, fetchPart(0, 0, 1<<20), fetchPart(1, 0, 1<<20), fetchPart(0, 3, 1<<20))
	resp := txnWire(t, c, 0, req).(*kmsg.FetchResponse)
	require.Len(t, resp.Topics, 1)
	require.Len(t, resp.Topics[0].Partitions, 2)
	p0 := resp.Topics[0].Partitions[0]
	require.Equal(t, int32(0), p0.Partition)
	got, err := decodeFetched(p0.RecordBatches)
	require.NoError(t, err)
	require.Equal(t, []int64{3, 4}, got, "the last mention's offset wins")
	require.Equal(t, int32(1), resp.Topics[0].Partitions[1].Partition)
	require.Equal(t, int64(2*batchSize(t)), loopStatsOf(t, c).fetchBytes-before.fetchBytes)
}

// TestProduceRepeatedPartitionAppendsOnce: Kafka keeps the last records
// given for a partition and appends them once.
func TestProduceRepeatedPartitionAppendsOnce(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "pr", 1)
	req := produceReq("pr", plainBatch("first"), plainBatch("last"))
	resp := txnWire(t, c, 0, req).(*kmsg.ProduceResponse)
	require.Len(t, resp.Topics[0].Partitions, 1)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
	end, _ := txnOffsets(t, c, "pr", 0)
	require.Equal(t, int64(1), end)
	var value string
	require.NoError(t, c.do(func() {
		recs, err := decodeRecords(c.partitionOf("pr", 0).batches[0].raw)
		require.NoError(t, err)
		value = string(recs[0].value)
	}))
	require.Equal(t, "last", value)
}

// TestFetchAnswersAreCappedByFetchMaxBytes: a client asking for 2 GiB gets
// at most FetchMaxBytes (Kafka's fetch.max.bytes), or one batch past it.
func TestFetchAnswersAreCappedByFetchMaxBytes(t *testing.T) {
	const capBytes = 64 << 10
	c := newTestCluster(t, FetchMaxBytes(capBytes))
	createTopic(t, c, "big", 2)
	value := make([]byte, 16<<10)
	require.NoError(t, c.do(func() {
		for _, p := range c.topics["big"].partitions {
			for i := 0; i < 10; i++ {
				p.store(buildBatch([]kv{{value: value}}, -1, -1, -1, false, false, time.Now()), 0, -1, -1, false, false, time.Now().UnixMilli(), time.Now())
			}
		}
	}))
	const huge = 1<<31 - 1
	resp := txnWire(t, c, 0, fetchReq("big", huge, 0, 0, fetchPart(0, 0, huge), fetchPart(1, 0, huge))).(*kmsg.FetchResponse)
	total := 0
	for _, p := range resp.Topics[0].Partitions {
		total += len(p.RecordBatches)
	}
	require.LessOrEqual(t, total, capBytes)
	require.Greater(t, total, capBytes-(17<<10), "filled up to the cap, one batch short at most")
	require.Empty(t, resp.Topics[0].Partitions[1].RecordBatches, "the cap is spent on partition 0")

	// The per-partition limit holds too.
	resp = txnWire(t, c, 0, fetchReq("big", huge, 0, 0, fetchPart(0, 0, 20<<10), fetchPart(1, 0, 20<<10))).(*kmsg.FetchResponse)
	for _, p := range resp.Topics[0].Partitions {
		require.LessOrEqual(t, len(p.RecordBatches), 20<<10)
		require.NotEmpty(t, p.RecordBatches)
	}
}

// TestParkedFetchCostsNothingUntilItsPartitionChanges: a long poll is
// re-evaluated once per append to a partition it reads, never for other
// partitions or by a clock, and its answer is built once.
func TestParkedFetchCostsNothingUntilItsPartitionChanges(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "w", 2)
	appendBatches(t, c, "w", 0, 100, func(int) int64 { return time.Now().UnixMilli() })
	leader, err := c.Leader("w", 0)
	require.NoError(t, err)
	rc := dialNode(t, c, leader)
	before := loopStatsOf(t, c)
	rc.send(requestFrame(fetchReq("w", 1<<30, 1<<30, 20000, fetchPart(0, 0, 1<<20)), 1))
	require.Eventually(t, func() bool {
		var watched bool
		_ = c.do(func() { watched = len(c.partitionOf("w", 0).watchers) == 1 })
		return watched
	}, 10*time.Second, time.Millisecond)
	parked := loopStatsOf(t, c)
	require.Equal(t, before.fetchAnswers, parked.fetchAnswers, "a parked fetch builds no answer")

	appendBatches(t, c, "w", 1, 50, func(int) int64 { return time.Now().UnixMilli() }) // another partition
	s := loopStatsOf(t, c)
	require.Equal(t, parked.watchChecks, s.watchChecks, "appends elsewhere cost the parked fetch nothing")

	const appends = 30
	for i := 0; i < appends; i++ {
		appendBatches(t, c, "w", 0, 1, func(int) int64 { return time.Now().UnixMilli() })
	}
	s = loopStatsOf(t, c)
	require.Equal(t, parked.watchChecks+appends, s.watchChecks, "one check per append to its partition")
	require.Equal(t, parked.fetchAnswers, s.fetchAnswers, "still no answer built")

	// A leadership move is an error to report: answered at once.
	require.NoError(t, c.MoveLeader("w", 0, 1-leader))
	corr, body, err := rc.read()
	require.NoError(t, err)
	require.Equal(t, int32(1), corr)
	resp := kmsg.NewPtrFetchResponse()
	resp.Version = 12
	require.NoError(t, resp.ReadFrom(body[1:]))
	require.ErrorIs(t, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode), kerr.NotLeaderForPartition)
	s = loopStatsOf(t, c)
	require.Equal(t, parked.fetchAnswers+1, s.fetchAnswers)
	require.NoError(t, c.do(func() { require.Empty(t, c.partitionOf("w", 0).watchers) }))
}

// TestParkedFetchAnswersAtMinBytesOrDeadline: the answer comes when enough
// bytes are readable, with them, or at the deadline.
func TestParkedFetchAnswersAtMinBytesOrDeadline(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "m", 1)
	size := int32(batchSize(t))
	rc := dialRaw(t, c)
	rc.send(requestFrame(fetchReq("m", 1<<20, 3*size, 20000, fetchPart(0, 0, 1<<20)), 1))
	waitWatched(t, c, "m", 0)
	appendBatches(t, c, "m", 0, 2, func(int) int64 { return time.Now().UnixMilli() })
	require.NoError(t, c.do(func() { require.Len(t, c.partitionOf("m", 0).watchers, 1, "two batches are below MinBytes") }))
	appendBatches(t, c, "m", 0, 1, func(int) int64 { return time.Now().UnixMilli() })
	_, body, err := rc.read()
	require.NoError(t, err)
	resp := kmsg.NewPtrFetchResponse()
	resp.Version = 12
	require.NoError(t, resp.ReadFrom(body[1:]))
	got, err := decodeFetched(resp.Topics[0].Partitions[0].RecordBatches)
	require.NoError(t, err)
	require.Equal(t, []int64{0, 1, 2}, got)

	// With nothing arriving, the deadline answers (empty).
	require.NoError(t, c.do(func() { c.cfg.maxFetchWait = 50 * time.Millisecond }))
	rc.send(requestFrame(fetchReq("m", 1<<20, 1<<20, 20000, fetchPart(0, 3, 1<<20)), 2))
	corr, body, err := rc.read()
	require.NoError(t, err)
	require.Equal(t, int32(2), corr)
	require.NoError(t, resp.ReadFrom(body[1:]))
	require.Empty(t, resp.Topics[0].Partitions[0].RecordBatches)
}

// TestCollidingTopicNamesUseTheIndex: the '.'/'_' collision check finds
// the other name through the index, and forgets a deleted topic.
func TestCollidingTopicNamesUseTheIndex(t *testing.T) {
	c := newTestCluster(t)
	create := func(names ...string) []int16 {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version = 7
		for _, n := range names {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = n, 1, 1
			req.Topics = append(req.Topics, rt)
		}
		resp := txnWire(t, c, 0, req).(*kmsg.CreateTopicsResponse)
		var codes []int16
		for _, st := range resp.Topics {
			codes = append(codes, st.ErrorCode)
		}
		return codes
	}
	require.Equal(t, []int16{0}, create("a.b_c"))
	require.Equal(t, []int16{kerr.InvalidTopicException.Code, kerr.TopicAlreadyExists.Code, 0},
		create("a_b.c", "a.b_c", "a-b"))
	require.NoError(t, c.do(func() {
		require.Equal(t, "a.b_c", c.collidingTopic("a_b_c"))
		c.deleteTopic(c.topics["a.b_c"])
		require.Equal(t, "", c.collidingTopic("a_b_c"))
	}))
	require.Equal(t, []int16{0}, create("a_b_c"))
}

// produceReq builds a v9 acks=-1 Produce of one entry per batch, all for
// partition 0 of topic.
func produceReq(topic string, batches ...[]byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version = 9
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for _, raw := range batches {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = raw
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// plainBatch is a one-record batch without a producer id.
func plainBatch(value string) []byte {
	return buildBatch([]kv{{value: []byte(value)}}, -1, -1, -1, false, false, time.Now())
}

// waitWatched waits until a parked request watches topic/partition.
func waitWatched(t testing.TB, c *Cluster, topic string, partition int32) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		_ = c.do(func() { n = len(c.partitionOf(topic, partition).watchers) })
		return n > 0
	}, 10*time.Second, time.Millisecond)
}

// batchSize is the size of the one-record batches appendBatches stores.
func batchSize(t testing.TB) int {
	return len(buildBatch([]kv{{value: []byte("v")}}, -1, -1, -1, false, false, time.Now()))
}

// decodeFetched returns the base offsets of the batches in a record set.
func decodeFetched(raw []byte) ([]int64, error) {
	var out []int64
	for len(raw) > 0 {
		if len(raw) < batchHeaderLen {
			return nil, fmt.Errorf("%d trailing bytes", len(raw))
		}
		size := 12 + int(binary.BigEndian.Uint32(raw[offBatchLength:]))
		if size > len(raw) {
			return nil, fmt.Errorf("batch of %d bytes in %d", size, len(raw))
		}
		out = append(out, int64(binary.BigEndian.Uint64(raw[offBaseOffset:])))
		raw = raw[size:]
	}
	return out, nil
}

// dialNode is dialRaw to a given node.
func dialNode(t testing.TB, c *Cluster, node int32) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", c.nodes[node].addr(), 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
	return &rawConn{t: t, conn: conn}
}
