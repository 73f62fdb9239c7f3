package realkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/integration/kafkatest"
	"github.com/kshare-go/kshare/shareconsumer"
)

// Records fetched ahead of Poll and released for MaxPollInterval come
// back on Kafka 4.4 with a delivery used up, although Poll never returned
// them: Kafka keeps the delivery count on RELEASE (review finding; see
// shareconsumer/review_maxpollinterval_test.go). It happens once: the
// consumer then fetches only for a waiting Poll, one leader at a time, and
// a second slow Poll releases nothing more. This test keeps both facts.
func TestMaxPollIntervalReleaseUsesADeliveryOnceOnRealKafka(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const perPoll = 5
	topic, group := shareSetup(ctx, t, seeds, 1, 3*perPoll)
	c := newShareConsumer(t, seeds, topic, group, shareconsumer.MaxPollRecords(perPoll),
		shareconsumer.MaxPollInterval(300*time.Millisecond))
	defer c.Close(context.Background())

	poll := func() []*kgo.Record {
		for {
			recs, err := c.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) > 0 {
				return recs
			}
		}
	}
	poll()
	// The application works for longer than MaxPollInterval: the records
	// fetched ahead are released unseen.
	for c.Metrics().ReleasedUnseen == 0 {
		if ctx.Err() != nil {
			t.Fatalf("nothing released: %+v", c.Metrics())
		}
		time.Sleep(20 * time.Millisecond)
	}
	released := c.Metrics().ReleasedUnseen
	again := poll()
	for _, r := range again {
		if n, _ := c.DeliveryCount(r); n != 2 {
			t.Errorf("%q: a record released unseen came back with delivery count %d, not 2 (Kafka keeps the count on RELEASE)", r.Value, n)
		}
	}
	// A second slow Poll: nothing was fetched ahead, nothing is released.
	time.Sleep(time.Second)
	third := poll()
	if m := c.Metrics(); m.ReleasedUnseen != released {
		t.Errorf("released unseen again: %d, then %d (metrics %+v)", released, m.ReleasedUnseen, m)
	}
	for _, r := range third {
		if n, _ := c.DeliveryCount(r); n > 2 {
			t.Errorf("%q: delivery count %d", r.Value, n)
		}
	}
}
