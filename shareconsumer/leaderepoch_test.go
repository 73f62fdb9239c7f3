package shareconsumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// metadataOf reports whether req is a Metadata request that asks for topic.
func metadataOf(req kmsg.Request, topic string) bool {
	mr, ok := req.(*kmsg.MetadataRequest)
	if !ok {
		return false
	}
	for _, t := range mr.Topics {
		if t.Topic != nil && *t.Topic == topic {
			return true
		}
	}
	return false
}

// A leader epoch check that gets no answer before the commit's context
// ends fails the commit (ErrLockExpired: nothing proved the locks), and
// is not counted as a refusal, since no epoch was seen to move; the next
// round commits.
func TestLedgerEpochCheckWithoutAnswer(t *testing.T) {
	const inputs = 4
	e := ledgerRaceEnv(t, inputs)
	c := e.ledgerConsumer()
	p := e.ledgerProducer("w")
	recs := pollRecords(e.ctx, t, c, inputs)
	require.NoError(t, stageCopies(e.ctx, t, p, c, recs))
	release := make(chan struct{})
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if metadataOf(req, "in") {
			select {
			case <-release:
			case <-e.ctx.Done():
			}
		}
		return broker.FaultAction{}
	})
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
	err := p.CommitTransaction(ctx)
	cancel()
	close(release)
	stop()
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.ErrorIs(t, err, shareconsumer.ErrLockExpired)
	refusals := c.Metrics().LedgerEpochRefusals
	require.NoError(t, p.AbortTransaction(e.ctx))
	_, _ = c.Release(recs)

	// liveness: the next round commits
	again := pollRecords(e.ctx, t, c, inputs)
	require.NoError(t, process(e.ctx, t, p, c, again))
	require.Zero(t, refusals, "no leader epoch was seen to change")
}

// One check answer from a node that still has an earlier incarnation of
// the topic (another topic id, a higher leader epoch), as a node that is
// behind answers after a delete and create: the commit is refused, and the
// other incarnation's epoch is not learned for this one (epochs never go
// down within a topic id, so every later commit would be refused).
func TestLedgerEpochOfAnotherTopicIncarnation(t *testing.T) {
	const inputs = 4
	e := ledgerRaceEnv(t, inputs)
	c := e.ledgerConsumer()
	p := e.ledgerProducer("w")
	leader, err := e.c.Leader("in", 0)
	require.NoError(t, err)

	recs := pollRecords(e.ctx, t, c, inputs)
	require.NoError(t, stageCopies(e.ctx, t, p, c, recs))
	var once bool
	stop := e.c.InjectFaults(func(node int32, _ string, req kmsg.Request) broker.FaultAction {
		if node != leader || !metadataOf(req, "in") || once {
			return broker.FaultAction{}
		}
		once = true
		return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
			mr := resp.(*kmsg.MetadataResponse)
			for i := range mr.Topics {
				if mr.Topics[i].Topic != nil && *mr.Topics[i].Topic == "in" {
					mr.Topics[i].TopicID = [16]byte{0xde, 0xad} // the old incarnation
					for j := range mr.Topics[i].Partitions {
						mr.Topics[i].Partitions[j].LeaderEpoch += 5
					}
				}
			}
		}}
	})
	err = p.CommitTransaction(e.ctx)
	stop()
	require.ErrorIs(t, err, shareconsumer.ErrLockExpired)
	require.ErrorContains(t, err, "another topic")
	require.NoError(t, p.AbortTransaction(e.ctx))
	_, _ = c.Release(recs)

	// No fault any more; the cluster is healthy and the leader unchanged.
	again := pollRecords(e.ctx, t, c, inputs)
	require.NoError(t, process(e.ctx, t, p, c, again), "a healthy consumer commits again")
}
