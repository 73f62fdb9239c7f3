package shareconsumer_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/wire"
)

// A rejected record's dead-letter copy commits with its REJECT, in one
// transaction: an aborted transaction leaves neither (the record comes
// back), a committed one both (the record is archived, its copy readable
// read_committed with headers saying where it came from).
func TestDeadLetterCommitsWithTheReject(t *testing.T) {
	e := newEnv(t)
	const topic, group = "in", "g"
	e.createTopic(topic, 1)
	e.createTopic("dlq", 1)
	e.groupConfig(group)
	e.produce(topic, 1, values("", 3)...)
	c := e.consumer(group, topic, shareconsumer.Mode(shareconsumer.Transactional))
	p := e.producer("dlq-txn")

	reject := func(recs []*kgo.Record, commit bool) {
		t.Helper()
		require.NoError(t, p.BeginTransaction())
		for _, r := range recs {
			dead, err := c.DeadLetter(r, "dlq", errors.New("cannot parse"))
			require.NoError(t, err)
			p.Produce(e.ctx, dead, nil)
		}
		require.NoError(t, p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckReject), c.GroupMetadata()))
		if commit {
			require.NoError(t, p.CommitTransaction(e.ctx))
		} else {
			require.NoError(t, p.AbortTransaction(e.ctx))
		}
	}
	reject(pollRecords(e.ctx, t, c, 3), false)
	again := pollRecords(e.ctx, t, c, 3)
	for _, r := range again {
		n, _ := c.DeliveryCount(r)
		require.EqualValues(t, 2, n, "the aborted transaction gave %q back", r.Value)
	}
	// A record that already carries dead-letter headers (it came from a
	// dead-letter topic) gets them replaced, its own kept.
	again[0].Headers = append(again[0].Headers,
		kgo.RecordHeader{Key: "trace", Value: []byte("abc")},
		kgo.RecordHeader{Key: wire.DLQHeaderOffset, Value: []byte("999")})
	reject(again, true)
	e.allAcknowledged(group, topic, map[int32]int64{0: 3})

	cl := e.client(kgo.ConsumeTopics("dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	var copies []*kgo.Record
	for len(copies) < 3 {
		fs := cl.PollFetches(e.ctx)
		require.NoError(t, e.ctx.Err(), "read %d of 3 dead-letter copies", len(copies))
		require.NoError(t, fs.Err0())
		copies = append(copies, fs.Records()...)
	}
	require.Len(t, copies, 3, "one copy per rejected record: the aborted transaction's are not committed")
	for _, d := range copies {
		h := map[string][]string{}
		for _, x := range d.Headers {
			h[x.Key] = append(h[x.Key], string(x.Value))
		}
		off, err := strconv.ParseInt(h[wire.DLQHeaderOffset][0], 10, 64)
		require.NoError(t, err)
		require.Equal(t, map[string][]string{
			wire.DLQHeaderTopic:         {topic},
			wire.DLQHeaderPartition:     {"0"},
			wire.DLQHeaderOffset:        {strconv.FormatInt(off, 10)},
			wire.DLQHeaderGroup:         {group},
			wire.DLQHeaderDeliveryCount: {"2"},
			wire.DLQHeaderMessage:       {"cannot parse"},
		}, withoutKey(h, "trace"), "copy of %q", d.Value)
		if off == again[0].Offset {
			require.Equal(t, []string{"abc"}, h["trace"], "the record's own headers are kept")
		}
		require.Less(t, off, int64(3))
	}
}

func withoutKey(h map[string][]string, key string) map[string][]string {
	out := make(map[string][]string, len(h))
	for k, v := range h {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// DeadLetter refuses what it cannot describe: a record the consumer does
// not hold (its delivery count is unknown), a nil record, no topic.
func TestDeadLetterRefusesMisuse(t *testing.T) {
	e := newEnv(t)
	e.createTopic("in", 1)
	e.groupConfig("g")
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	_, err := c.DeadLetter(&kgo.Record{Topic: "in", Offset: 5}, "dlq", nil)
	require.ErrorIs(t, err, shareconsumer.ErrNotHeld)
	require.ErrorIs(t, err, kshare.ErrUsage)
	_, err = c.DeadLetter(nil, "dlq", nil)
	require.ErrorIs(t, err, kshare.ErrUsage)
	_, err = c.DeadLetter(&kgo.Record{Topic: "in"}, "", nil)
	require.ErrorIs(t, err, kshare.ErrUsage)
	var zero *shareconsumer.Consumer
	_, err = zero.DeadLetter(&kgo.Record{Topic: "in"}, "dlq", nil)
	require.Error(t, err)
}
