package lifecycle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
	"github.com/kshare-go/kshare/shareconsumer"
)

// TestHeldRecordsAfterLeaderMove polls records with RenewHeldLocks(true),
// moves the partition's leader (the broker drops the partition's live
// share state, so the locks are gone and the records available again), lets
// the consumer fetch again, and then puts the first delivery's records in
// a transaction. The records committed by that transaction must not be
// delivered again (a record processed twice), and a transaction built from
// a lost lock must not commit while another delivery of its records is out.
func TestHeldRecordsAfterLeaderMove(t *testing.T) {
	for _, renew := range []bool{false, true} {
		t.Run(map[bool]string{false: "no-renew", true: "renew"}[renew], func(t *testing.T) {
			ctx := testCtx(t)
			e := newEnv(t, broker.Nodes(3), broker.ShareLockDuration(2*time.Second))
			e.Topic(ctx, t, "in", 1)
			e.Topic(ctx, t, "out", 1)
			e.Input(ctx, t, "in", "a", "b", "c")
			cons := e.consumer(t, "g", "in", shareconsumer.RenewHeldLocks(renew))
			prod := e.producer(ctx, t, "tx")
			first := appenv.PollN(ctx, t, cons, 3)
			leader, err := e.C.Leader("in", 0)
			require.NoError(t, err)
			for _, n := range e.C.NodeIDs() {
				if n != leader {
					require.NoError(t, e.C.MoveLeader("in", 0, n))
					break
				}
			}
			// Let the consumer's sessions follow the move and fetch again
			// (not asserted on: any outcome below must hold).
			time.Sleep(time.Second)

			require.NoError(t, prod.BeginTransaction())
			for _, r := range first {
				prod.Produce(ctx, &kgo.Record{Topic: "out", Value: r.Value}, nil)
			}
			err = prod.SendShareAcksToTransaction(ctx, cons.Acks(first, kshare.AckAccept), cons.GroupMetadata())
			if err == nil {
				err = prod.CommitTransaction(ctx)
			}
			t.Logf("first delivery's transaction: %v", err)
			committed := err == nil
			if err != nil {
				require.ErrorIs(t, err, kshare.ErrAbortable)
				require.NoError(t, prod.AbortTransaction(ctx))
			}

			// Poll what comes next: after a commit, for a while (nothing
			// may come); after an abort, until every record came back
			// (the test's context bounds it), not for a window they
			// happen to fit in.
			var again []*kgo.Record
			offsets := map[int64]bool{}
			pctx, cancel := context.WithCancel(ctx)
			if committed {
				cancel()
				pctx, cancel = context.WithTimeout(ctx, 3*time.Second)
			}
			for committed || len(offsets) < 3 {
				rs, err := cons.Poll(pctx)
				if err != nil {
					require.True(t, errors.Is(err, kshare.ErrAbortable))
					require.True(t, committed, "%d of the aborted transaction's 3 records came back: %v", len(offsets), err)
					break
				}
				again = append(again, rs...)
				for _, r := range rs {
					offsets[r.Offset] = true
				}
			}
			cancel()
			t.Logf("committed=%v, delivered again: %d", committed, len(again))
			if committed {
				for _, r := range again {
					t.Errorf("record %s (offset %d) delivered again after its transaction committed", r.Value, r.Offset)
				}
			} else {
				// Without renewal a redelivery's lock may run out and the
				// record come back once more: count offsets.
				require.Len(t, offsets, 3, "records of the aborted transaction must come back")
			}
		})
	}
}
