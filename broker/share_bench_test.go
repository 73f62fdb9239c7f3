package broker

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// BenchmarkShareCycle measures what the broker's loop spends on one cycle
// of a share pipeline over one partition, with raw requests (each on a new
// connection, so the client's own cost stays small and constant):
//
//   - eos: ShareFetch of n records, a transactional Produce of n records,
//     TxnShareAcknowledge of the n records, EndTxn(COMMIT) with its
//     markers;
//   - alo: ShareFetch of n records, ShareAcknowledge ACCEPT of them.
//
// It reports loop-us/op (the loop's busy time per cycle: the broker's cost,
// without the connection goroutines' decoding and encoding) beside the
// usual ns/op and allocs/op of the whole process.
func BenchmarkShareCycle(b *testing.B) {
	for _, n := range []int{500} {
		b.Run(fmt.Sprintf("eos-%d", n), func(b *testing.B) { benchShareCycle(b, n, true) })
		b.Run(fmt.Sprintf("alo-%d", n), func(b *testing.B) { benchShareCycle(b, n, false) })
	}
}

func benchShareCycle(b *testing.B, n int, eos bool) {
	c := newTestCluster(b, Nodes(3))
	createTopic(b, c, "in", 1)
	createTopic(b, c, "out", 1)
	admin := newTestClient(b, c)
	shareSetGroupConfigs(b, admin, "g", "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "600000")
	value := bytes.Repeat([]byte("v"), 100)
	prod := shareProducer(b, c)
	total := (b.N + 1) * n
	for done := 0; done < total; { // batches of n records: each fetch acquires one
		batch := make([]*kgo.Record, 0, n)
		for i := 0; i < n && done < total; i++ {
			batch = append(batch, &kgo.Record{Topic: "in", Partition: 0, Value: value})
			done++
		}
		require.NoError(b, prod.ProduceSync(testCtx(b), batch...).FirstErr())
	}
	m := shareJoin(b, c, "g", "m", "in")
	pid, epoch := txnInitOK(b, c, "tx")
	values := make([]string, n)
	for i := range values {
		values[i] = string(value)
	}
	cycle := func() {
		first, last := benchAcquire(b, m, n)
		if !eos {
			require.NoError(b, m.acknowledge("in", 0, first, last, wire.AckAccept))
			return
		}
		require.NoError(b, txnProduce(b, c, 12, "tx", "out", 0, pid, epoch, 0, values...))
		top, part := m.stageTxn("tx", pid, epoch, "in", 0, shareRange{first, last, wire.AckAccept})
		require.NoError(b, top)
		require.NoError(b, part)
		epoch = shareEndTxn(b, c, "tx", pid, epoch, true)
	}
	cycle() // loads the share-partition and the transactional id
	var busy0 time.Duration
	require.NoError(b, c.do(func() { busy0 = c.stats.busy }))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		cycle()
	}
	b.StopTimer()
	var busy time.Duration
	require.NoError(b, c.do(func() { busy = c.stats.busy }))
	b.ReportMetric(float64(busy-busy0)/float64(time.Microsecond)/float64(b.N), "loop-us/op")
}

// benchAcquire acquires the next n records of in/0 for m and returns the
// range.
func benchAcquire(b *testing.B, m *rawShareMember, n int) (first, last int64) {
	node := m.leader("in", 0)
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 2
	req.GroupID, req.MemberID = &m.group, &m.id
	req.ShareSessionEpoch = m.sessions[node]
	req.MaxRecords, req.BatchSize, req.MaxBytes = int32(n), int32(n), 8<<20
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = m.topicID("in")
	rp := kmsg.NewShareFetchRequestTopicPartition()
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := m.wire(node, req).(*kmsg.ShareFetchResponse)
	require.NoError(b, kerr.ErrorForCode(resp.ErrorCode))
	m.sessions[node]++
	first, last = -1, -1
	acquired := 0
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			require.NoError(b, kerr.ErrorForCode(p.ErrorCode))
			for _, ar := range p.AcquiredRecords {
				if first < 0 {
					first = ar.FirstOffset
				}
				last = ar.LastOffset
				acquired += int(ar.LastOffset - ar.FirstOffset + 1)
			}
		}
	}
	require.Equal(b, n, acquired)
	require.Equal(b, int64(n), last-first+1, "one run of offsets: %d-%d", first, last)
	return first, last
}
