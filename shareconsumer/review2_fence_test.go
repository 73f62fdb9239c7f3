package shareconsumer_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/shareconsumer"
)

// REVIEW2: a member fenced while its share session's first ShareFetch
// (epoch 0) is parked at the leader. The consumer reset the session (its
// generation moved on) and dropped the fetch's answer as stale; but the
// leader had answered it, acquiring the records produced meanwhile for
// the member in that session, and the next ShareFetch with epoch 0
// replaces the session without releasing anything. The records stayed
// locked with a member that did not know it held them, for their whole
// lock (an hour here): the group could not move on. The consumer now
// closes such a session with the final epoch, which releases them, and
// the records come at their second delivery. (A fetch parked on an open
// session when the member is fenced is answered into the session the
// fence closes: its records are dropped too, never returned by Poll.)
func TestReview2FetchInFlightAcrossAFenceIsNotStuck(t *testing.T) {
	e := newEnv(t)
	const topic, group, n = "in", "g", 4
	e.createTopic(topic, 1)
	// Heartbeats every 5s, session timeout 1s: the coordinator expels the
	// member and the next heartbeat fences it. An hour's lock: nothing
	// comes back by expiry.
	e.groupConfig(group, "share.session.timeout.ms", "1000", "share.heartbeat.interval.ms", "5000", "share.record.lock.duration.ms", "3600000")

	var fetches, joins, incFetches, joinsAtInc atomic.Int32
	stop := e.c.ObserveRequests(func(_ int32, req kmsg.Request) {
		switch r := req.(type) {
		case *kmsg.ShareFetchRequest:
			fetches.Add(1)
			if r.ShareSessionEpoch > 0 {
				joinsAtInc.Store(joins.Load())
				incFetches.Add(1)
			}
		case *kmsg.ShareGroupHeartbeatRequest:
			if r.GroupID == group && r.MemberEpoch == 0 {
				joins.Add(1)
			}
		}
	})
	defer stop()

	// A long MaxWait: the session's first ShareFetch parks at the leader
	// (the topic is empty) and is still parked when the member is fenced.
	c := e.consumer(group, topic, shareconsumer.Mode(shareconsumer.Explicit), shareconsumer.MaxWait(25*time.Second))
	type polled struct {
		value string
		count int16
	}
	got := make(chan polled, 64)
	done := make(chan struct{})
	defer func() { <-done }()
	defer c.Close(e.ctx)
	go func() {
		defer close(done)
		for {
			recs, err := c.Poll(e.ctx)
			if errors.Is(err, kshare.ErrClosed) || e.ctx.Err() != nil {
				return
			}
			for _, r := range recs {
				d, _ := c.DeliveryCount(r)
				select {
				case got <- polled{string(r.Value), d}:
				case <-e.ctx.Done():
					return
				}
			}
		}
	}()
	e.eventually("a ShareFetch parked", func() bool { return fetches.Load() > 0 })
	// The second join is the rejoin: fenced() has run.
	e.eventually("the member fenced and rejoining", func() bool { return joins.Load() >= 2 })
	e.produce(topic, 1, values("v", n)...)

	// Each record comes first at its second delivery: the one the
	// stale answer took was released by closing its session.
	firstAtSecond := func(prefix string) {
		t.Helper()
		seen := map[string]bool{}
		for len(seen) < n {
			select {
			case p := <-got:
				if p.value[:1] != prefix || seen[p.value] {
					continue // (every later fence releases them again)
				}
				seen[p.value] = true
				require.EqualValues(t, 2, p.count, "%q was returned from the delivery its fenced session released", p.value)
			case <-e.ctx.Done():
				t.Fatalf("only %d of %d records %s* polled: they stay locked with the member", len(seen), n, prefix)
			}
		}
	}
	firstAtSecond("v")

	// Now the session is open and its ShareFetch (epoch > 0) parked; the
	// member is fenced again while it waits, and records arrive after.
	e.eventually("an incremental ShareFetch parked", func() bool { return incFetches.Load() > 0 })
	e.eventually("the member fenced while it waits", func() bool { return joins.Load() > joinsAtInc.Load() })
	e.produce(topic, 1, values("w", n)...)
	firstAtSecond("w")
}
