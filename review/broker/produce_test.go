package brokerreview_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
)

// TestProduceRefusesBatchWhoseRecordCountLies: v2 batches whose header's
// record count (and last offset delta) disagree with the records they
// hold: a 69-byte batch of one record claiming 2^31-1, and a batch of two
// records claiming one.
//
// Today: splitBatches (batch.go) checks only that lastOffsetDelta equals
// the count minus one, never the records, so both are stored. The first
// moves the partition's end offset by 2^31-1 with 69 bytes; a share group
// then builds per-offset state for offsets that do not exist: one
// ShareFetch with MaxRecords 3,000,000 froze the broker 3.9 s and left
// +267 MiB of live heap (the window and the persisted state, one entry per
// offset); MaxRecords 2^31-1 would need ~130 GiB, i.e. the process dies.
// The second stores two records under one offset, so the next batch's
// first offset is also this batch's second record's: consumers see
// duplicate offsets. Kafka 4.4 answers INVALID_RECORD to both (checked
// against it).
func TestProduceRefusesBatchWhoseRecordCountLies(t *testing.T) {
	c, pl := startCluster(t, broker.GroupConfigDefault("share.auto.offset.reset", "earliest"))
	rc := dial(t, c.Bootstrap()[0])
	createTopic(t, rc, "liar", 1, nil)
	for _, tc := range []struct {
		name  string
		batch []byte
	}{
		{"one record claiming 2^31-1", recordBatch(batchSpec{values: [][]byte{[]byte("x")}, numRecords: 1<<31 - 1})},
		{"two records claiming one", recordBatch(batchSpec{values: [][]byte{[]byte("x"), []byte("y")}, numRecords: 1})},
	} {
		resp := rc.must(produceRequest("liar", 0, tc.batch)).(*kmsg.ProduceResponse)
		got := resp.Topics[0].Partitions[0]
		assert.Contains(t, []int16{kerr.InvalidRecord.Code, kerr.CorruptMessage.Code}, got.ErrorCode,
			"%s: stored at base offset %d", tc.name, got.BaseOffset)
	}
	require.Empty(t, pl.count())
}
