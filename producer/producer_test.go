package producer

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/internal/txn"
	"github.com/kshare-go/kshare/wire"
)

// Transactions alternately commit and abort; a read_committed reader sees
// exactly the committed records, each once, in produce order per partition.
func TestCommitsAndAbortsInterleaved(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const topic, partitions = "interleaved", 6
	createTopic(t, c, topic, partitions)
	p := newProducer(t, c, "interleaved-txn", Linger(0))
	ctx := testCtx(t)
	require.True(t, p.txn.TV2(), "the bundled broker runs transaction version 2")

	want := make(map[string]bool)
	const txns, perTxn = 10, 60
	for i := range txns {
		require.NoError(t, p.BeginTransaction())
		var vals []string
		for j := range perTxn {
			v := fmt.Sprintf("t%02d-r%03d", i, j)
			vals = append(vals, v)
			p.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(v), Value: []byte(v)}, func(r *kgo.Record, err error) {
				if i%2 == 0 {
					assert.NoError(t, err)
				}
			})
		}
		if i%2 == 0 {
			require.NoError(t, p.CommitTransaction(ctx))
			for _, v := range vals {
				want[v] = true
			}
		} else {
			require.NoError(t, p.Flush(ctx)) // the records reach the log, then abort
			require.NoError(t, p.AbortTransaction(ctx))
		}
	}
	got := readCommitted(t, c, topic, partitions)
	seen := make(map[string]int)
	lastByPartition := make(map[int32]string)
	for _, r := range got {
		seen[r.value]++
		require.Greater(t, r.value, lastByPartition[r.partition], "partition %d out of order", r.partition)
		lastByPartition[r.partition] = r.value
	}
	for v := range want {
		require.Equal(t, 1, seen[v], "committed record %s", v)
	}
	require.Len(t, seen, len(want), "only committed records are visible")

	m := p.Metrics()
	require.EqualValues(t, txns/2, m.TransactionsCommitted)
	require.EqualValues(t, txns/2, m.TransactionsAborted)
	require.EqualValues(t, txns*perTxn, m.RecordsProduced)
	require.Positive(t, m.CommitLatencyP50)
	require.GreaterOrEqual(t, m.CommitLatencyP99, m.CommitLatencyP50)
	keys := make([]string, 0, len(lastByPartition))
	for p, v := range lastByPartition {
		keys = append(keys, fmt.Sprint(p, v))
	}
	sort.Strings(keys)
	t.Logf("last committed per partition: %v", keys)
}

// A dispatcher that read the state of a failing transaction and looks at
// the partitions only after the next transaction began must leave that
// transaction's records alone, and fail only those of the failing one.
func TestStaleFailedStateSparesTheNextTransaction(t *testing.T) {
	c := newCluster(t)
	const topic = "stale-state"
	createTopic(t, c, topic, 1)
	p := newProducer(t, c, "stale-state-txn", Linger(time.Hour))
	ctx := testCtx(t)
	require.NoError(t, p.BeginTransaction())
	_, num := p.txn.TxnState()
	promised := make(chan error, 1)
	p.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}, func(_ *kgo.Record, err error) { promised <- err })

	p.dispatchIn(txn.StateAborting, num-1, map[int32]int{}, nil)
	select {
	case err := <-promised:
		t.Fatalf("the record of transaction %d failed for transaction %d: %v", num, num-1, err)
	default:
	}
	p.dispatchIn(txn.StateAborting, num, map[int32]int{}, nil)
	require.ErrorIs(t, <-promised, kshare.ErrAbortable, "the failing transaction's own record fails")
	require.NoError(t, p.AbortTransaction(ctx))
}

// While the leadership of the producer's __transaction_state partition
// keeps moving between nodes, a stream of transactions sees no fatal error
// and every committed transaction lands exactly once (a commit that fails
// as abortable is aborted and its records never appear).
func TestCommitsWhileTransactionStateLeadershipMoves(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const topic, partitions, txnID = "moves", 3, "moving-coordinator"
	createTopic(t, c, topic, partitions)
	p := newProducer(t, c, txnID, Linger(0))
	statePartition := c.CoordinatorPartition(1, txnID)
	moves, _ := keepMovingLeaders(t, c, 2*time.Millisecond, 10*time.Millisecond, func(int) (string, int32) {
		return wire.TransactionStateTopic, statePartition
	})

	committed, aborted := commitStream(t, p, topic, 10, func(i int) bool { return i < 150 || moves.Load() < 50 })
	t.Logf("%d transactions committed, %d aborted, %d leadership moves", len(committed)/10, aborted, moves.Load())
	require.Equal(t, txn.StateReady, p.txn.State())
	requireCommittedOnce(t, c, topic, partitions, committed)
}

// With a client that cannot send EndTxn v5 / Produce v12 (pinned to Kafka
// 3.5's versions), transactions fall back to TV1: AddPartitionsToTxn v3
// before the first record of each partition, no epoch bump at EndTxn, and
// the same read_committed outcome.
func TestTV1Fallback(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const topic, partitions = "tv1", 3
	createTopic(t, c, topic, partitions)
	log := bundled.ObserveRequests(t, c)
	p := newProducer(t, c, "tv1-txn", Linger(0), KgoOpts(kgo.MaxVersions(kversion.V3_5_0())))
	require.False(t, p.txn.TV2())
	ctx := testCtx(t)
	pid, epoch := p.txn.ProducerID()

	want := map[string]bool{}
	for i := range 4 {
		require.NoError(t, p.BeginTransaction())
		var vals []string
		for j := range 12 {
			vals = append(vals, fmt.Sprintf("tv1-%d-%02d", i, j))
		}
		produceValues(t, p, topic, vals...)
		if i%2 == 0 {
			require.NoError(t, p.CommitTransaction(ctx))
			for _, v := range vals {
				want[v] = true
			}
		} else {
			require.NoError(t, p.AbortTransaction(ctx))
		}
	}
	gotPID, gotEpoch := p.txn.ProducerID()
	require.Equal(t, pid, gotPID)
	require.Equal(t, epoch, gotEpoch, "TV1 keeps the epoch across transactions")
	clientAdds := 0
	for _, o := range log.Of(kmsg.AddPartitionsToTxn.Int16()) {
		if a := o.Req.(*kmsg.AddPartitionsToTxnRequest); a.Version <= 3 { // v4+ are the leaders' own verification requests
			require.Equal(t, "tv1-txn", a.TransactionalID)
			clientAdds++
		}
	}
	require.GreaterOrEqual(t, clientAdds, 4, "AddPartitionsToTxn v3 in every transaction")
	requireCommittedOnce(t, c, topic, partitions, want)
}

// While the leaders of the data partitions keep moving, produce requests
// meet NOT_LEADER_OR_FOLLOWER and are retried at the new leaders with the
// same sequence numbers: every committed record lands exactly once.
func TestCommitsWhileDataLeadersMove(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const topic, partitions = "moving-data", 3
	createTopic(t, c, topic, partitions)
	p := newProducer(t, c, "moving-data-txn", Linger(time.Millisecond))
	moves, stopMoving := keepMovingLeaders(t, c, 5*time.Millisecond, 15*time.Millisecond, func(i int) (string, int32) {
		return topic, int32(i) % partitions
	})

	committed, _ := commitStream(t, p, topic, 30, func(i int) bool { return i < 60 || moves.Load() < 30 })
	stopMoving() // the reader below needs leaders that stay put
	t.Logf("%d records committed across %d leader moves", len(committed), moves.Load())
	require.NotEmpty(t, committed)
	requireCommittedOnce(t, c, topic, partitions, committed)
}

// keepMovingLeaders moves a partition's leadership to the next node, again
// and again after pauses of minPause plus up to jitter, until the returned
// stop is called (at the latest when the test ends). which names the
// partition of the i-th move. moves counts the moves made.
func keepMovingLeaders(t testing.TB, c *broker.Cluster, minPause, jitter time.Duration, which func(i int) (string, int32)) (moves *atomic.Int64, stop func()) {
	return moveLeaders(t, c, func(time.Time) time.Time { return time.Now().Add(minPause + rand.N(jitter)) }, which,
		func(leader, nodes int32) int32 { return (leader + 1) % nodes })
}

// moveLeaders moves the leadership of partition which(i) to target(its
// leader, node count), the i-th time at next(when the previous move
// began), until stop (at the latest when the test ends).
func moveLeaders(t testing.TB, c *broker.Cluster, next func(prev time.Time) time.Time, which func(i int) (string, int32), target func(leader, nodes int32) int32) (moves *atomic.Int64, stop func()) {
	nodes := int32(len(c.NodeIDs()))
	moves = new(atomic.Int64)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		prev := time.Now()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(time.Until(next(prev))):
			}
			prev = time.Now()
			topic, partition := which(i)
			leader, err := c.Leader(topic, partition)
			if !assert.NoError(t, err) || !assert.NoError(t, c.MoveLeader(topic, partition, target(leader, nodes))) {
				return
			}
			moves.Add(1)
		}
	}()
	stop = sync.OnceFunc(func() { close(done); wg.Wait() })
	t.Cleanup(stop)
	return moves, stop
}

// commitStream runs transactions of perTxn records each for as long as
// more(i) says, i counting the transactions run. A commit that fails must
// fail as abortable, never fatal, and the transaction is then aborted. It
// returns the values of the committed records and how many transactions
// aborted.
func commitStream(t *testing.T, p *Producer, topic string, perTxn int, more func(i int) bool) (committed map[string]bool, aborted int) {
	t.Helper()
	ctx := testCtx(t)
	committed = make(map[string]bool)
	for i := 0; more(i); i++ {
		require.NoError(t, ctx.Err(), "after %d transactions", i)
		require.NoError(t, p.BeginTransaction())
		vals := make([]string, perTxn)
		for j := range vals {
			vals[j] = fmt.Sprintf("t%04d-r%03d", i, j)
			p.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(vals[j])}, nil)
		}
		if err := p.CommitTransaction(ctx); err != nil {
			require.ErrorIs(t, err, kshare.ErrAbortable, "commit %d", i)
			require.NotErrorIs(t, err, kshare.ErrFatal, "commit %d", i)
			aborted++
			require.NoError(t, p.AbortTransaction(ctx), "abort after %v", err)
			continue
		}
		for _, v := range vals {
			committed[v] = true
		}
	}
	return committed, aborted
}

// requireCommittedOnce requires that a read_committed reader of topic sees
// every value of want exactly once, and nothing else.
func requireCommittedOnce(t *testing.T, c *broker.Cluster, topic string, partitions int32, want map[string]bool) {
	t.Helper()
	seen := make(map[string]int)
	for _, r := range readCommitted(t, c, topic, partitions) {
		seen[r.value]++
	}
	for v := range want {
		require.Equal(t, 1, seen[v], "committed record %s", v)
	}
	require.Len(t, seen, len(want), "no record of an aborted transaction is visible")
}

// A client that may send EndTxn v5 but not Produce v12 runs transaction
// version 1, and its EndTxn goes out at v4: v5 would bump the epoch on the
// coordinator while the producer kept the old one, and its next
// transaction would be fenced.
func TestTV1KeepsEndTxnBelowV5(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const topic = "tv1-endtxn"
	createTopic(t, c, topic, 1)
	log := bundled.ObserveRequests(t, c)
	versions := wire.KgoMaxVersions()
	versions.SetMaxKeyVersion(kmsg.Produce.Int16(), 11)
	p := newProducer(t, c, "tv1-endtxn", Linger(0), KgoOpts(kgo.MaxVersions(versions)))
	require.False(t, p.txn.TV2())
	ctx := testCtx(t)
	for i := range 3 {
		require.NoError(t, p.BeginTransaction())
		produceValues(t, p, topic, fmt.Sprintf("v%d", i))
		require.NoError(t, p.CommitTransaction(ctx), "transaction %d", i)
	}
	ends := log.Of(kmsg.EndTxn.Int16())
	require.Len(t, ends, 3)
	for _, o := range ends {
		require.LessOrEqual(t, o.Req.GetVersion(), int16(4))
	}
}
