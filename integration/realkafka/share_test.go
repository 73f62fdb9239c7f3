package realkafka_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/integration/kafkatest"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/shareconsumer"
)

// produceValues writes count records with values "0".."count-1", spread
// over the topic's partitions, and waits for them.
func produceValues(ctx context.Context, t testing.TB, seeds []string, topic string, count int) {
	t.Helper()
	cl := testkit.Client(t, seeds, kgo.DefaultProduceTopic(topic))
	var rs []*kgo.Record
	for i := range count {
		rs = append(rs, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// shareSetup creates a topic with records and a share group that reads
// from the earliest offset.
func shareSetup(ctx context.Context, t *testing.T, seeds []string, partitions int32, count int) (topic, group string) {
	t.Helper()
	topic = uniqueName(t, "kshare-share")
	group = uniqueName(t, "kshare-share-group")
	admin := testkit.Client(t, seeds)
	testkit.CreateTopic(ctx, t, admin, topic, partitions)
	testkit.SetGroupConfigs(ctx, t, admin, group, "share.auto.offset.reset", "earliest")
	produceValues(ctx, t, seeds, topic, count)
	return topic, group
}

func newShareConsumer(t *testing.T, seeds []string, topic, group string, opts ...shareconsumer.Opt) *shareconsumer.Consumer {
	t.Helper()
	c, err := shareconsumer.New(append([]shareconsumer.Opt{
		shareconsumer.SeedBrokers(seeds...),
		shareconsumer.Group(group),
		shareconsumer.Topics(topic),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestShareConsumerImplicitAcceptsOnNextPoll(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const count = 200
	topic, group := shareSetup(ctx, t, seeds, 2, count)

	c := newShareConsumer(t, seeds, topic, group)
	seen := testkit.PollValues(ctx, t, c, count, func(r *kgo.Record) {
		if n, ok := c.DeliveryCount(r); !ok || n != 1 {
			t.Errorf("record %q: delivery count %d, %v; want 1", r.Value, n, ok)
		}
	})
	for v, n := range seen {
		if n != 1 {
			t.Errorf("value %s delivered %d times", v, n)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}

	// Everything was accepted (the last poll's records by Close): a new
	// member of the group gets nothing.
	c2 := newShareConsumer(t, seeds, topic, group)
	defer c2.Close(context.Background())
	testkit.ExpectNothing(ctx, t, c2, 8*time.Second)
}

func TestShareConsumerExplicitReleaseRedelivers(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const count = 40
	topic, group := shareSetup(ctx, t, seeds, 1, count)

	c := newShareConsumer(t, seeds, topic, group, shareconsumer.Mode(shareconsumer.Explicit))
	defer c.Close(context.Background())
	released := make(map[string]bool)
	testkit.PollValues(ctx, t, c, count, func(r *kgo.Record) {
		i, _ := strconv.Atoi(string(r.Value))
		typ := kshare.AckAccept
		if i%4 == 1 {
			typ = kshare.AckRelease
			released[string(r.Value)] = true
		}
		if i%4 == 3 {
			typ = kshare.AckReject
		}
		if err := c.Ack(r, typ); err != nil {
			t.Fatalf("ack %q: %v", r.Value, err)
		}
	})
	if err := c.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	// Only the released records come back, delivered a second time.
	again := testkit.PollValues(ctx, t, c, len(released), func(r *kgo.Record) {
		if !released[string(r.Value)] {
			t.Errorf("record %q delivered again but was not released", r.Value)
		}
		if n, _ := c.DeliveryCount(r); n != 2 {
			t.Errorf("record %q: delivery count %d, want 2", r.Value, n)
		}
		if err := c.Ack(r, kshare.AckAccept); err != nil {
			t.Errorf("ack %q: %v", r.Value, err)
		}
	})
	if len(again) != len(released) {
		t.Fatalf("redelivered %d values, want %d", len(again), len(released))
	}
	errc := make(chan error, 1)
	c.CommitAsync(func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatalf("commit async: %v", err)
	}
	testkit.ExpectNothing(ctx, t, c, 4*time.Second)
}

func TestShareConsumerExplicitUnackedReleasedOnClose(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const count = 20
	topic, group := shareSetup(ctx, t, seeds, 1, count)

	c := newShareConsumer(t, seeds, topic, group, shareconsumer.Mode(shareconsumer.Explicit))
	testkit.PollValues(ctx, t, c, count, nil)
	if err := c.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	// Close released every unacknowledged record: a new member gets them
	// all at once (well before the 30s lock would have run out), as a
	// second delivery.
	c2 := newShareConsumer(t, seeds, topic, group, shareconsumer.Mode(shareconsumer.Explicit))
	defer c2.Close(context.Background())
	testkit.PollValues(ctx, t, c2, count, func(r *kgo.Record) {
		if n, _ := c2.DeliveryCount(r); n != 2 {
			t.Errorf("record %q: delivery count %d, want 2", r.Value, n)
		}
	})
}

func TestShareConsumerTwoMembersSplitTheWork(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const count = 600
	topic, group := shareSetup(ctx, t, seeds, 4, count)

	var mu sync.Mutex
	seen := make(map[string]int)
	perMember := make([]int, 2)
	var wg sync.WaitGroup
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	for m := range 2 {
		c := newShareConsumer(t, seeds, topic, group, shareconsumer.MaxPollRecords(20))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close(context.Background())
			for pctx.Err() == nil {
				recs, err := c.Poll(pctx)
				if err != nil && pctx.Err() == nil {
					t.Errorf("member %d poll: %v", m, err)
					return
				}
				mu.Lock()
				for _, r := range recs {
					seen[string(r.Value)]++
					perMember[m]++
				}
				done := len(seen) == count
				mu.Unlock()
				if done {
					stop()
				}
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("got %d of %d values before the deadline", len(seen), count)
	}
	for v, n := range seen {
		if n != 1 {
			t.Errorf("value %s delivered %d times", v, n)
		}
	}
	t.Logf("records per member: %v", perMember)
}

// TestShareConsumerRenewsStagedLocks stages records in Transactional mode
// and checks that the consumer keeps renewing their locks (RENEW, KIP-1222)
// past the group's lock duration; real Kafka has no transactional
// acknowledgements, so the records are released at Close.
func TestShareConsumerRenewsStagedLocks(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const count = 10
	topic, group := shareSetup(ctx, t, seeds, 1, count)
	admin := testkit.Client(t, seeds)
	testkit.SetGroupConfigs(ctx, t, admin, group, "share.record.lock.duration.ms", "3000")

	c := newShareConsumer(t, seeds, topic, group, shareconsumer.Mode(shareconsumer.Transactional))
	var recs []*kgo.Record
	testkit.PollValues(ctx, t, c, count, func(r *kgo.Record) { recs = append(recs, r) })
	acks := (*acktrack.Set)(c.Acks(recs, kshare.AckAccept))
	meta := c.GroupMetadata()
	st := acktrack.Staging{Group: meta.GroupID, Member: meta.MemberID}
	if err := acks.Tracker().Stage(acks, st); err != nil {
		t.Fatalf("stage: %v", err)
	}
	first, _ := c.LockDeadline(recs[0])
	time.Sleep(7 * time.Second) // more than twice the lock duration
	// Checked again, as a checkpoint joining its commit is.
	st.Again = true
	if err := acks.Tracker().Stage(acks, st); err != nil {
		t.Fatalf("records lost their locks although renewed: %v", err)
	}
	later, _ := c.LockDeadline(recs[0])
	if !later.After(first) {
		t.Fatalf("lock deadline did not move: %v then %v", first, later)
	}
	// Another member sees nothing while the locks are renewed.
	c2 := newShareConsumer(t, seeds, topic, group)
	defer c2.Close(context.Background())
	testkit.ExpectNothing(ctx, t, c2, 4*time.Second)
	acks.Tracker().Resolve(acks, false)
	if err := c.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// Consumer.Renew on Kafka 4.4: in Explicit mode the records renewed are
// kept past several lock durations while another member polls, those not
// renewed go to it when their lock runs out, and the renewed ones are
// then accepted.
func TestShareConsumerExplicitRenewKeepsWhatItAsks(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const count, lock = 10, 4 * time.Second
	topic, group := shareSetup(ctx, t, seeds, 1, count)
	admin := testkit.Client(t, seeds)
	testkit.SetGroupConfigs(ctx, t, admin, group, "share.record.lock.duration.ms", strconv.Itoa(int(lock.Milliseconds())))

	c := newShareConsumer(t, seeds, topic, group, shareconsumer.Mode(shareconsumer.Explicit))
	defer c.Close(context.Background())
	var kept, left []*kgo.Record
	testkit.PollValues(ctx, t, c, count, func(r *kgo.Record) {
		if i, _ := strconv.Atoi(string(r.Value)); i%2 == 0 {
			kept = append(kept, r)
		} else {
			left = append(left, r)
		}
	})
	first, _ := c.LockDeadline(kept[0])
	c2 := newShareConsumer(t, seeds, topic, group)
	defer c2.Close(context.Background())
	got := make(map[string]bool)
	for end := first.Add(2 * lock); time.Now().Before(end) || len(got) < len(left); {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		for pctx.Err() == nil {
			recs, err := c2.Poll(pctx)
			if err != nil {
				break
			}
			for _, r := range recs {
				got[string(r.Value)] = true
			}
		}
		pcancel()
		if err := c.Renew(ctx, kept...); err != nil {
			t.Fatalf("renew: %v", err)
		}
	}
	for _, r := range kept {
		if got[string(r.Value)] {
			t.Errorf("renewed record %q went to the other member", r.Value)
		}
	}
	for _, r := range left {
		if !got[string(r.Value)] {
			t.Errorf("record %q, not renewed, did not go to the other member", r.Value)
		}
	}
	later, _ := c.LockDeadline(kept[0])
	if !later.After(first.Add(lock)) {
		t.Fatalf("lock deadline %v did not move past %v", later, first.Add(lock))
	}
	for _, r := range kept {
		if err := c.Ack(r, kshare.AckAccept); err != nil {
			t.Fatalf("ack %q: %v", r.Value, err)
		}
	}
	if err := c.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// Real Kafka has no KIP-1289 APIs: the acknowledger says so at
// InitTransactions, and committing acknowledgements in a transaction fails
// with ErrUnsupported, naming the broker and what it lacks, and sends
// nothing.
func TestAcknowledgerReportsMissingKIP1289(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const count = 5
	topic, group := shareSetup(ctx, t, seeds, 1, count)

	c := newShareConsumer(t, seeds, topic, group, shareconsumer.Mode(shareconsumer.Transactional))
	var recs []*kgo.Record
	testkit.PollValues(ctx, t, c, count, func(r *kgo.Record) { recs = append(recs, r) })
	a, err := acknowledger.New(acknowledger.SeedBrokers(seeds...), acknowledger.TransactionalID(uniqueName(t, "kshare-ack")))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	if err := a.InitTransactions(ctx); !errors.Is(err, kshare.ErrUnsupported) || !strings.Contains(err.Error(), "TxnShareAcknowledge") {
		t.Fatalf("init transactions: got %v, want ErrUnsupported naming what the broker lacks", err)
	}
	err = a.CommitAcknowledgements(ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata())
	if !errors.Is(err, kshare.ErrUnsupported) {
		t.Fatalf("commit acknowledgements: got %v, want ErrUnsupported", err)
	}
	t.Logf("as expected: %v", err)

	// The records never joined a transaction, so Close releases them and
	// another member gets them at once (the lock is 30s).
	if err := c.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	c2 := newShareConsumer(t, seeds, topic, group)
	defer c2.Close(context.Background())
	testkit.PollValues(ctx, t, c2, count, func(r *kgo.Record) {
		if n, _ := c2.DeliveryCount(r); n != 2 {
			t.Errorf("record %q: delivery count %d, want 2", r.Value, n)
		}
	})
}
