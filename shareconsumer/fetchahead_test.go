package shareconsumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// Records fetched ahead of Poll are renewed until Poll returns them, so
// that an application slower than the lock never loses a delivery of a
// record it has not seen: the records of the second Poll, fetched while
// the application held the first ones for several lock durations, come
// with delivery count 1, and none expired unseen. (Without the renewal
// the fetched-ahead locks ran out, the next leader's fetch took the
// records' second delivery, and with L leaders a record could use about
// L deliveries without ever being returned.)
func TestFetchedAheadRecordsAreRenewedUntilPolled(t *testing.T) {
	const partitions, perPoll = 3, 10
	e := newEnv(t, broker.Nodes(3), broker.ShareLockDuration(time.Second))
	e.createTopic("t", partitions)
	e.groupConfig("g")
	e.produce("t", partitions, values("v", 3*perPoll*partitions)...)
	c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxPollRecords(perPoll))

	first, err := c.Poll(e.ctx)
	require.NoError(t, err)
	require.NotEmpty(t, first)
	// The application works on the first records for longer than the
	// lock: the sessions' fetched-ahead records are renewed meanwhile, at
	// least three times each (half a lock apart).
	e.eventually("fetched-ahead records renewed three times over", func() bool {
		// Each round renews the fetch every session holds.
		return c.Metrics().LocksRenewed >= int64(3*perPoll*partitions)
	})
	seen := map[string]bool{}
	for _, r := range first {
		seen[string(r.Value)] = true
	}
	for len(seen) < 2*perPoll {
		recs, err := c.Poll(e.ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, len(recs), perPoll)
		for _, r := range recs {
			n, ok := c.DeliveryCount(r)
			require.True(t, ok)
			require.EqualValues(t, 1, n, "%q: a fetched-ahead record lost a delivery before Poll returned it", r.Value)
			seen[string(r.Value)] = true
		}
	}
	m := c.Metrics()
	require.Zero(t, m.ExpiredUnseen)
	require.Zero(t, m.Redelivered)
}

// MaxPollRecords is a maximum: however many leaders have records and
// however the records are batched (one batch of 200 per partition here), a
// Poll returns at most that many, and the records left over wait for the
// next Poll, each delivered once. A leader with ShareFetch v2 acquires at
// most that many (the record-limit acquire mode); one with v1 only hands
// out whole batches, which the consumer splits across Polls.
func TestMaxPollRecordsIsAMaximum(t *testing.T) {
	const partitions, n, limit = 3, 600, 70
	for name, opts := range map[string][]broker.Opt{
		"record limit":  nil,
		"whole batches": {broker.APIVersionCap(kmsg.ShareFetch.Int16(), 1)},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, append(opts, broker.Nodes(3))...)
			e.createTopic("t", partitions)
			e.groupConfig("g")
			e.produce("t", partitions, values("v", n)...)
			c := e.consumer("g", "t", shareconsumer.MaxPollRecords(limit))
			seen := map[string]int{}
			for len(seen) < n {
				recs, err := c.Poll(e.ctx)
				require.NoError(t, err)
				require.LessOrEqual(t, len(recs), limit, "a Poll returned more than MaxPollRecords")
				for _, r := range recs {
					seen[string(r.Value)]++
				}
			}
			for v, k := range seen {
				require.Equal(t, 1, k, "%s delivered %d times", v, k)
			}
			require.Zero(t, c.Metrics().ExpiredUnseen)
		})
	}
}

// A consumer fetches nothing before its first Poll, so that one created
// long before it is used holds nothing from the group: the consumer that
// polls gets every record.
func TestNoFetchBeforeTheFirstPoll(t *testing.T) {
	const partitions, n = 2, 40
	e := newEnv(t, broker.Nodes(2), broker.ShareLockDuration(time.Hour))
	e.createTopic("t", partitions)
	e.groupConfig("g")
	e.produce("t", partitions, values("v", n)...)
	idle := e.consumer("g", "t")
	e.eventually("the idle consumer joined with an assignment", func() bool { return len(idle.Assigned()) > 0 })
	busy := e.consumer("g", "t")
	seen := poll(e.ctx, t, busy, n, nil) // with a one-hour lock, records the idle one held would never come
	require.Len(t, seen, n)
	require.Zero(t, idle.Metrics().RecordsDelivered)
}

// An application that stops polling gets what was fetched ahead for it
// released after MaxPollInterval, and nothing more is fetched for it until
// it polls again: another member gets those records.
func TestMaxPollIntervalReleasesFetchedAhead(t *testing.T) {
	const n, perPoll = 40, 10
	e := newEnv(t, broker.ShareLockDuration(time.Hour))
	e.createTopic("t", 1)
	e.groupConfig("g")
	e.produce("t", 1, values("v", n)...)
	slow := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional),
		shareconsumer.MaxPollRecords(perPoll), shareconsumer.MaxPollInterval(500*time.Millisecond))
	first := pollRecords(e.ctx, t, slow, perPoll)
	e.eventually("the records fetched ahead released", func() bool { return slow.Metrics().ReleasedUnseen > 0 })
	other := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional))
	seen := poll(e.ctx, t, other, n-len(first), nil)
	for _, r := range first {
		require.NotContains(t, seen, string(r.Value), "the slow consumer still holds what Poll returned")
	}
}

// Release gives polled records back to the group at once: with a lock of
// an hour they could otherwise not come back within the test. It skips
// what the consumer no longer holds, and is refused outside
// Transactional mode.
func TestReleaseGivesRecordsBackAtOnce(t *testing.T) {
	const n = 20
	e := newEnv(t, broker.ShareLockDuration(time.Hour))
	e.createTopic("t", 1)
	e.groupConfig("g")
	e.produce("t", 1, values("v", n)...)
	c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional))
	recs := pollRecords(e.ctx, t, c, n)
	released, err := c.Release(append(recs, nil))
	require.NoError(t, err)
	require.Equal(t, n, released)
	again, err := c.Release(recs)
	require.NoError(t, err)
	require.Zero(t, again, "released records are no longer held")
	require.EqualValues(t, n, c.Metrics().Released)

	poll(e.ctx, t, c, n, func(r *kgo.Record) {
		d, _ := c.DeliveryCount(r)
		require.EqualValues(t, 2, d, "%q came back before its lock ran out: its second delivery", r.Value)
	})

	implicit := e.consumer("g", "t")
	_, err = implicit.Release(recs)
	require.ErrorContains(t, err, "not valid in implicit mode")
}

// On a broker that cannot renew locks (no ShareAcknowledge v2) a consumer
// does not fetch ahead of Poll, since nothing could keep the fetched
// records' locks until Poll returns them: another member gets everything
// but what the first one's Poll returned.
func TestNoFetchAheadWithoutRenew(t *testing.T) {
	const n, perPoll = 60, 10
	e := newEnv(t, broker.ShareLockDuration(time.Hour), broker.APIVersionCap(kmsg.ShareAcknowledge.Int16(), 1))
	e.createTopic("t", 1)
	e.groupConfig("g")
	e.produce("t", 1, values("v", n)...)
	first := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxPollRecords(perPoll))
	got := pollRecords(e.ctx, t, first, perPoll)
	other := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional))
	seen := poll(e.ctx, t, other, n-len(got), nil) // an hour-long lock on fetched-ahead records would keep some away
	require.Len(t, seen, n-len(got))
}

// A group that begins to read a partition at its latest offset while the
// partition already has records says so once, at INFO, naming the
// records it skipped; one that reads from the earliest offset does not.
func TestStartAtLatestIsLogged(t *testing.T) {
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 1, values("old", 5)...)
	for _, tc := range []struct {
		group    string
		earliest bool
	}{{"latest-group", false}, {"earliest-group", true}} {
		if tc.earliest {
			e.groupConfig(tc.group)
		}
		logs := &lineLog{}
		c := e.consumer(tc.group, "t", shareconsumer.Logger(slog.New(logs)))
		if tc.earliest {
			poll(e.ctx, t, c, 5, nil)
		} else {
			// A record written after the group began is delivered;
			// the five before it are not.
			e.eventually("the group began reading", func() bool {
				pctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
				defer cancel()
				c.Poll(pctx)
				_, ok := e.startOffsets(tc.group, "t")[0]
				return ok
			})
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(strings.Join(logs.lines, "\n"))
			}
		})
		e.eventually("the start-offset check done", func() bool { return logs.find("start-offset check done") != "" })
		require.NoError(t, c.Close(e.ctx))
		line := logs.find("began reading partitions at their latest offset")
		if tc.earliest {
			require.Empty(t, line, "a group reading from the earliest offset skipped nothing")
			continue
		}
		require.Contains(t, line, "records_skipped=5")
		require.Contains(t, line, "t/0 from offset 5")
	}
}

// lineLog is a slog.Handler that keeps every line logged.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *lineLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}

func (l *lineLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lineLog) WithGroup(string) slog.Handler      { return l }

func (l *lineLog) find(substr string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			return line
		}
	}
	return ""
}

// A leader with ShareFetch v2 acquires no more than MaxPollRecords per
// fetch (the record-limit acquire mode, KIP-1206), even inside one big
// record batch: what one consumer holds is its Poll and one fetch ahead,
// and another member gets the rest at once (with a lock of an hour, it
// could not get records the first one had acquired).
func TestRecordLimitAcquiresNoMore(t *testing.T) {
	const n, perPoll = 100, 10
	e := newEnv(t, broker.ShareLockDuration(time.Hour))
	e.createTopic("t", 1)
	e.groupConfig("g")
	e.produce("t", 1, values("v", n)...) // one batch
	first := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxPollRecords(perPoll))
	got := pollRecords(e.ctx, t, first, perPoll)
	require.Len(t, got, perPoll)
	other := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional))
	seen := poll(e.ctx, t, other, n-2*perPoll, nil)
	require.GreaterOrEqual(t, len(seen), n-2*perPoll)
}

// Records that waited for Poll until less than seven eighths of their
// lock was left come with a whole lock from Poll: once Poll returned them,
// one RENEW starts their lock again (without RenewHeldLocks the
// application would otherwise get what was left, as little as half a
// lock). The deadline the consumer then reports is later than the Poll
// call plus a lock duration, which the fetch, made before the Poll, could
// not give. (The records wait 3/8 of the lock here: past the eighth,
// before the half at which a renewal of fetched-ahead records is due.)
func TestPolledRecordsGetAWholeLock(t *testing.T) {
	const perPoll, lock = 10, 8 * time.Second
	e := newEnv(t, broker.ShareLockDuration(lock))
	e.createTopic("t", 1)
	e.groupConfig("g")
	e.produce("t", 1, values("v", 4*perPoll)...)
	c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxPollRecords(perPoll))
	pollRecords(e.ctx, t, c, perPoll)
	time.Sleep(lock * 3 / 8)
	called := time.Now()
	recs, err := c.Poll(e.ctx)
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	e.eventually("the hand-over renewal", func() bool { return c.Metrics().LocksRenewed >= int64(len(recs)) })
	for _, r := range recs {
		d, ok := c.LockDeadline(r)
		require.True(t, ok)
		require.True(t, d.After(called.Add(lock)), "%q: lock deadline %v, Poll called %v", r.Value, d, called)
	}
}

// Acknowledgements built for one delivery of a record are refused once
// the record has been delivered to the consumer again (its lock ran out,
// and a later Poll returned it with a higher delivery count): the
// delivery they describe is over. A renewal of the same delivery, which
// moves its lock, is no reason to refuse (TestPolledRecordsGetAWholeLock).
func TestAcksOfAnEndedDeliveryAreRefused(t *testing.T) {
	e := newEnv(t, broker.ShareLockDuration(time.Second))
	e.createTopic("t", 1)
	e.groupConfig("g")
	e.produce("t", 1, "a")
	c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional))
	first := pollRecords(e.ctx, t, c, 1)
	acks := c.Acks(first, kshare.AckAccept)
	poll(e.ctx, t, c, 1, func(r *kgo.Record) { // after the lock ran out
		d, _ := c.DeliveryCount(r)
		require.EqualValues(t, 2, d)
	})
	err := shareconsumer.Stage(acks, c.GroupMetadata())
	require.ErrorIs(t, err, shareconsumer.ErrLockExpired)
	require.ErrorContains(t, err, "delivery 1 ended, delivery 2 holds it")
}

// A renewal is not held up by a long poll: while the application polls on
// (no new records, a MaxWait far longer than the lock), the locks of the
// records it holds (RenewHeldLocks) are renewed in time, because a
// session shortens its ShareFetch's MaxWait to its next renewal; the
// records stage after 2.5 lock durations. (A renewal used to wait for the
// fetch's answer, and a lock shorter than MaxWait ran out.)
func TestRenewalsAreNotHeldUpByALongPoll(t *testing.T) {
	const lock = 2 * time.Second
	e := newEnv(t, broker.ShareLockDuration(lock))
	e.createTopic("t", 1)
	e.groupConfig("g")
	e.produce("t", 1, values("v", 5)...)
	c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.RenewHeldLocks(true),
		shareconsumer.MaxWait(30*time.Second))
	recs := pollRecords(e.ctx, t, c, 5)
	pctx, cancel := context.WithTimeout(e.ctx, lock*5/2)
	defer cancel()
	_, err := c.Poll(pctx) // nothing more to fetch: the leader holds the fetch
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, shareconsumer.Stage(c.Acks(recs, kshare.AckAccept), c.GroupMetadata()), "a lock ran out while a long poll held the session")
}

// Records the application gives back go to the group, not to its own
// next fetch ahead: a consumer that polled a whole partition and released
// it at once, then did not poll again, must not take the records back
// (and hold them, renewed, until its MaxPollInterval) with a fetch ahead
// sent after the release. The other member gets every record, at its
// second delivery. Rounds repeat the race of the release with the fetch
// ahead that follows a Poll.
func TestReleasedRecordsAreNotFetchedAheadAgain(t *testing.T) {
	const rounds, n = 10, 10
	e := newEnv(t, broker.ShareLockDuration(time.Hour))
	for round := range rounds {
		topic, group := fmt.Sprintf("t%d", round), fmt.Sprintf("g%d", round)
		e.createTopic(topic, 1)
		e.groupConfig(group)
		e.produce(topic, 1, values("v", n)...)
		first := e.consumer(group, topic, shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxPollRecords(n))
		recs := pollRecords(e.ctx, t, first, n)
		released, err := first.Release(recs)
		require.NoError(t, err)
		require.Equal(t, n, released)
		other := e.consumer(group, topic, shareconsumer.Mode(shareconsumer.Transactional))
		poll(e.ctx, t, other, n, func(r *kgo.Record) {
			d, _ := other.DeliveryCount(r)
			require.EqualValues(t, 2, d, "round %d: %q", round, r.Value)
		})
		first.Close(e.ctx)
		other.Close(e.ctx)
	}
}

// ShareAcquireMode is sent in every ShareFetch: in batch-optimized mode a
// leader hands out a whole batch past MaxPollRecords (the consumer keeps
// the rest for the next Polls), in the default record-limit mode it
// acquires at most MaxPollRecords. A value that is neither is refused.
func TestShareAcquireMode(t *testing.T) {
	_, err := shareconsumer.New(shareconsumer.SeedBrokers("127.0.0.1:1"), shareconsumer.Group("g"), shareconsumer.Topics("t"),
		shareconsumer.ShareAcquireMode(shareconsumer.AcquireMode(7)))
	require.ErrorIs(t, err, kshare.ErrUsage)
	require.Equal(t, "batch_optimized", shareconsumer.BatchOptimized.String())

	const n, perPoll = 100, 10
	for _, tc := range []struct {
		mode        shareconsumer.AcquireMode
		opts        []shareconsumer.Opt
		mostInFetch int64
	}{
		{shareconsumer.RecordLimit, nil, perPoll},
		{shareconsumer.BatchOptimized, []shareconsumer.Opt{shareconsumer.ShareAcquireMode(shareconsumer.BatchOptimized)}, n},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			e := newEnv(t, broker.ShareLockDuration(time.Hour))
			e.createTopic("t", 1)
			e.groupConfig("g")
			e.produce("t", 1, values("v", n)...) // one batch
			var mu sync.Mutex
			modes := make(map[int8]bool)
			var most int64
			stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
				sf, ok := req.(*kmsg.ShareFetchRequest)
				if !ok {
					return broker.FaultAction{}
				}
				mu.Lock()
				modes[sf.ShareAcquireMode] = true
				mu.Unlock()
				return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
					r, ok := resp.(*kmsg.ShareFetchResponse)
					if !ok {
						return
					}
					var acquired int64
					for _, tp := range r.Topics {
						for _, p := range tp.Partitions {
							for _, a := range p.AcquiredRecords {
								acquired += a.LastOffset - a.FirstOffset + 1
							}
						}
					}
					mu.Lock()
					most = max(most, acquired)
					mu.Unlock()
				}}
			})
			defer stop()
			c := e.consumer("g", "t", append([]shareconsumer.Opt{shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxPollRecords(perPoll)}, tc.opts...)...)
			require.Len(t, pollRecords(e.ctx, t, c, perPoll), perPoll, "a Poll returns at most MaxPollRecords either way")
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, map[int8]bool{int8(tc.mode): true}, modes)
			require.Equal(t, tc.mostInFetch, most)
		})
	}
}
