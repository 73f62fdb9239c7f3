package shareconsumer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// REVIEW2: staging (or marking) a record that Poll did return, and that
// the application has released or acknowledged since, fails with
// ErrNotHeld; the message used to say that the record "was not returned
// by Poll", sending the reader looking for a bug that is not there,
// whenever other records of its fetch were still held.
func TestReview2NotHeldSaysReleasedOrAcknowledged(t *testing.T) {
	const n = 10
	e := newEnv(t, broker.ShareLockDuration(time.Hour))
	e.createTopic("t", 1)
	e.groupConfig("g")
	e.produce("t", 1, values("v", n)...)
	e.groupConfig("g2")
	t.Run("transactional", func(t *testing.T) {
		c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxPollRecords(n))
		recs := pollRecords(e.ctx, t, c, n)
		mid := recs[n/2 : n/2+1] // (records of the same fetch are still held on either side)
		released, err := c.Release(mid)
		require.NoError(t, err)
		require.Equal(t, 1, released)
		err = shareconsumer.Stage(c.Acks(mid, kshare.AckAccept), c.GroupMetadata())
		require.ErrorIs(t, err, shareconsumer.ErrNotHeld)
		require.NotContains(t, err.Error(), "was not returned by Poll")
		require.ErrorContains(t, err, "released or acknowledged since")
	})
	t.Run("explicit", func(t *testing.T) {
		c := e.consumer("g2", "t", shareconsumer.Mode(shareconsumer.Explicit), shareconsumer.MaxPollRecords(n))
		recs := pollRecords(e.ctx, t, c, n)
		require.NoError(t, c.Ack(recs[n/2], kshare.AckAccept))
		require.NoError(t, c.Commit(e.ctx))
		err := c.Ack(recs[n/2], kshare.AckAccept)
		require.ErrorIs(t, err, shareconsumer.ErrNotHeld)
		require.NotContains(t, err.Error(), "was not returned by Poll")
		require.ErrorContains(t, err, "released or acknowledged since")
	})
}
