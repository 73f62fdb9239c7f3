package shareconsumer_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// TestMain fails the package if a test leaves a goroutine behind: the
// heartbeat loop and every session goroutine must end at Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Two implicit-mode members of one group share a 3-partition topic while
// records arrive: both get records, every record is delivered exactly once,
// and every record ends ACKNOWLEDGED.
func TestImplicitTwoMembersEachRecordOnce(t *testing.T) {
	e := newEnv(t, broker.Nodes(3))
	const topic, group = "orders", "g"
	e.createTopic(topic, 3)
	e.groupConfig(group)
	members := []*shareconsumer.Consumer{
		e.consumer(group, topic, shareconsumer.MaxPollRecords(10)),
		e.consumer(group, topic, shareconsumer.MaxPollRecords(10)),
	}
	e.eventually("both members assigned", func() bool {
		return len(members[0].Assigned()) > 0 && len(members[1].Assigned()) > 0
	})

	var mu sync.Mutex
	seen := make(map[string]int)
	per := make([]int, len(members))
	ctx, stop := context.WithCancel(e.ctx)
	defer stop()
	var wg sync.WaitGroup
	for i, c := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				recs, err := c.Poll(ctx)
				if err != nil && ctx.Err() == nil {
					t.Errorf("member %d: %v", i, err)
					return
				}
				mu.Lock()
				for _, r := range recs {
					seen[string(r.Value)]++
					per[i]++
					if n, _ := c.DeliveryCount(r); n != 1 {
						t.Errorf("record %q delivered with count %d", r.Value, n)
					}
				}
				mu.Unlock()
			}
		}()
	}
	// Records arrive in rounds: at least 20, and until both members have
	// got some. Every member is assigned every partition, so which one
	// gets a record is a race between their fetches: a fixed number of
	// rounds would leave "both get records" to how fast each runs.
	const minRounds, perRound = 20, 30
	delivered := func() (total int, both bool) {
		mu.Lock()
		defer mu.Unlock()
		return len(seen), per[0] > 0 && per[1] > 0
	}
	rounds := 0
	for ; ; rounds++ {
		if _, both := delivered(); rounds >= minRounds && both {
			break
		}
		require.NoError(t, e.ctx.Err(), "after %d rounds not both members got records", rounds)
		e.produce(topic, 3, values("r"+strconv.Itoa(rounds)+"-", perRound)...)
		if rounds >= minRounds {
			// One more round only once this one was delivered.
			e.eventually("round delivered", func() bool { n, _ := delivered(); return n == (rounds+1)*perRound })
		}
	}
	e.eventually("every record delivered", func() bool {
		n, _ := delivered()
		return n == rounds*perRound
	})
	// The members keep polling, so the last records' acceptance goes out.
	e.allAcknowledged(group, topic, map[int32]int64{0: int64(rounds * perRound / 3), 1: int64(rounds * perRound / 3), 2: int64(rounds * perRound / 3)})
	stop()
	wg.Wait()
	for v, n := range seen {
		require.Equal(t, 1, n, "value %s", v)
	}
	require.Positive(t, per[0], "member 0 got records")
	require.Positive(t, per[1], "member 1 got records")
}

// In implicit mode a poll's records are held until the next Poll, which
// accepts them; Close accepts the last poll's.
func TestImplicitAcceptsOnNextPollAndClose(t *testing.T) {
	e := newEnv(t)
	const topic, group = "in", "g"
	e.createTopic(topic, 1)
	e.groupConfig(group)
	e.produce(topic, 1, values("a", 10)...)
	c := e.consumer(group, topic)
	poll(e.ctx, t, c, 10, nil)
	require.EqualValues(t, 0, e.startOffsets(group, topic)[0], "nothing accepted before the next poll")

	e.produce(topic, 1, values("b", 5)...)
	poll(e.ctx, t, c, 5, nil)
	e.allAcknowledged(group, topic, map[int32]int64{0: 10})
	require.NoError(t, c.Close(e.ctx))
	e.allAcknowledged(group, topic, map[int32]int64{0: 15})
}

// Explicit mode: accepted and rejected records are never delivered again,
// released ones come back with delivery count 2, and a record released
// until the group's delivery limit is archived.
func TestExplicitAcceptReleaseReject(t *testing.T) {
	e := newEnv(t, broker.ShareDeliveryLimit(3))
	const topic, group = "in", "g"
	e.createTopic(topic, 1)
	e.groupConfig(group)
	e.produce(topic, 1, values("", 20)...)
	c := e.consumer(group, topic, shareconsumer.Mode(shareconsumer.Explicit))

	released := make(map[string]bool)
	poll(e.ctx, t, c, 20, func(r *kgo.Record) {
		i, _ := strconv.Atoi(string(r.Value))
		typ := kshare.AckAccept
		switch i % 4 {
		case 1:
			typ = kshare.AckRelease
			released[string(r.Value)] = true
		case 3:
			typ = kshare.AckReject
		}
		require.NoError(t, c.Ack(r, typ))
	})
	require.NoError(t, c.Commit(e.ctx))

	// Delivery 2: release them again; delivery 3 reaches the limit.
	for delivery := int16(2); delivery <= 3; delivery++ {
		got := poll(e.ctx, t, c, len(released), func(r *kgo.Record) {
			require.True(t, released[string(r.Value)], "record %q came back", r.Value)
			n, ok := c.DeliveryCount(r)
			require.True(t, ok)
			require.Equal(t, delivery, n, "record %q", r.Value)
			require.NoError(t, c.Ack(r, kshare.AckRelease))
		})
		require.Len(t, got, len(released))
		done := make(chan error, 1)
		c.CommitAsync(func(err error) { done <- err })
		require.NoError(t, <-done)
	}
	// Released at the limit: archived, so the group is done with all 20.
	e.allAcknowledged(group, topic, map[int32]int64{0: 20})
	expectNothing(e.ctx, t, c, time.Second)
}

// A record whose lock runs out before it is acknowledged is delivered
// again, with its delivery count raised; the stale mark is not sent.
func TestExplicitLockExpiryRedelivers(t *testing.T) {
	e := newEnv(t, broker.ShareLockDuration(time.Second))
	const topic, group = "in", "g"
	e.createTopic(topic, 1)
	e.groupConfig(group)
	e.produce(topic, 1, values("", 5)...)
	c := e.consumer(group, topic, shareconsumer.Mode(shareconsumer.Explicit))

	first := pollRecords(e.ctx, t, c, 5)
	deadline, ok := c.LockDeadline(first[0])
	require.True(t, ok)
	time.Sleep(time.Until(deadline) + 100*time.Millisecond)

	again := poll(e.ctx, t, c, 5, func(r *kgo.Record) {
		n, _ := c.DeliveryCount(r)
		require.EqualValues(t, 2, n, "record %q", r.Value)
		require.NoError(t, c.Ack(r, kshare.AckAccept))
	})
	require.Len(t, again, 5)
	require.NoError(t, c.Commit(e.ctx))
	e.allAcknowledged(group, topic, map[int32]int64{0: 5})
}

// Records an explicit consumer never marked are released at Close: another
// member gets them at once (the lock is 30s), as a second delivery.
func TestExplicitCloseReleasesUnacked(t *testing.T) {
	e := newEnv(t)
	const topic, group = "in", "g"
	e.createTopic(topic, 2)
	e.groupConfig(group)
	e.produce(topic, 2, values("", 10)...)
	c1 := e.consumer(group, topic, shareconsumer.Mode(shareconsumer.Explicit))
	recs := pollRecords(e.ctx, t, c1, 10)
	for _, r := range recs[:3] {
		require.NoError(t, c1.Ack(r, kshare.AckAccept))
	}
	require.NoError(t, c1.Close(e.ctx))
	require.ErrorIs(t, c1.Ack(recs[4], kshare.AckAccept), kshare.ErrClosed)

	c2 := e.consumer(group, topic, shareconsumer.Mode(shareconsumer.Explicit))
	got := poll(e.ctx, t, c2, 7, func(r *kgo.Record) {
		n, _ := c2.DeliveryCount(r)
		require.EqualValues(t, 2, n)
	})
	for _, r := range recs[:3] {
		require.NotContains(t, got, string(r.Value), "accepted record delivered again")
	}
}

// Misuse fails with the documented errors instead of doing anything.
func TestMisuseErrors(t *testing.T) {
	_, err := shareconsumer.New(shareconsumer.Group("g"), shareconsumer.Topics("t"))
	require.ErrorContains(t, err, "seed brokers")
	_, err = shareconsumer.New(shareconsumer.SeedBrokers("127.0.0.1:1"), shareconsumer.Topics("t"))
	require.ErrorContains(t, err, "share group")
	_, err = shareconsumer.New(shareconsumer.SeedBrokers("127.0.0.1:1"), shareconsumer.Group("g"))
	require.ErrorContains(t, err, "topics")
	_, err = shareconsumer.New(shareconsumer.SeedBrokers("127.0.0.1:1"), shareconsumer.Group("g"), shareconsumer.Topics("t"), shareconsumer.MaxPollRecords(0))
	require.ErrorContains(t, err, "max poll records")
	_, err = shareconsumer.New(nil)
	require.Error(t, err)

	e := newEnv(t)
	const topic, group = "in", "g"
	e.createTopic(topic, 1)
	e.groupConfig(group)
	e.produce(topic, 1, "x")
	implicit := e.consumer(group, topic)
	recs := pollRecords(e.ctx, t, implicit, 1)
	require.ErrorIs(t, implicit.Ack(recs[0], kshare.AckAccept), kshare.ErrUsage)
	require.ErrorIs(t, implicit.Commit(e.ctx), kshare.ErrUsage)
	acks := implicit.Acks(recs, kshare.AckAccept)
	require.ErrorIs(t, shareconsumer.Stage(acks, implicit.GroupMetadata()), kshare.ErrUsage)

	explicit := e.consumer("other", topic, shareconsumer.Mode(shareconsumer.Explicit))
	require.ErrorIs(t, explicit.Ack(recs[0], kshare.AckType(4)), kshare.ErrUsage, "RENEW is the consumer's own")
	require.ErrorIs(t, explicit.Ack(recs[0], kshare.AckAccept), shareconsumer.ErrNotHeld)
	require.ErrorIs(t, explicit.Ack(nil, kshare.AckAccept), shareconsumer.ErrNotHeld)
	require.NoError(t, explicit.Commit(e.ctx), "nothing to commit")

	require.NoError(t, implicit.Close(e.ctx))
	_, err = implicit.Poll(e.ctx)
	require.ErrorIs(t, err, kshare.ErrClosed)
	require.NoError(t, implicit.Close(e.ctx), "second Close")
}

// A consumer whose coordinator forgets it (fenced) rejoins with epoch 0 and
// keeps consuming; the records it held are delivered again at once. As on
// Kafka, the fence itself releases nothing (the share-partition leader is
// not told): the consumer closes its share sessions with the final epoch,
// which releases them. (It used to drop them, and they came back when
// their locks expired.)
func TestFencedMemberRejoins(t *testing.T) {
	e := newEnv(t)
	const topic, group = "in", "g"
	e.createTopic(topic, 1)
	// An hour's lock: the records come back because the fenced member
	// closes its share session, which releases them (a fence itself
	// releases nothing, as on Kafka 4.4), not because their locks expire.
	e.groupConfig(group, "share.session.timeout.ms", "1000", "share.heartbeat.interval.ms", "5000", "share.record.lock.duration.ms", "3600000")
	e.produce(topic, 1, values("", 4)...)
	c := e.consumer(group, topic, shareconsumer.Mode(shareconsumer.Explicit))
	recs := pollRecords(e.ctx, t, c, 4)
	before := c.GroupMetadata()
	require.Positive(t, before.MemberEpoch)

	// Heartbeats come every 5s but the session times out after 1s: the
	// coordinator expels the member; the next heartbeat is answered
	// UNKNOWN_MEMBER_ID and the member rejoins.
	again := poll(e.ctx, t, c, 4, func(r *kgo.Record) {
		n, _ := c.DeliveryCount(r)
		require.EqualValues(t, 2, n)
	})
	require.Len(t, again, 4)
	err := c.Ack(recs[0], kshare.AckAccept)
	require.True(t, err == nil || errors.Is(err, shareconsumer.ErrLockExpired) || errors.Is(err, shareconsumer.ErrNotHeld))
	after := c.GroupMetadata()
	require.Equal(t, before.MemberID, after.MemberID, "the member id survives rejoining")
	require.Positive(t, after.MemberEpoch)
}

// When a partition's leader moves, the consumer follows it and keeps
// consuming from the new leader.
func TestFollowsLeaderMove(t *testing.T) {
	e := newEnv(t, broker.Nodes(3))
	const topic, group = "in", "g"
	e.createTopic(topic, 1)
	e.groupConfig(group)
	c := e.consumer(group, topic)
	e.produce(topic, 1, values("a", 10)...)
	poll(e.ctx, t, c, 10, nil)

	e.produce(topic, 1, values("b", 10)...)
	leader, err := e.c.Leader(topic, 0)
	require.NoError(t, err)
	require.NoError(t, e.c.MoveLeader(topic, 0, (leader+1)%3))
	// Locks taken at the old leader are lost with the move, and so are
	// acceptances that had not reached it: those records come again from
	// the new leader. Polling on, the consumer gets every "b" record and
	// the group ends with all 20 acknowledged.
	b := make(map[string]bool)
	e.eventually("every record acknowledged at the new leader", func() bool {
		ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
		defer cancel()
		recs, err := c.Poll(ctx)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			require.NoError(t, err)
		}
		for _, r := range recs {
			if strings.HasPrefix(string(r.Value), "b") {
				b[string(r.Value)] = true
			}
		}
		return len(b) == 10 && e.startOffsets(group, topic)[0] == 20
	})
}

// AckOffset marks a record by where it is: the marks commit as Ack's do,
// and an offset the consumer does not hold is refused.
func TestExplicitAckOffset(t *testing.T) {
	e := newEnv(t)
	const topic, group = "in", "g"
	e.createTopic(topic, 2)
	e.groupConfig(group)
	e.produce(topic, 2, values("", 10)...)
	c := e.consumer(group, topic, shareconsumer.Mode(shareconsumer.Explicit))

	type where struct {
		p   int32
		off int64
	}
	var held []where
	poll(e.ctx, t, c, 10, func(r *kgo.Record) { held = append(held, where{r.Partition, r.Offset}) })
	err := c.AckOffset(topic, 0, 1000, kshare.AckAccept)
	require.ErrorIs(t, err, shareconsumer.ErrNotHeld)
	require.ErrorIs(t, c.AckOffset(topic, held[0].p, held[0].off, kshare.AckType(9)), kshare.ErrUsage)
	for _, w := range held {
		require.NoError(t, c.AckOffset(topic, w.p, w.off, kshare.AckAccept))
	}
	require.NoError(t, c.Commit(e.ctx))
	e.allAcknowledged(group, topic, map[int32]int64{0: 5, 1: 5})
	require.ErrorIs(t, c.AckOffset(topic, held[0].p, held[0].off, kshare.AckAccept), shareconsumer.ErrNotHeld, "acknowledged already")
}
