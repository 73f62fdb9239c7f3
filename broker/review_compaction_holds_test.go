package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/wire"
)

// REVIEW holds: compaction that keeps the recent history (compactKeep) and
// a reload replay the consumer offsets to the same state, with a pending
// transactional commit written after a plain one that is older than the
// kept history, and with both kept. Whichever came last in the original
// log wins on commit, as without compaction.
func TestReviewKeptHistoryReplaysConsumerOffsets(t *testing.T) {
	for _, pendingLast := range []bool{true, false} {
		c := newTestCluster(t)
		groupTopic(t, c, "in", 1)
		const group = "g-keep"
		node := groupCoordinatorNode(t, c, group)
		index := c.CoordinatorPartition(coordinatorGroup, group)
		p := groupTxnInit(t, c, "txn-keep")
		if pendingLast {
			require.NoError(t, groupCommit(t, c, node, 9, group, "", -1, "in", map[int32]int64{0: 9})[0])
			time.Sleep(300 * time.Millisecond) // older than the kept history
			require.NoError(t, p.commitOffsets(t, c, 5, group, "", -1, "in", 8))
		} else {
			require.NoError(t, p.commitOffsets(t, c, 5, group, "", -1, "in", 8))
			time.Sleep(300 * time.Millisecond)
			require.NoError(t, groupCommit(t, c, node, 9, group, "", -1, "in", map[int32]int64{0: 9})[0])
		}
		compactNow(t, c, wire.ConsumerOffsetsTopic, index, 150*time.Millisecond)
		reloadShard(t, c, wire.ConsumerOffsetsTopic, index)
		p.end(t, c, true)
		want := int64(9)
		if pendingLast {
			want = 8
		}
		require.Equal(t, groupFetched{offset: want}, groupFetchOne(t, c, group, "in", true), "pending last: %v", pendingLast)
		reloadShard(t, c, wire.ConsumerOffsetsTopic, index)
		require.Equal(t, groupFetched{offset: want}, groupFetchOne(t, c, group, "in", false), "pending last: %v, after another reload", pendingLast)
	}
}
