package broker

import (
	"bytes"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joined is the bytes a writev of bufs sends.
func joined(bufs net.Buffers) []byte { return bytes.Join(bufs, nil) }

// TestSplicedFetchEqualsCopiedFetch checks, at versions with and without
// flexible encoding, that a Fetch answer written from the stored batches
// is byte for byte the answer with the batches copied in.
func TestSplicedFetchEqualsCopiedFetch(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	createTopic(t, c, "a", 3)
	createTopic(t, c, "b", 1)
	prod := shareProducer(t, c)
	var recs []*kgo.Record
	for i := range 300 {
		recs = append(recs, &kgo.Record{Topic: "a", Partition: int32(i % 3), Value: fmt.Appendf(nil, "value-%d", i)})
		if i%50 == 0 { // separate produce requests: several batches per partition
			require.NoError(t, prod.ProduceSync(testCtx(t), recs...).FirstErr())
			recs = recs[:0]
		}
	}
	require.NoError(t, prod.ProduceSync(testCtx(t), recs...).FirstErr())

	for _, version := range []int16{4, 11, 12, 16} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			req := kmsg.NewPtrFetchRequest()
			req.Version = version
			req.MaxBytes = 1 << 20
			for _, topic := range []string{"a", "b"} {
				rt := kmsg.NewFetchRequestTopic()
				rt.Topic = topic
				require.NoError(t, c.do(func() { rt.TopicID = c.topics[topic].id }))
				for p := range map[string]int32{"a": 3, "b": 1}[topic] {
					rp := kmsg.NewFetchRequestTopicPartition()
					rp.Partition, rp.PartitionMaxBytes = p, 1<<20
					rp.FetchOffset = int64(p) // an offset inside the first batch
					rt.Partitions = append(rt.Partitions, rp)
				}
				req.Topics = append(req.Topics, rt)
			}
			answer := func() *fetchAnswer {
				var ans *fetchAnswer
				require.NoError(t, c.do(func() { ans = c.fetch(&request{node: c.nodes[0], kreq: req}) }))
				return ans
			}
			hdr := requestHeader{key: 1, version: version, corr: 42}
			ans := answer()
			require.Len(t, ans.fills, 3, "partitions of a hold batches, b has none")
			spliced, ok := c.encodeSpliced(hdr, ans)
			require.True(t, ok)
			copied := c.encodeResponse(hdr, answer().prepare())
			require.Equal(t, copied, joined(spliced))
			require.Greater(t, len(spliced), 3*2, "each batch is a buffer of its own")
		})
	}
}

// TestSplicedShareFetchEqualsCopied reads the same records in two fresh
// share groups, one answer spliced and one copied (a fault hook that sees
// the answer makes the connection copy), and compares the wire bytes.
func TestSplicedShareFetchEqualsCopied(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	createTopic(t, c, "in", 2)
	admin := newTestClient(t, c)
	prod := shareProducer(t, c)
	for range 3 {
		shareProduce(t, prod, "in", 2, shareValues("v", 40)...)
	}
	frame := func(group string) []byte {
		shareSetGroupConfigs(t, admin, group, "share.auto.offset.reset", "earliest")
		m := shareJoin(t, c, group, "m", "in")
		req := kmsg.NewPtrShareFetchRequest()
		req.Version = 2
		req.GroupID, req.MemberID = &m.group, &m.id
		req.MaxRecords, req.MaxBytes = 1000, 1<<20
		rt := kmsg.NewShareFetchRequestTopic()
		rt.TopicID = m.topicID("in")
		for p := range int32(2) {
			rp := kmsg.NewShareFetchRequestTopicPartition()
			rp.Partition = p
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		return wireRoundTrip(t, c, 0, req)
	}
	spliced := frame("g1")
	var seen atomic.Int32
	stop := c.InjectFaults(func(_ int32, _ string, req kmsg.Request) FaultAction {
		if req.Key() != 78 {
			return FaultAction{}
		}
		return FaultAction{AfterHandling: func(kmsg.Response) { seen.Add(1) }}
	})
	copied := frame("g2")
	stop()
	require.Equal(t, int32(1), seen.Load(), "the second answer went through the hook, copied")
	require.Equal(t, copied, spliced)
	require.Greater(t, len(spliced), 240*len("v-00"), "the answer carries the records")
}

// fakeSpliced is an answer that does not put the markers where splice
// says, so the encoder must refuse to splice it.
type fakeSpliced struct{ *fetchAnswer }

func (f fakeSpliced) splice(mark func(int) []byte) (kmsg.Response, [][]*storedBatch) {
	resp, fills := f.fetchAnswer.splice(mark)
	r := resp.(*kmsg.FetchResponse)
	r.Topics[0].Partitions[0].RecordBatches = []byte("not a marker at all")
	return resp, fills
}

func TestEncodeSplicedRefusesMissingMarkers(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	createTopic(t, c, "a", 1)
	shareProduce(t, shareProducer(t, c), "a", 1, "x", "y")
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "a"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	req.MaxBytes = 1 << 20
	var ans *fetchAnswer
	require.NoError(t, c.do(func() { ans = c.fetch(&request{node: c.nodes[0], kreq: req}) }))
	require.Len(t, ans.fills, 1)
	_, ok := c.encodeSpliced(requestHeader{key: 1, version: 12}, fakeSpliced{ans})
	require.False(t, ok)
}
