package realkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/kshare-go/kshare/integration/kafkatest"
	"github.com/kshare-go/kshare/shareconsumer"
)

// REVIEW FINDING (real Kafka; see
// shareconsumer/review_maxpollinterval_test.go): records fetched ahead of
// Poll and released for MaxPollInterval come back with a delivery used
// up, although Poll never returned them: Kafka keeps the delivery count
// on RELEASE. The first Poll after the release returns them with delivery
// count 2.
//
// Expected: a record Poll returns for the first time has delivery count 1.
func TestReviewMaxPollIntervalReleaseUsesADeliveryOnRealKafka(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const perPoll = 5
	topic, group := shareSetup(ctx, t, seeds, 1, 2*perPoll)
	c := newShareConsumer(t, seeds, topic, group, shareconsumer.MaxPollRecords(perPoll),
		shareconsumer.MaxPollInterval(300*time.Millisecond))
	defer c.Close(context.Background())

	seen := map[string]bool{}
	for len(seen) == 0 {
		recs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			seen[string(r.Value)] = true
		}
	}
	// The application works for longer than MaxPollInterval: the records
	// fetched ahead are released unseen.
	for c.Metrics().ReleasedUnseen == 0 {
		if ctx.Err() != nil {
			t.Fatalf("nothing released: %+v", c.Metrics())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for len(seen) < 2*perPoll {
		recs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if seen[string(r.Value)] {
				continue
			}
			seen[string(r.Value)] = true
			if n, _ := c.DeliveryCount(r); n != 1 {
				t.Errorf("%q: first returned by Poll with delivery count %d (metrics %+v)", r.Value, n, c.Metrics())
			}
		}
	}
}
