package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/internal/txn"
	"github.com/kshare-go/kshare/wire"
)

// produceValues produces vals to topic in the current transaction and
// requires that every record is written.
func produceValues(t *testing.T, p *Producer, topic string, vals ...string) {
	t.Helper()
	var recs []*kgo.Record
	for _, v := range vals {
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(v)})
	}
	require.NoError(t, p.ProduceSync(testCtx(t), recs...).FirstErr())
}

// KAFKA-21181 (seeds/002) under the broker's legacy stale coordinator
// switch: transaction N commits on coordinator A, the __transaction_state
// partition moves to B, the leaders add transaction N+1's partitions at B,
// and the producer's EndTxn goes to A, which answers INVALID_TXN_STATE from
// its stale cache. The stale-answer defense finds B and commits there.
func TestStaleCoordinatorAnswerIsNotFinal(t *testing.T) {
	c := newCluster(t, broker.Nodes(3), broker.LegacyStaleCoordinator(5*time.Second))
	const topic, txnID = "stale", "stale-coordinator"
	createTopic(t, c, topic, 3)
	logs := &logCapture{}
	p := newProducer(t, c, txnID, Linger(0), Logger(slog.New(logs)))
	ctx := testCtx(t)

	log := bundled.ObserveRequests(t, c)

	// Transaction N commits on A.
	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, topic, "n-0", "n-1")
	require.NoError(t, p.CommitTransaction(ctx))
	statePartition := c.CoordinatorPartition(1, txnID)
	a, err := c.Leader(wire.TransactionStateTopic, statePartition)
	require.NoError(t, err)
	b := (a + 1) % 3
	require.NoError(t, c.MoveLeader(wire.TransactionStateTopic, statePartition, b))

	// What A says now, raw: COMPLETE_COMMIT + COMMIT at the current epoch.
	pid, epoch := p.txn.ProducerID()
	raw := kmsg.NewPtrEndTxnRequest()
	raw.TransactionalID, raw.ProducerID, raw.ProducerEpoch, raw.Commit = txnID, pid, epoch, true
	rawResp, err := newClient(t, c).Broker(int(a)).Request(ctx, raw)
	require.NoError(t, err)
	require.Equal(t, kerr.InvalidTxnState.Code, rawResp.(*kmsg.EndTxnResponse).ErrorCode,
		"the old coordinator answers from its stale cache")

	// Transaction N+1: the leaders add its partitions at B; the producer's
	// EndTxn goes to A first.
	log.Reset()
	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, topic, "n1-0", "n1-1", "n1-2")
	require.NoError(t, p.CommitTransaction(ctx), "the defense turns the stale answer into a retry at B")

	var nodes []int32
	for _, o := range log.Of(kmsg.EndTxn.Int16()) {
		nodes = append(nodes, o.Node)
	}
	require.Equal(t, []int32{a, b}, nodes, "EndTxn went to the old coordinator, then to the new one")
	require.NotEmpty(t, logs.matching("former coordinator", "INVALID_TXN_STATE"), "the defense saw the stale answer")

	var got []string
	for _, r := range readCommitted(t, c, topic, 3) {
		got = append(got, r.value)
	}
	require.ElementsMatch(t, []string{"n-0", "n-1", "n1-0", "n1-1", "n1-2"}, got)
}

// A second producer with the same transactional id fences the first: the
// first's open transaction is aborted by the coordinator and its next call
// fails with ErrFatal whose cause is PRODUCER_FENCED.
func TestZombieIsFenced(t *testing.T) {
	for _, produceAfterFence := range []bool{false, true} {
		t.Run(fmt.Sprintf("produce after fence %v", produceAfterFence), func(t *testing.T) {
			c := newCluster(t, broker.Nodes(3))
			const topic, txnID = "zombie", "zombie-txn"
			createTopic(t, c, topic, 2)
			ctx := testCtx(t)

			zombie := newProducer(t, c, txnID, Linger(0))
			require.NoError(t, zombie.BeginTransaction())
			produceValues(t, zombie, topic, "zombie-0", "zombie-1")

			successor := newProducer(t, c, txnID, Linger(0)) // fences the zombie
			if produceAfterFence {
				res := zombie.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("zombie-late")})
				require.Error(t, res.FirstErr(), "a fenced producer's record is refused")
			}
			err := zombie.CommitTransaction(ctx)
			require.ErrorIs(t, err, kshare.ErrFatal)
			var ke *kerr.Error
			require.True(t, errors.As(err, &ke), "kerr cause reachable: %v", err)
			require.Equal(t, kerr.ProducerFenced, ke)
			require.Equal(t, txn.StateFatalError, zombie.txn.State())
			require.ErrorIs(t, zombie.BeginTransaction(), kshare.ErrFatal, "fatal is final")

			require.NoError(t, successor.BeginTransaction())
			produceValues(t, successor, topic, "successor-0")
			require.NoError(t, successor.CommitTransaction(ctx))

			var got []string
			for _, r := range readCommitted(t, c, topic, 2) {
				got = append(got, r.value)
			}
			require.Equal(t, []string{"successor-0"}, got, "the zombie's transaction was aborted")
			closeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			require.NoError(t, zombie.Close(closeCtx))
		})
	}
}

// KAFKA-21181 when leadership comes back: EndTxn goes to A, which lost the
// __transaction_state partition to B and answers INVALID_TXN_STATE from
// its stale cache; before the answer reaches the producer, the partition
// moves back to A. FindCoordinator then names A again, the node that gave
// the answer, but the answer was still stale: the producer retries once at
// the current coordinator, which commits.
func TestStaleAnswerOfReturningCoordinatorIsRetried(t *testing.T) {
	c := newCluster(t, broker.Nodes(3), broker.LegacyStaleCoordinator(5*time.Second))
	const topic, txnID, client = "returning", "returning-coordinator", "returning-producer"
	createTopic(t, c, topic, 3)
	p := newProducer(t, c, txnID, Linger(0), clientID(client))
	ctx := testCtx(t)

	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, topic, "n-0")
	require.NoError(t, p.CommitTransaction(ctx))
	part := c.CoordinatorPartition(1, txnID)
	a, err := c.Leader(wire.TransactionStateTopic, part)
	require.NoError(t, err)
	require.NoError(t, c.MoveLeader(wire.TransactionStateTopic, part, (a+1)%3))

	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, topic, "n1-0", "n1-1") // the leaders add the partitions at the new coordinator
	log := bundled.ObserveRequests(t, c)
	var moved atomic.Bool
	stale := make(chan int16, 1)
	onClientRequests(t, c, client, func(node int32, req kmsg.Request) broker.FaultAction {
		if req.Key() != kmsg.EndTxn.Int16() || node != a || !moved.CompareAndSwap(false, true) {
			return broker.FaultAction{}
		}
		return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
			stale <- resp.(*kmsg.EndTxnResponse).ErrorCode
			if err := c.MoveLeader(wire.TransactionStateTopic, part, a); err != nil {
				t.Errorf("moving the coordinator back: %v", err)
			}
		}}
	})
	require.NoError(t, p.CommitTransaction(ctx), "the stale answer is not final although the coordinator is the same node again")
	require.Equal(t, kerr.InvalidTxnState.Code, <-stale, "A answered from its stale cache")
	var nodes []int32
	for _, o := range log.Of(kmsg.EndTxn.Int16()) {
		nodes = append(nodes, o.Node)
	}
	require.Equal(t, []int32{a, a}, nodes, "EndTxn went to A twice: stale, then current")

	var got []string
	for _, r := range readCommitted(t, c, topic, 3) {
		got = append(got, r.value)
	}
	require.ElementsMatch(t, []string{"n-0", "n1-0", "n1-1"}, got)
}
