package shareconsumer_test

import (
	"context"
	"errors"
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

// REVIEW holds: many goroutines Poll, Release, look records up and read
// Metrics while renewals run (1s lock, fetch ahead on three leaders, Polls
// split by a small MaxPollRecords), and Close comes in the middle of it
// all: no race, no panic, every call returns, every Poll returns at most
// MaxPollRecords, and after Close every call says ErrClosed. Another
// member then ends every record (nothing is held forever).
func TestReviewConcurrentPollReleaseClose(t *testing.T) {
	const partitions, n, limit = 3, 300, 7
	e := newEnv(t, broker.Nodes(3), broker.ShareLockDuration(time.Second))
	e.createTopic("t", partitions)
	e.groupConfig("g")
	e.produce("t", partitions, values("v", n)...)
	c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional),
		shareconsumer.MaxPollRecords(limit), shareconsumer.RenewHeldLocks(true))

	var wg sync.WaitGroup
	var mu sync.Mutex
	var polled []*kgo.Record
	var maxSeen int
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				pctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
				recs, err := c.Poll(pctx)
				cancel()
				if errors.Is(err, kshare.ErrClosed) {
					return
				}
				mu.Lock()
				maxSeen = max(maxSeen, len(recs))
				polled = append(polled, recs...)
				old := append([]*kgo.Record(nil), polled...)
				mu.Unlock()
				for _, r := range recs {
					c.DeliveryCount(r)
					c.LockDeadline(r)
				}
				// Release some, and some old ones again.
				if len(recs) > 0 {
					_, err = c.Release(recs[:len(recs)/2])
					if errors.Is(err, kshare.ErrClosed) {
						return
					}
					_, _ = c.Release(old[:len(old)/3])
				}
				_ = c.Metrics()
			}
		}()
	}
	e.eventually("records polled and renewed", func() bool {
		m := c.Metrics()
		return m.RecordsDelivered > 50 && m.LocksRenewed > 0
	})
	require.NoError(t, c.Close(e.ctx))
	wg.Wait()
	require.LessOrEqual(t, maxSeen, limit)
	_, err := c.Poll(e.ctx)
	require.ErrorIs(t, err, kshare.ErrClosed)
	_, err = c.Release(polled)
	require.ErrorIs(t, err, kshare.ErrClosed)

	// (Records released over and over reach the delivery limit and are
	// archived; the others come to the next member.)
	other := e.consumer("g", "t")
	ends := map[int32]int64{}
	for p := range int32(partitions) {
		ends[p] = n / partitions
	}
	go func() {
		for e.ctx.Err() == nil {
			if _, err := other.Poll(e.ctx); errors.Is(err, kshare.ErrClosed) {
				return
			}
		}
	}()
	e.allAcknowledged("g", "t", ends)
}

// REVIEW holds: acquisitions split by MaxPollRecords (a ShareFetch v1
// leader hands out one batch of 100 whole) are acknowledged right in
// Explicit mode (marks on one part, Commit, the next part) and in
// Transactional mode (records of three parts of one acquisition staged in
// one transaction), with the parts' delivery counts and lock deadlines
// looked up correctly.
func TestReviewSplitAcquisitionsAcknowledge(t *testing.T) {
	const n, limit = 100, 30
	t.Run("explicit", func(t *testing.T) {
		e := newEnv(t, broker.APIVersionCap(kmsg.ShareFetch.Int16(), 1))
		e.createTopic("t", 1)
		e.groupConfig("g")
		e.produce("t", 1, values("v", n)...)
		c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Explicit), shareconsumer.MaxPollRecords(limit))
		seen := poll(e.ctx, t, c, n, func(r *kgo.Record) {
			d, ok := c.DeliveryCount(r)
			require.True(t, ok)
			require.EqualValues(t, 1, d)
			_, ok = c.LockDeadline(r)
			require.True(t, ok)
			require.NoError(t, c.Ack(r, kshare.AckAccept))
			if r.Offset%limit == limit-1 {
				require.NoError(t, c.Commit(e.ctx))
			}
		})
		for v, k := range seen {
			require.Equal(t, 1, k, v)
		}
		require.NoError(t, c.Commit(e.ctx))
		e.allAcknowledged("g", "t", map[int32]int64{0: n})
	})
	t.Run("transactional", func(t *testing.T) {
		e := newEnv(t, broker.APIVersionCap(kmsg.ShareFetch.Int16(), 1))
		e.createTopic("t", 1)
		e.createTopic("out", 1)
		e.groupConfig("g")
		e.produce("t", 1, values("v", n)...)
		c := e.consumer("g", "t", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxPollRecords(limit))
		p := e.producer("tx")
		var recs []*kgo.Record
		for len(recs) < 3*limit {
			got, err := c.Poll(e.ctx)
			require.NoError(t, err)
			require.LessOrEqual(t, len(got), limit)
			recs = append(recs, got...)
		}
		require.NoError(t, process(e.ctx, t, p, c, recs))
		e.eventually("the staged parts acknowledged", func() bool { return e.startOffsets("g", "t")[0] >= int64(len(recs)) })
		for _, r := range recs {
			_, held := c.DeliveryCount(r)
			require.False(t, held, "offset %d still held after its commit", r.Offset)
		}
	})
}

// REVIEW holds: Release skips records staged in a transaction (the
// transaction's outcome decides them) and records it holds no longer; the
// staged records then commit. A cluster refuses lock bounds that make no
// sense (0, inverted, past int32 milliseconds, a default lock outside).
func TestReviewReleaseSkipsStagedAndBoundsMisuse(t *testing.T) {
	e := txnEnv(t, 30)
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	p := e.producer("tx")
	recs := pollRecords(e.ctx, t, c, 30)
	require.NoError(t, p.BeginTransaction())
	for _, r := range recs {
		p.Produce(e.ctx, &kgo.Record{Topic: "out", Value: r.Value}, nil)
	}
	require.NoError(t, p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()))
	n, err := c.Release(recs)
	require.NoError(t, err)
	require.Zero(t, n, "staged records released")
	require.NoError(t, p.CommitTransaction(e.ctx))
	require.Len(t, e.readCommitted("out", 30), 30)
	e.allAcknowledged("g", "in", map[int32]int64{0: 10, 1: 10, 2: 10})
	n, err = c.Release(recs)
	require.NoError(t, err)
	require.Zero(t, n)

	for _, opts := range [][]broker.Opt{
		{broker.ShareLockDurationBounds(0, 0)},
		{broker.ShareLockDurationBounds(time.Minute, time.Second)},
		{broker.ShareLockDurationBounds(time.Second, time.Duration(1<<31)*time.Millisecond)},
		{broker.ShareLockDurationBounds(time.Second, time.Hour), broker.ShareLockDuration(500 * time.Millisecond)},
	} {
		c, err := broker.NewCluster(opts...)
		if err == nil {
			c.Close()
		}
		require.Error(t, err)
	}
}

// REVIEW holds: MaxPollInterval at its extremes: zero and negative are
// refused by New; the largest duration and 1ns work (no overflow, no
// panic), and every record is delivered once.
func TestReviewMaxPollIntervalExtremes(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := shareconsumer.New(shareconsumer.SeedBrokers("127.0.0.1:1"), shareconsumer.Group("g"),
			shareconsumer.Topics("t"), shareconsumer.MaxPollInterval(d))
		require.ErrorIs(t, err, kshare.ErrUsage)
	}
	for _, d := range []time.Duration{time.Duration(1<<63 - 1), time.Nanosecond} {
		e := newEnv(t)
		e.createTopic("t", 1)
		e.groupConfig("g")
		e.produce("t", 1, values("v", 50)...)
		c := e.consumer("g", "t", shareconsumer.MaxPollRecords(7), shareconsumer.MaxPollInterval(d))
		seen := poll(e.ctx, t, c, 50, nil)
		for v, n := range seen {
			require.Equal(t, 1, n, "%s with MaxPollInterval %v", v, d)
		}
	}
}
