package misuse_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// closer is what New returns.
type closer interface{ Close(context.Context) error }

// newSafely runs a New, turning a panic into an error, and closes what it
// made.
func newSafely(t *testing.T, mk func() (closer, error)) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("New panicked: %v", r)
		}
	}()
	c, err := mk()
	if err == nil {
		require.NoError(t, c.Close(context.Background()))
	}
	return err
}

// F5 (panic): a nil kgo option passed through KgoOpts (an option built
// conditionally and left nil, say), alone or in a list, fails New with
// ErrUsage in every client. It used to make kgo.NewClient panic with a nil
// pointer dereference.
func TestNilKgoOptionIsUsage(t *testing.T) {
	const seed = "127.0.0.1:9"
	for name, mk := range map[string]func() (closer, error){
		"producer": func() (closer, error) {
			return producer.New(producer.SeedBrokers(seed), producer.TransactionalID("x"), producer.KgoOpts(nil))
		},
		"shareconsumer": func() (closer, error) {
			return shareconsumer.New(shareconsumer.SeedBrokers(seed), shareconsumer.Group("g"), shareconsumer.Topics("t"),
				shareconsumer.KgoOpts(kgo.ClientID("ok"), nil))
		},
		"acknowledger": func() (closer, error) {
			return acknowledger.New(acknowledger.SeedBrokers(seed), acknowledger.TransactionalID("x"), acknowledger.KgoOpts(nil))
		},
	} {
		checkClass(t, kshare.ErrUsage, newSafely(t, mk), "%s.New with KgoOpts(nil)", name)
	}
}

// F8 (wrong error class): a transaction timeout below one millisecond
// fails New with ErrUsage, as a zero or negative one does. It used to be
// accepted, sent to the coordinator as 0 ms, and bound every retry of
// InitTransactions, which then failed with ErrAbortable ("call it again")
// every time, forever.
func TestSubMillisecondTransactionTimeoutIsUsage(t *testing.T) {
	const seed = "127.0.0.1:9"
	checkClass(t, kshare.ErrUsage, newSafely(t, func() (closer, error) {
		return producer.New(producer.SeedBrokers(seed), producer.TransactionalID("x"), producer.TransactionTimeout(500*time.Microsecond))
	}), "producer.New with a 500µs transaction timeout")
	checkClass(t, kshare.ErrUsage, newSafely(t, func() (closer, error) {
		return acknowledger.New(acknowledger.SeedBrokers(seed), acknowledger.TransactionalID("x"), acknowledger.TransactionTimeout(time.Nanosecond))
	}), "acknowledger.New with a 1ns transaction timeout")
}

// F6 (doc mismatch, fixed in the documentation): a group config the
// cluster refuses (here share.delivery.count.limit=1, below the cluster's
// minimum of 2) makes every Poll fail with ErrUsage, as SetGroupConfig,
// Consumer.Poll and docs/api.md say (Poll's documentation used to list it
// under kshare.ErrFatal).
func TestRefusedGroupConfigIsUsageOnEveryPoll(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	e.Topic(ctx, t, "in", 1)
	c := e.consumer(t, "g", "in", shareconsumer.Transactional,
		shareconsumer.SetGroupConfig(shareconsumer.GroupConfig{DeliveryCountLimit: 1}))
	for i := range 2 {
		_, err := c.Poll(ctx)
		requireClass(t, kshare.ErrUsage, err, "Poll #%d with a refused group config", i)
	}
}
