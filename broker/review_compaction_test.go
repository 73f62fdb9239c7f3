package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kshare-go/kshare/wire"
)

// Review finding (fixed): compaction now keeps the last compactKeep of a
// coordinator log as it was written, but reopenTxns still moves the first
// offset of a transaction open at the compaction whose first record was
// cut away to its first *rewritten* record, past the records of the same
// transaction that the kept history still holds. The last stable offset
// then passes an undecided record, and when the transaction aborts the
// aborted-transaction index starts after it: a read_committed reader of
// the log (a tool following __consumer_offsets or __share_group_state)
// gets a record of an open, then aborted, transaction as committed. Here:
// a TxnOffsetCommit older than the kept history, a second one of the same
// transaction inside it, a compaction, then an abort.
//
// Expected: the last stable offset stays at the first kept record of the
// open transaction, and neither read_committed fetch returns its records.
func TestReviewKeptHistoryOpenTxnStable(t *testing.T) {
	c := newTestCluster(t)
	groupTopic(t, c, "in", 1)
	groupTopic(t, c, "other", 1)
	const group = "g-open"
	index := c.CoordinatorPartition(coordinatorGroup, group)
	p := groupTxnInit(t, c, "txn-open")
	require.NoError(t, p.commitOffsets(t, c, 5, group, "", -1, "in", 8))
	time.Sleep(300 * time.Millisecond) // older than the kept history
	_, before, _, _ := logShape(t, c, wire.ConsumerOffsetsTopic, index)
	require.NoError(t, p.commitOffsets(t, c, 5, group, "", -1, "other", 3)) // kept, at offset `before`
	compactNow(t, c, wire.ConsumerOffsetsTopic, index, 150*time.Millisecond)
	start, end, _, _ := logShape(t, c, wire.ConsumerOffsetsTopic, index)
	t.Logf("kept pending record at %d; log now [%d, %d)", before, start, end)
	require.LessOrEqual(t, start, before, "the recent record was kept")
	_, lso := txnOffsets(t, c, wire.ConsumerOffsetsTopic, index)
	assert.LessOrEqual(t, lso, before, "the last stable offset passed a record of the open transaction")

	// A read_committed Fetch of the log (a tool reading it) must not hand
	// out the records of the open transaction, which then aborts.
	raw := newTestClient(t, c, kgo.MaxVersions(kversion.V3_0_0())) // Fetch v12: by topic name
	fetch := func() (lso int64, offs []int64) {
		leader, err := c.Leader(wire.ConsumerOffsetsTopic, index)
		require.NoError(t, err)
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.IsolationLevel = -1, 0, 1<<20, 1
		req.Version = 12
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = wire.ConsumerOffsetsTopic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LastFetchedEpoch = index, start, 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := raw.Broker(int(leader)).Request(testCtx(t), req)
		require.NoError(t, err)
		fp := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
		require.NoError(t, kerr.ErrorForCode(fp.ErrorCode))
		got, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: wire.ConsumerOffsetsTopic, Partition: index, KeepControlRecords: true, Offset: start, IsolationLevel: kgo.ReadCommitted()}, &fp, kgo.DefaultDecompressor(), nil)
		for _, r := range got.Records {
			if r.ProducerID == p.pid && !r.Attrs.IsControl() {
				offs = append(offs, r.Offset)
			}
		}
		t.Logf("read_committed fetch: lso %d, aborted %+v, records of the open transaction %v", fp.LastStableOffset, fp.AbortedTransactions, offs)
		return fp.LastStableOffset, offs
	}
	_, open := fetch()
	assert.Empty(t, open, "records of the open transaction that a read_committed fetch hands out")
	p.end(t, c, false)
	_, aborted := fetch()
	assert.Empty(t, aborted, "records of the aborted transaction that a read_committed reader got")
}
