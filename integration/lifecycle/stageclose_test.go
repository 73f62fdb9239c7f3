package lifecycle_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
)

// TestStageRacingAcknowledgerClose stages a checkpoint from one goroutine
// while another closes the acknowledger, many times. Whichever wins, the
// staged records must not stay locked: Stage before Close means Close
// drops the checkpoint (the consumer releases the records at once), Stage
// after it fails with ErrClosed (the records keep only their first lock).
// A Stage that slips between Close's drop and its refusal would leave the
// records staged in a checkpoint nobody can end, renewed by the consumer
// until it closes: another member polling for several lock durations
// would never get them.
func TestStageRacingAcknowledgerClose(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, broker.ShareLockDuration(time.Second))
	for i := range 12 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			topic, group, id := fmt.Sprintf("in%d", i), fmt.Sprintf("g%d", i), fmt.Sprintf("ack%d", i)
			e.Topic(ctx, t, topic, 1)
			e.Input(ctx, t, topic, "a")
			cons := e.consumer(t, group, topic)
			recs := appenv.PollN(ctx, t, cons, 1)
			a, err := acknowledger.New(acknowledger.SeedBrokers(e.Seeds...), acknowledger.TransactionalID(id))
			require.NoError(t, err)
			require.NoError(t, a.InitTransactions(ctx))
			acks := cons.Acks(recs, kshare.AckAccept)
			meta := cons.GroupMetadata()
			var wg sync.WaitGroup
			var stageErr, closeErr error
			start := make(chan struct{})
			wg.Add(2)
			go func() { defer wg.Done(); <-start; stageErr = a.Stage(1, acks, meta) }()
			go func() { defer wg.Done(); <-start; closeErr = a.Close(ctx) }()
			close(start)
			wg.Wait()
			require.NoError(t, closeErr)
			if stageErr != nil {
				require.True(t, errors.Is(stageErr, kshare.ErrClosed), "stage: %v", stageErr)
			}
			// The record comes back: poll until it did (the test's
			// context bounds the wait), not for a window it happens to
			// fit in.
			other := e.consumer(t, group, topic)
			got := 0
			for got == 0 {
				rs, err := other.Poll(ctx)
				require.NoError(t, err, "record still locked after the acknowledger closed (stage: %v)", stageErr)
				got += len(rs)
			}
			require.Equal(t, 1, got, "record still locked after the acknowledger closed (stage: %v)", stageErr)
		})
	}
}
