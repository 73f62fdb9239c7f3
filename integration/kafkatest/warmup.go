package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// warmUpGroups is how many group ids WarmUp asks for; enough that, hashed,
// they reach every __consumer_offsets partition of a test cluster.
const warmUpGroups = 40

var (
	warmMu   sync.Mutex
	warmDone = map[string]error{}
)

// WarmUp makes a freshly started Kafka look like one that has served
// clients, once per process and cluster: it has Kafka create
// __consumer_offsets, __transaction_state and __share_group_state (Kafka
// creates them on first use, with the cluster's partition counts) and waits
// until their coordinators have loaded. Without it, a test could create a topic of that
// name by hand before Kafka did (a broken group coordinator for the whole
// run), or compare Kafka's start-up answers (UNKNOWN_TOPIC_OR_PARTITION,
// NOT_COORDINATOR while loading) with steady ones. It gives up after two
// minutes.
func WarmUp(seeds []string) error {
	key := fmt.Sprint(seeds)
	warmMu.Lock()
	defer warmMu.Unlock()
	if err, done := warmDone[key]; done {
		return err
	}
	err := warmUp(seeds)
	warmDone[key] = err
	return err
}

func warmUp(seeds []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	asks := []func() error{func() error {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = kmsg.StringPtr("kshare-warmup-txn")
		req.TransactionTimeoutMillis = 10000
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	}}
	// __share_group_state is created by the first share coordinator look-up.
	asks = append(asks, func() error {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType = 2
		req.CoordinatorKeys = []string{"kshare-warmup-share:AAAAAAAAAAAAAAAAAAAAAQ:0"}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		for _, c := range resp.Coordinators {
			if err := kerr.ErrorForCode(c.ErrorCode); err != nil {
				return err
			}
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	})
	for i := 0; i < warmUpGroups; i++ {
		group := fmt.Sprintf("kshare-warmup-group-%d", i)
		asks = append(asks, func() error {
			req := kmsg.NewPtrOffsetFetchRequest()
			req.Group = group
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				return err
			}
			return kerr.ErrorForCode(resp.ErrorCode)
		})
	}
	for _, ask := range asks {
		for {
			err := ask()
			if err == nil {
				break
			}
			var ke *kerr.Error
			if !errors.As(err, &ke) || !ke.Retriable {
				return fmt.Errorf("warming up Kafka at %v: %w", seeds, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("warming up Kafka at %v: coordinators still answer %w", seeds, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// warm fails the test if the cluster at seeds cannot be warmed up.
func warm(t testing.TB, seeds []string) {
	t.Helper()
	if err := WarmUp(seeds); err != nil {
		t.Fatal(err)
	}
}
