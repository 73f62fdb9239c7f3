package shareconsumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// Review finding (fixed): the records a consumer fetched ahead and then released
// for MaxPollInterval (releaseIdleLocked) each use up a delivery the
// application never saw (the broker counts the delivery at acquisition; a
// RELEASE does not give it back, as in Kafka). The docs promise the
// opposite ("a record is never left to expire, and use up one of its
// deliveries, before the application has seen it"), and nothing bounds how
// often it happens: an application whose processing of a Poll takes
// longer than MaxPollInterval, with several leaders, has every leader's
// fetch ahead (and every long-poll answer that lost the race to the one
// Poll returned) released unseen after every Poll. Records then reach the
// group's delivery limit and are ARCHIVED without Poll ever returning
// them: lost to the application, although it polled until the end and
// accepted everything it got.
//
// Expected: every record is returned by Poll at least once before the
// group's start offsets pass it (a release of unseen records should not
// cost a delivery, or should not happen over and over for a live
// application).
func TestReviewMaxPollIntervalReleasesBurnDeliveries(t *testing.T) {
	const partitions, perPartition, perPoll = 3, 10, 5
	e := newEnv(t, broker.Nodes(3))
	e.createTopic("t", partitions)
	e.groupConfig("g", "share.delivery.count.limit", "2")
	e.produce("t", partitions, values("v", partitions*perPartition)...)
	ends := map[int32]int64{0: perPartition, 1: perPartition, 2: perPartition}
	c := e.consumer("g", "t", shareconsumer.MaxPollRecords(perPoll),
		shareconsumer.MaxPollInterval(300*time.Millisecond))

	seen := map[string]bool{}
	done := func() bool {
		got := e.startOffsets("g", "t")
		for p, end := range ends {
			if got[p] < end {
				return false
			}
		}
		return true
	}
	for len(seen) == 0 || !done() {
		pctx, cancel := context.WithTimeout(e.ctx, time.Second)
		recs, err := c.Poll(pctx) // accepts the previous Poll's records
		cancel()
		if pctx.Err() == nil {
			require.NoError(t, err)
		}
		for _, r := range recs {
			seen[string(r.Value)] = true
		}
		if len(recs) == 0 {
			continue
		}
		// The application works on the records for longer than
		// MaxPollInterval: until what was fetched ahead is released (or a
		// while, when nothing was).
		before := c.Metrics().ReleasedUnseen
		wctx, wcancel := context.WithTimeout(e.ctx, 2*time.Second)
		for wctx.Err() == nil && c.Metrics().ReleasedUnseen == before {
			time.Sleep(10 * time.Millisecond)
		}
		wcancel()
	}
	m := c.Metrics()
	require.Len(t, seen, partitions*perPartition,
		"records archived at the delivery limit without Poll ever returning them (metrics %+v)", m)
}
