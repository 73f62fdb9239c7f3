package broker

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// Each test here is a request an adversarial review found costing work or
// memory out of proportion to its size, and asserts the bound (an error
// code, a count of work, a size), never a time.

// TestJoinGroupProtocolSelectionIsLinear: a JoinGroup naming 80,000
// protocols (under 1 MiB) once made the protocol choice compare names
// pairwise, 3.2e9 comparisons on the loop (~23 s); the work is now a
// small multiple of the protocols named.
func TestJoinGroupProtocolSelectionIsLinear(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	const n = 80000
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 3
	req.Group = "g-protocols"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30000, 30000
	req.ProtocolType = "consumer"
	for i := 0; i < n; i++ {
		req.Protocols = append(req.Protocols, kmsg.JoinGroupRequestProtocol{Name: fmt.Sprintf("p%06d", i), Metadata: []byte{}})
	}
	node := groupCoordinatorNode(t, c, req.Group)
	resp := groupAwait(t, groupSend(t, c, node, req)).(*kmsg.JoinGroupResponse)
	require.Zero(t, resp.ErrorCode)
	require.Equal(t, "p000000", *resp.Protocol, "the first protocol of the only member")
	steps, members := 0, 0
	require.NoError(t, c.do(func() {
		st, err := c.coordinators.group.shardFor(node, req.Group)
		if err != nil || st.groups[req.Group] == nil {
			return
		}
		for _, m := range st.groups[req.Group].members {
			steps += m.protocolSteps
			members++
		}
	}))
	require.Equal(t, 1, members)
	require.LessOrEqual(t, steps, 3*n, "protocol lookups for %d protocols", n)
	require.Equal(t, 0, c.handlerPanics)
}

// TestCreateTopicsPartitionsPerRequest: a 2 KiB CreateTopics asking for
// 100 topics of 10,000 partitions once created a million partitions in
// one turn (+436 MiB of heap); like Kafka since KAFKA-17870, a request
// whose partitions add up to more than 10,000 creates nothing and every
// topic is POLICY_VIOLATION. 10,000 exactly is allowed.
func TestCreateTopicsPartitionsPerRequest(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	create := func(prefix string, topics int, partitions int32, validateOnly bool) *kmsg.CreateTopicsResponse {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version = 7
		req.ValidateOnly = validateOnly
		for i := 0; i < topics; i++ {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = fmt.Sprintf("%s-%03d", prefix, i), partitions, 1
			req.Topics = append(req.Topics, rt)
		}
		return txnWire(t, c, 0, req).(*kmsg.CreateTopicsResponse)
	}
	for _, validateOnly := range []bool{true, false} {
		resp := create("huge", 100, 10000, validateOnly)
		require.Len(t, resp.Topics, 100)
		for _, st := range resp.Topics {
			require.Equal(t, kerr.PolicyViolation.Code, st.ErrorCode, "topic %s", st.Topic)
			require.Equal(t, "Excessively large number of partitions per request.", *st.ErrorMessage)
		}
	}
	var topics, partitions int
	count := func() {
		require.NoError(t, c.do(func() {
			topics, partitions = 0, 0
			for _, tp := range c.topics {
				if !tp.internal {
					topics++
					partitions += len(tp.partitions)
				}
			}
		}))
	}
	count()
	require.Zero(t, topics, "a refused request created topics")

	resp := create("fits", 2, 5000, false)
	for _, st := range resp.Topics {
		require.Zero(t, st.ErrorCode, "topic %s", st.Topic)
	}
	count()
	require.Equal(t, 10000, partitions)
	// Topics that fail their own checks do not count towards the total.
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	for _, name := range []string{"fits-000", "bad name", "ok-now"} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 6000, 1
		req.Topics = append(req.Topics, rt)
	}
	got := txnWire(t, c, 0, req).(*kmsg.CreateTopicsResponse)
	require.Equal(t, kerr.TopicAlreadyExists.Code, got.Topics[0].ErrorCode)
	require.Equal(t, kerr.InvalidTopicException.Code, got.Topics[1].ErrorCode)
	require.Zero(t, got.Topics[2].ErrorCode)
}

// lyingBatch is a valid uncompressed batch of values whose header claims
// count records.
func lyingBatch(values []string, count int32) []byte {
	var recs []kv
	for _, v := range values {
		recs = append(recs, kv{value: []byte(v)})
	}
	b := buildBatch(recs, -1, -1, -1, false, false, time.Now())
	binary.BigEndian.PutUint32(b[offLastDelta:], uint32(count-1))
	binary.BigEndian.PutUint32(b[offNumRecords:], uint32(count))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], crc32c))
	return b
}

// overlongRecord is a one-record batch whose record's length says 20
// bytes where 8 remain.
func overlongRecord() []byte {
	b := lyingBatch([]string{"x"}, 1)
	b[batchHeaderLen] = 40 // zigzag varint 20
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], crc32c))
	return b
}

// TestProduceRecordCountMustMatch: a 69-byte batch of one record claiming
// 2^31-1 once moved the end offset by 2^31-1 (a share group then built
// state for offsets that do not exist), and two records claiming one
// shared an offset. Kafka 4.4 answers INVALID_RECORD to both, and so does
// this; an honest batch goes in.
func TestProduceRecordCountMustMatch(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	createTopic(t, c, "liar", 1)
	produce := func(batch []byte) kmsg.ProduceResponseTopicPartition {
		req := kmsg.NewPtrProduceRequest()
		req.Version = 9
		req.Acks, req.TimeoutMillis = -1, 30000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "liar"
		rt.Partitions = append(rt.Partitions, kmsg.ProduceRequestTopicPartition{Partition: 0, Records: batch})
		req.Topics = append(req.Topics, rt)
		return txnWire(t, c, 0, req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	}
	for _, tc := range []struct {
		name  string
		batch []byte
	}{
		{"one record claiming 2^31-1", lyingBatch([]string{"x"}, 1<<31-1)},
		{"two records claiming one", lyingBatch([]string{"x", "y"}, 1)},
		{"one record claiming two", lyingBatch([]string{"x"}, 2)},
		{"a record longer than the batch", overlongRecord()},
	} {
		got := produce(tc.batch)
		require.Equal(t, kerr.InvalidRecord.Code, got.ErrorCode, tc.name)
		require.Contains(t, *got.ErrorMessage, "says it holds", tc.name)
	}
	end, _ := txnOffsets(t, c, "liar", 0)
	require.Zero(t, end, "a refused batch moved the end offset")
	got := produce(lyingBatch([]string{"x", "y", "z"}, 3))
	require.Zero(t, got.ErrorCode)
	end, _ = txnOffsets(t, c, "liar", 0)
	require.Equal(t, int64(3), end)
}

// storedBytes reads the budget's count of stored bytes.
func storedBytes(t testing.TB, c *Cluster) int64 {
	t.Helper()
	var n int64
	require.NoError(t, c.do(func() { n = c.storedBytes }))
	return n
}

// TestOffsetCommitsHeldToTheBudget: commits are writes a client asks for
// (up to 4 KiB of metadata per partition) and once went past MaxBytes
// without limit; past the budget a commit is INVALID_COMMIT_OFFSET_SIZE
// and writes nothing.
func TestOffsetCommitsHeldToTheBudget(t *testing.T) {
	const budget = 6 << 20
	c := newTestCluster(t, Nodes(1), MaxBytes(budget))
	createTopic(t, c, "committed", 1000)
	commit := func(group string) []int16 {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version = 8
		req.Group, req.Generation = group, -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "committed"
		for p := int32(0); p < 1000; p++ {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.Metadata = p, 1, kmsg.StringPtr(strings.Repeat("m", maxOffsetMetadata))
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		var codes []int16
		for _, rp := range txnWire(t, c, 0, req).(*kmsg.OffsetCommitResponse).Topics[0].Partitions {
			codes = append(codes, rp.ErrorCode)
		}
		return codes
	}
	require.Equal(t, make([]int16, 1000), commit("budget-a"), "the first 4 MiB commit fits")
	// That commit made a compaction of its __consumer_offsets partition
	// due, which runs on a timer after the request and changes the
	// stored bytes a little: read them once it ran.
	waitCompacted(t, c, wire.ConsumerOffsetsTopic, c.CoordinatorPartition(coordinatorGroup, "budget-a"))
	before := storedBytes(t, c)
	for _, code := range commit("budget-b") {
		require.Equal(t, kerr.InvalidCommitOffsetSize.Code, code)
	}
	require.Equal(t, before, storedBytes(t, c), "a refused commit wrote")
	require.LessOrEqual(t, storedBytes(t, c), int64(budget))
	_, offset := cgFetch(t, c, "budget-b", nil, -1, "committed", 0)
	require.Equal(t, int64(-1), offset, "nothing was committed")
}

// TestClientMarkersHeldToTheBudget: a client's WriteTxnMarkers naming one
// partition 250,000 times once appended 19.5 MB of control batches past a
// 4 MiB budget in one request; now each marker past the budget is
// POLICY_VIOLATION, while the coordinator's own markers still end
// transactions past it.
func TestClientMarkersHeldToTheBudget(t *testing.T) {
	const budget = 1 << 20
	c := newTestCluster(t, Nodes(1), MaxBytes(budget))
	createTopic(t, c, "marked", 1)
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = 1
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch = 424242, 0
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic = "marked"
	mt.Partitions = make([]int32, 250000)
	m.Topics = append(m.Topics, mt)
	req.Markers = append(req.Markers, m)
	resp := txnWire(t, c, 0, req).(*kmsg.WriteTxnMarkersResponse)
	codes := map[int16]int{}
	for _, rp := range resp.Markers[0].Topics[0].Partitions {
		codes[rp.ErrorCode]++
	}
	require.Positive(t, codes[0])
	require.Positive(t, codes[kerr.PolicyViolation.Code])
	require.Equal(t, 250000, codes[0]+codes[kerr.PolicyViolation.Code], "%v", codes)
	require.LessOrEqual(t, storedBytes(t, c), int64(budget))

	// The budget is full; the transaction coordinator's own writes
	// (its state, its markers) still go in, so transactions can end.
	pid, epoch := txnInitOK(t, c, "past-budget")
	require.Error(t, txnProduce(t, c, 12, "past-budget", "marked", 0, pid, epoch, 0, "x"), "produce is refused past the budget")
	end := txnEnd(t, c, txnCoordinatorNode(t, c, "past-budget"), 5, "past-budget", pid, epoch, false)
	require.Zero(t, end.ErrorCode)
	require.Equal(t, 0, c.handlerPanics)
}
