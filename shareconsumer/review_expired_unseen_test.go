package shareconsumer_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// Review finding (fixed): Metrics().ExpiredUnseen (and its WARN line) misses the
// records fetched ahead whose lock ran out when the next Poll comes more
// than one lock duration after the lock ended. Poll sweeps the held
// records first (heldSet.sweep frees every non-staged offset of an
// acquisition past deadline+lockDur, buffered ones included), and
// takeReadyLocked then counts only the offsets still stBuffered: zero. So
// the metric that exists to expose fetched-ahead records that used up a
// delivery unseen reads 0 exactly in the case of an application that
// polls rarely, and nothing is logged.
//
// Here the group refuses RENEW (share.renew.acknowledge.enable=false), so
// the 10 records fetched ahead after the first Poll expire unseen; another
// member gets them (their second delivery). The first consumer polls again
// after two lock durations.
//
// Expected: ExpiredUnseen == 10 and a WARN about them.
func TestReviewExpiredUnseenCountedWhenPollComesLate(t *testing.T) {
	const perPoll = 10
	lock := time.Second
	e := newEnv(t, broker.ShareLockDuration(lock))
	e.createTopic("t", 1)
	e.groupConfig("g", "share.renew.acknowledge.enable", "false")
	e.produce("t", 1, values("v", 2*perPoll)...)
	logs := &lineLog{}
	slow := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional),
		shareconsumer.MaxPollRecords(perPoll), shareconsumer.Logger(slog.New(logs)))

	first := pollRecords(e.ctx, t, slow, perPoll)
	require.Len(t, first, perPoll)
	e.eventually("the renewal of the fetched-ahead records refused", func() bool {
		return slow.Metrics().RenewalsRefused >= perPoll
	})
	// Their locks run out at the broker: another member gets them.
	other := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Explicit))
	// (The records the slow one's Poll returned expire too, unstaged: the
	// other member takes all twenty, each on its second delivery.)
	poll(e.ctx, t, other, 2*perPoll, func(r *kgo.Record) {
		n, _ := other.DeliveryCount(r)
		require.EqualValues(t, 2, n, "%q: not a record the slow consumer had held", r.Value)
		require.NoError(t, other.Ack(r, kshare.AckAccept))
	})
	require.NoError(t, other.Commit(e.ctx))
	// The slow application comes back later than one more lock duration.
	time.Sleep(2 * lock)
	pctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	recs, _ := slow.Poll(pctx)
	cancel()
	for _, r := range recs {
		n, _ := slow.DeliveryCount(r)
		t.Logf("slow consumer got %q offset %d delivery %d", r.Value, r.Offset, n)
	}
	require.Empty(t, recs)

	m := slow.Metrics()
	assert.EqualValues(t, perPoll, m.ExpiredUnseen, "records fetched ahead that expired before Poll returned them: %+v", m)
	assert.True(t, logs.has("lost their acquisition lock before Poll returned them"), "no WARN about them")
}

func (l *lineLog) has(substr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			return true
		}
	}
	return false
}
