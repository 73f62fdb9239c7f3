package shareconsumer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// Review finding (fixed): Release's documentation says "A record the broker has
// delivered to this consumer again since Poll returned r is that newer
// delivery's, and is skipped too." It is not skipped: Release looks the
// record up by topic, partition and offset only, so releasing the *old*
// *kgo.Record of a failed transaction (an application that pipelines Polls
// and releases the records of a transaction that failed earlier) gives
// back the newer delivery the application is working on now. That
// delivery then fails to stage with ErrNotHeld, which is kshare.ErrUsage
// (the README loop, examples/ctp/worker.go, stops the worker on
// ErrUsage), and the record is delivered a further time.
//
// Expected: Release(old) returns 0 and the newer delivery stays held and
// stageable.
func TestReviewReleaseOfAnOldDeliverySkipsTheNewerOne(t *testing.T) {
	e := newEnv(t, broker.ShareLockDuration(time.Second))
	e.createTopic("t", 1)
	e.groupConfig("g")
	e.produce("t", 1, "v0")
	c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional))

	old := pollRecords(e.ctx, t, c, 1)[0]
	// The application's work on old fails slowly; its lock runs out and
	// the broker delivers the record to this consumer again.
	var newer *kgo.Record
	for newer == nil {
		recs, err := c.Poll(e.ctx)
		require.NoError(t, err)
		for _, r := range recs {
			if n, _ := c.DeliveryCount(r); r.Offset == old.Offset && n == 2 {
				newer = r
			}
		}
	}
	require.NotSame(t, old, newer)

	// The failed transaction's records are released, as the docs advise.
	n, err := c.Release([]*kgo.Record{old})
	require.NoError(t, err)
	assert.Zero(t, n, "Release of the old delivery released the newer delivery of the same offset")

	_, held := c.DeliveryCount(newer)
	assert.True(t, held, "the newer delivery is no longer held")
	err = shareconsumer.Stage(c.Acks([]*kgo.Record{newer}, kshare.AckAccept), c.GroupMetadata())
	assert.NoError(t, err, "the newer delivery can no longer be staged")
	assert.NotErrorIs(t, err, kshare.ErrUsage, "a usage error for a record the application got from Poll")
}
