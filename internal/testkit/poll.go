package testkit

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Poller is what the polling helpers need of a share consumer
// (shareconsumer.Consumer).
type Poller interface {
	// Poll returns the next records, or an error (ctx's when it ends).
	Poll(ctx context.Context) ([]*kgo.Record, error)
}

// deliveryCounter is the optional part of a Poller that lets failure
// messages say how often a record was delivered.
type deliveryCounter interface {
	DeliveryCount(r *kgo.Record) (int16, bool)
}

// PollValues polls p until want distinct record values arrived, calling
// each (if not nil) for every record, and returns how often each value
// came. It fails the test if a poll fails or ctx ends first.
func PollValues(ctx context.Context, t testing.TB, p Poller, want int, each func(*kgo.Record)) map[string]int {
	t.Helper()
	seen := make(map[string]int)
	for len(seen) < want {
		recs, err := p.Poll(ctx)
		if ctx.Err() != nil {
			t.Fatalf("got %d of %d values before the deadline", len(seen), want)
		}
		require.NoError(t, err, "poll")
		for _, r := range recs {
			seen[string(r.Value)]++
			if each != nil {
				each(r)
			}
		}
	}
	return seen
}

// ExpectNothing polls p for d and fails the test if a record arrives, a
// poll fails, or ctx (which must outlast d) ends first.
func ExpectNothing(ctx context.Context, t testing.TB, p Poller, d time.Duration) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		recs, err := p.Poll(pctx)
		if len(recs) > 0 {
			r := recs[0]
			delivery := ""
			if dc, ok := p.(deliveryCounter); ok {
				if n, held := dc.DeliveryCount(r); held {
					delivery = ", delivery " + strconv.Itoa(int(n))
				}
			}
			t.Fatalf("%d records delivered, first %s/%d@%d %q%s", len(recs), r.Topic, r.Partition, r.Offset, r.Value, delivery)
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return
		}
		require.NoError(t, err, "poll")
	}
}
