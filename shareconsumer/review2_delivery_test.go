package shareconsumer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// REVIEW2: acknowledgements of a record's ended delivery are refused even
// when they are built after the newer delivery reached Poll. A slow worker
// holds the record of delivery 1 while its lock runs out and a later Poll
// returns delivery 2 (to another worker); the slow worker's Acks (or
// Explicit Ack) of its old record used to take the newer delivery's
// count and lock, and so staged (or marked) the delivery another worker
// is processing, although Release already tells the two apart.
func TestReview2AcksOfAnEndedDeliveryBuiltLateAreRefused(t *testing.T) {
	redelivered := func(t *testing.T, mode shareconsumer.AckMode) (*env, *shareconsumer.Consumer, []*kgo.Record) {
		e := newEnv(t, broker.ShareLockDuration(time.Second))
		e.createTopic("t", 1)
		e.groupConfig("g")
		e.produce("t", 1, "a")
		c := e.consumer("g", "t", shareconsumer.Mode(mode))
		first := pollRecords(e.ctx, t, c, 1)
		poll(e.ctx, t, c, 1, func(r *kgo.Record) { // after the lock ran out
			d, _ := c.DeliveryCount(r)
			require.EqualValues(t, 2, d)
		})
		return e, c, first
	}
	t.Run("transactional", func(t *testing.T) {
		_, c, first := redelivered(t, shareconsumer.Transactional)
		err := shareconsumer.Stage(c.Acks(first, kshare.AckAccept), c.GroupMetadata())
		require.ErrorIs(t, err, shareconsumer.ErrLockExpired)
		require.ErrorContains(t, err, "delivery 1 ended, delivery 2 holds it")
	})
	t.Run("explicit", func(t *testing.T) {
		_, c, first := redelivered(t, shareconsumer.Explicit)
		err := c.Ack(first[0], kshare.AckRelease)
		require.ErrorIs(t, err, shareconsumer.ErrLockExpired)
		require.ErrorContains(t, err, "delivery 1 ended, delivery 2 holds it")
	})
}
