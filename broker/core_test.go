package broker

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestProduceConsumeThreeNodes(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "plain", 6)
	ctx := testCtx(t)

	prod := newTestClient(t, c, kgo.DefaultProduceTopic("plain"))
	const n = 3000
	for i := 0; i < n; i++ {
		prod.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i % 17)), Value: []byte(fmt.Sprint(i))}, func(_ *kgo.Record, err error) {
			require.NoError(t, err)
		})
	}
	require.NoError(t, prod.Flush(ctx))

	cons := newTestClient(t, c, kgo.ConsumeTopics("plain"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	lastPerPartition := map[int32]int64{}
	for len(seen) < n {
		fs := cons.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if last, ok := lastPerPartition[r.Partition]; ok {
				require.Equal(t, last+1, r.Offset, "offsets must be dense per partition")
			}
			lastPerPartition[r.Partition] = r.Offset
			require.False(t, seen[string(r.Value)], "duplicate %s", r.Value)
			seen[string(r.Value)] = true
		})
	}
	require.Len(t, lastPerPartition, 6)
}
