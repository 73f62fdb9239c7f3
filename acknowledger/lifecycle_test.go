package acknowledger_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/wire"
)

// onCommits installs a fault hook on the EndTxn(COMMIT) requests of the
// acknowledger whose kgo client is named client.
func onCommits(t *testing.T, c *broker.Cluster, client string, fn func() broker.FaultAction) {
	t.Cleanup(c.InjectFaults(func(_ int32, id string, req kmsg.Request) broker.FaultAction {
		if e, ok := req.(*kmsg.EndTxnRequest); ok && e.Commit && id == client {
			return fn()
		}
		return broker.FaultAction{}
	}))
}

// A commit whose answer is lost (the broker applied it) is retried until
// the coordinator answers, so CommitAcknowledgements succeeds; when its
// context also ends, it reports that the outcome is in doubt, and
// AbortAcknowledgements learns that it committed.
func TestLostCommitAnswer(t *testing.T) {
	for _, cancelToo := range []bool{false, true} {
		t.Run(map[bool]string{false: "answer lost", true: "answer lost and context ended"}[cancelToo], func(t *testing.T) {
			const inputs = 4
			e := newEnv(t, 1, inputs, broker.ShareLockDuration(10*time.Minute))
			c := e.consumer()
			a := e.acknowledger("ack", acknowledger.KgoOpts(kgo.ClientID("lossy")))
			recs := e.poll(c, inputs)
			ctx, cancel := context.WithCancel(e.ctx)
			var once sync.Once
			onCommits(t, e.c, "lossy", func() broker.FaultAction {
				fault := broker.FaultAction{}
				once.Do(func() {
					if cancelToo {
						cancel()
					}
					fault.Fault = broker.DropAnswer
				})
				return fault
			})
			err := a.CommitAcknowledgements(ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata())
			if cancelToo {
				require.ErrorIs(t, err, kshare.ErrInDoubt)
				require.ErrorIs(t, a.AbortAcknowledgements(e.ctx), kshare.ErrCommitted)
			} else {
				require.NoError(t, err)
			}
			e.allDone(1, inputs)
			require.EqualValues(t, 1, a.Metrics().TransactionsCommitted)
			for _, r := range recs {
				_, held := c.DeliveryCount(r)
				require.False(t, held, "the consumer learned the commit")
			}
		})
	}
}

// Close never waits past its context for a transaction in progress in
// another goroutine: it cuts the commit short, says it could not abort,
// resolves the acknowledgements once (the consumer releases its records),
// and every call after it fails with ErrClosed.
func TestCloseDuringCommitAcknowledgements(t *testing.T) {
	const inputs = 4
	e := newEnv(t, 1, inputs, broker.ShareLockDuration(10*time.Minute))
	c := e.consumer()
	a := e.acknowledger("ack", acknowledger.KgoOpts(kgo.ClientID("slow")))
	recs := e.poll(c, inputs)
	release := make(chan struct{})
	held := make(chan struct{})
	var once sync.Once
	t.Cleanup(e.c.InjectFaults(func(_ int32, id string, req kmsg.Request) broker.FaultAction {
		if id == "slow" && req.Key() == wire.TxnShareAcknowledgeKey {
			once.Do(func() { close(held) })
			<-release // the leader is slow to answer
		}
		return broker.FaultAction{}
	}))
	committed := make(chan error, 1)
	go func() {
		committed <- a.CommitAcknowledgements(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata())
	}()
	<-held
	dead, cancel := context.WithCancel(e.ctx)
	cancel()
	closeErr := a.Close(dead)
	close(release)
	require.ErrorIs(t, closeErr, kshare.ErrAbortable, "Close could not abort, and says so")
	require.Error(t, <-committed)
	for _, r := range recs {
		_, held := c.DeliveryCount(r)
		require.False(t, held, "the acknowledgements were resolved; the consumer let the records go")
	}
	require.ErrorIs(t, a.CommitAcknowledgements(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()), kshare.ErrClosed)
	require.ErrorIs(t, a.InitTransactions(e.ctx), kshare.ErrClosed)
	require.NoError(t, a.Close(e.ctx), "a second Close")
	var nilCtx context.Context
	require.ErrorIs(t, a.AbortAcknowledgements(nilCtx), kshare.ErrClosed, "after Close, even a call with a nil ctx is closed")
}
