package shareconsumer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// REVIEW2: once the application has been slower than MaxPollInterval,
// the consumer fetches for a waiting Poll from one leader at a time, and
// the turn passes when a leader's fetch answers. A leader whose every
// ShareFetch fails (it is unreachable, say) never answered, so it kept
// the turn: the healthy leaders' partitions were never fetched again,
// and Poll got nothing although they held records.
func TestReview2SlowModeSurvivesAFailingLeader(t *testing.T) {
	const partitions, n = 2, 40
	e := newEnv(t, broker.Nodes(2), broker.ShareLockDuration(time.Hour))
	e.createTopic("t", partitions)
	require.NoError(t, e.c.MoveLeader("t", 0, 0))
	require.NoError(t, e.c.MoveLeader("t", 1, 1))
	e.groupConfig("g")
	e.produce("t", partitions, values("v", n)...)
	c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional),
		shareconsumer.MaxPollRecords(1), shareconsumer.MaxPollInterval(300*time.Millisecond))

	healthy := map[string]bool{} // values of partition 1, led by node 1
	note := func(r *kgo.Record) {
		if r.Partition == 1 {
			healthy[string(r.Value)] = true
		}
	}
	first := pollRecords(e.ctx, t, c, 1)
	for _, r := range first {
		note(r)
	}
	// Both sessions fetched ahead; no Poll for MaxPollInterval releases
	// what they fetched, and the consumer turns slow.
	e.eventually("the records fetched ahead released", func() bool { return c.Metrics().ReleasedUnseen > 0 })

	// Node 0 now fails every ShareFetch.
	stop := e.c.InjectFaults(func(node int32, _ string, req kmsg.Request) broker.FaultAction {
		if _, ok := req.(*kmsg.ShareFetchRequest); ok && node == 0 {
			return broker.FaultAction{Fault: broker.DropRequest}
		}
		return broker.FaultAction{}
	})
	defer stop()
	for len(healthy) < n/partitions {
		recs, err := c.Poll(e.ctx)
		if e.ctx.Err() != nil {
			t.Fatalf("%d of the %d records of the healthy leader polled", len(healthy), n/partitions)
		}
		if err != nil {
			continue // the failing leader's errors
		}
		for _, r := range recs {
			note(r)
		}
	}
}
