package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
)

// TestMain fails the package if a cluster or client is left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeT stands in for a *testing.T where the helpers must be seen to fail
// (and in the example, which gets none): it runs the cleanups at finish,
// and a failure panics with errFailed after recording the message.
type fakeT struct {
	testing.TB
	cleanups []func()
	msg      string
}

var errFailed = errors.New("test failed")

func (t *fakeT) Helper()          {}
func (t *fakeT) Name() string     { return "fake" }
func (t *fakeT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *fakeT) Errorf(format string, a ...any) {
	t.msg = fmt.Sprintf(format, a...)
}
func (t *fakeT) Fatalf(format string, a ...any) {
	t.Errorf(format, a...)
	t.FailNow()
}
func (t *fakeT) FailNow() { panic(errFailed) }

func (t *fakeT) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// fails runs f with t and returns the failure message, or "" if f passed.
func (t *fakeT) fails(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			if r != errFailed {
				panic(r)
			}
			msg = t.msg
		}
	}()
	f()
	return ""
}

// scripted is a Poller that returns one batch of records per Poll, then
// blocks until ctx ends.
type scripted struct {
	batches [][]*kgo.Record
	counts  map[string]int16
}

func (s *scripted) Poll(ctx context.Context) ([]*kgo.Record, error) {
	if len(s.batches) == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	b := s.batches[0]
	s.batches = s.batches[1:]
	return b, nil
}

func (s *scripted) DeliveryCount(r *kgo.Record) (int16, bool) {
	n, ok := s.counts[string(r.Value)]
	return n, ok
}

func rec(v string) *kgo.Record { return &kgo.Record{Topic: "t", Value: []byte(v)} }

func TestPollValuesCountsEveryDelivery(t *testing.T) {
	p := &scripted{batches: [][]*kgo.Record{{rec("a"), rec("b")}, {rec("a")}, {rec("c")}}}
	var each int
	got := testkit.PollValues(testkit.Context(t), t, p, 3, func(*kgo.Record) { each++ })
	require.Equal(t, map[string]int{"a": 2, "b": 1, "c": 1}, got)
	require.Equal(t, 4, each)

	ft := &fakeT{}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	msg := ft.fails(func() { testkit.PollValues(ctx, ft, &scripted{}, 1, nil) })
	require.Contains(t, msg, "got 0 of 1 values")
}

func TestExpectNothing(t *testing.T) {
	ctx := testkit.Context(t)
	testkit.ExpectNothing(ctx, t, &scripted{}, 20*time.Millisecond)

	ft := &fakeT{}
	p := &scripted{batches: [][]*kgo.Record{{rec("late")}}, counts: map[string]int16{"late": 2}}
	msg := ft.fails(func() { testkit.ExpectNothing(ctx, ft, p, time.Second) })
	require.Contains(t, msg, `"late"`)
	require.Contains(t, msg, "delivery 2")
}

func TestEventually(t *testing.T) {
	calls := 0
	testkit.Eventually(testkit.Context(t), t, "three calls", func() bool { calls++; return calls == 3 })
	require.Equal(t, 3, calls)

	ft := &fakeT{}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	msg := ft.fails(func() { testkit.Eventually(ctx, ft, "never", func() bool { return false }) })
	require.Equal(t, "timed out waiting for never", msg)
}

// The set-up helpers work against the bundled cluster, and the request log
// sees what they send.
func TestClusterHelpers(t *testing.T) {
	c := bundled.Cluster(t)
	ctx := testkit.Context(t)
	log := bundled.ObserveRequests(t, c)
	admin := testkit.Client(t, c.Bootstrap(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	testkit.CreateTopic(ctx, t, admin, "in", 2)
	testkit.SetGroupConfigs(ctx, t, admin, "g", "share.auto.offset.reset", "earliest")
	testkit.ProduceRoundRobin(ctx, t, admin, "in", 2, "a", "b", "c")
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, "in")
	require.NoError(t, err)
	end0, _ := ends.Lookup("in", 0)
	end1, _ := ends.Lookup("in", 1)
	require.Equal(t, [2]int64{2, 1}, [2]int64{end0.Offset, end1.Offset}, "values alternate over the partitions")
	require.Len(t, log.Of(kmsg.CreateTopics.Int16()), 1)
	alter := log.Of(kmsg.IncrementalAlterConfigs.Int16())
	require.Len(t, alter, 1)
	require.Equal(t, "g", alter[0].Req.(*kmsg.IncrementalAlterConfigsRequest).Resources[0].ResourceName)
	log.Reset()
	require.Empty(t, log.Of(kmsg.CreateTopics.Int16()))

	ft := &fakeT{}
	msg := ft.fails(func() { testkit.CreateTopic(ctx, ft, admin, "in", 2) })
	require.Contains(t, msg, "TOPIC_ALREADY_EXISTS")
}

// A ShareMember joins, acquires, acknowledges and closes its session with
// raw requests, on connections of its own: dropping them releases what it
// holds, and the broker sees the requests it sends.
func TestShareMember(t *testing.T) {
	c := bundled.Cluster(t, broker.ShareLockDuration(10*time.Minute))
	ctx := testkit.Context(t)
	log := bundled.ObserveRequests(t, c)
	admin := testkit.Client(t, c.Bootstrap(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	testkit.CreateTopic(ctx, t, admin, "in", 1)
	testkit.SetGroupConfigs(ctx, t, admin, "g", "share.auto.offset.reset", "earliest")
	testkit.ProduceRoundRobin(ctx, t, admin, "in", 1, "a", "b", "c")

	m1 := testkit.JoinShare(ctx, t, c.Bootstrap(), "g", "in", 0)
	m2 := testkit.JoinShare(ctx, t, c.Bootstrap(), "g", "in", 0)
	require.NotEqual(t, m1.ID, m2.ID)
	require.Equal(t, "0:1 1:1 2:1", testkit.FormatDeliveries(m1.Acquire(ctx)))
	top, part := m1.Acknowledge(ctx, false, testkit.Ack(0, 0, testkit.AckAccept))
	require.Equal(t, [2]string{"OK", "OK"}, [2]string{testkit.ErrName(top), testkit.ErrName(part)})
	top, part = m1.Acknowledge(ctx, true, testkit.Ack(1, 2, testkit.AckRenew))
	require.Equal(t, [2]string{"OK", "OK"}, [2]string{testkit.ErrName(top), testkit.ErrName(part)})
	top, _ = m2.Acknowledge(ctx, false, testkit.Ack(1, 1, testkit.AckAccept))
	require.Equal(t, "INVALID_SHARE_SESSION_EPOCH", testkit.ErrName(top), "m2 has no session yet")

	m1.Disconnect()
	require.Equal(t, "1:2 2:2", testkit.FormatDeliveries(m2.Acquire(ctx)), "m1's connection closed")
	top, part = m2.CloseSession(ctx, true, testkit.Ack(1, 1, testkit.AckAccept))
	require.Equal(t, [2]string{"OK", "OK"}, [2]string{testkit.ErrName(top), testkit.ErrName(part)})
	require.Zero(t, m2.SessionEpoch, "the next request opens a session")
	require.Equal(t, "2:3", testkit.FormatDeliveries(m2.Acquire(ctx)), "the close released 2")
	require.NotEmpty(t, log.Of(kmsg.ShareFetch.Int16()))
	require.Len(t, log.Of(kmsg.ShareAcknowledge.Int16()), 3)

	ft := &fakeT{}
	msg := ft.fails(func() { testkit.JoinShare(ctx, ft, c.Bootstrap(), "", "in", 0) })
	require.Contains(t, msg, "INVALID_REQUEST")
	ft.finish()
}
