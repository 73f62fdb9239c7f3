package shareconsumer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// Review finding (fixed): records fetched ahead are renewed one acquisition per
// partition per RENEW request (dueRenewalsLocked keeps only the first due
// acquisition of a partition in due.held[tp]; the others wait for the
// next step). A fetch whose AcquiredRecords come as many ranges
// (redelivered records whose delivery counts differ: every run of one
// count is its own range, here one per record) needs one round trip per
// range to renew, so with a lock of L and a round trip of r, a fetch ahead
// of more than L/2/r ranges cannot be renewed in time: the records
// further down the list expire unseen (RenewalsRefused, ExpiredUnseen,
// and a delivery each) although the broker renews RENEW requests of any
// size. Here: 1s lock, 5ms round trip, 200 single-record ranges.
//
// Expected: every fetched-ahead record is renewed in time (one RENEW for
// a partition's ranges), none expires unseen.
func TestReviewFetchAheadOfManyRangesIsRenewedInTime(t *testing.T) {
	const half = 200
	e := newEnv(t, broker.ShareLockDuration(time.Second))
	e.createTopic("t", 1)
	e.groupConfig("g")
	e.produce("t", 1, values("v", 2*half)...)

	// Make the delivery counts alternate: even offsets delivered twice,
	// odd ones once, all available again.
	prep := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Explicit), shareconsumer.MaxPollRecords(2*half))
	all := pollRecords(e.ctx, t, prep, 2*half)
	for _, r := range all {
		if r.Offset%2 == 0 {
			require.NoError(t, prep.Ack(r, kshare.AckRelease))
		}
	}
	require.NoError(t, prep.Commit(e.ctx))
	evens := pollRecords(e.ctx, t, prep, half)
	// (evens first: an even offset's record in all is of its ended first
	// delivery, which Ack refuses.)
	marked := map[int64]bool{}
	for _, r := range append(evens, all...) {
		if n, held := prep.DeliveryCount(r); held && !marked[r.Offset] && (r.Offset%2 == 1 || n == 2) {
			require.NoError(t, prep.Ack(r, kshare.AckRelease))
			marked[r.Offset] = true
		}
	}
	require.NoError(t, prep.Commit(e.ctx))
	require.NoError(t, prep.Close(e.ctx))

	// A network round trip of 5ms for ShareAcknowledge.
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if _, ok := req.(*kmsg.ShareAcknowledgeRequest); ok {
			time.Sleep(5 * time.Millisecond)
		}
		return broker.FaultAction{}
	})
	t.Cleanup(stop)

	c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxPollRecords(half))
	first := pollRecords(e.ctx, t, c, half)
	require.Len(t, first, half)
	// The application works on the first half; the second half, fetched
	// ahead as 200 ranges, waits renewed, three rounds over.
	e.eventually("three rounds of renewals, or one given up", func() bool {
		m := c.Metrics()
		return m.LocksRenewed >= 3*half || m.RenewalsRefused > 0
	})
	m := c.Metrics()
	assert.Zero(t, m.RenewalsRefused, "fetched-ahead records whose renewal came too late: %+v", m)

	seen := map[string]bool{}
	for _, r := range first {
		seen[string(r.Value)] = true
	}
	for len(seen) < 2*half {
		recs, err := c.Poll(e.ctx)
		require.NoError(t, err)
		for _, r := range recs {
			seen[string(r.Value)] = true
		}
		_, _ = c.Release(recs)
		if c.Metrics().ExpiredUnseen > 0 {
			break
		}
	}
	assert.Zero(t, c.Metrics().ExpiredUnseen, "fetched-ahead records expired before Poll returned them")
}
