package producer

import (
	"fmt"
	"github.com/kshare-go/kshare/txnclient"
	"github.com/kshare-go/kshare/wire"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/broker"
)

// Transactions alternately commit and abort; a read_committed reader sees
// exactly the committed records, each once, in produce order per partition.
func TestCommitsAndAbortsInterleaved(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const topic, partitions = "interleaved", 6
	createTopic(t, c, topic, partitions)
	p := newProducer(t, c, "interleaved-txn", Linger(0))
	ctx := testCtx(t)
	require.True(t, p.Transactions().TV2(), "the bundled broker runs transaction version 2")

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

// While the leadership of the producer's __transaction_state partition
// keeps moving between nodes, a stream of transactions sees no fatal error
// and every committed transaction lands exactly once (a commit that fails
// as abortable is aborted and its records never appear).
func TestCommitsWhileTransactionStateLeadershipMoves(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const topic, partitions, txnID = "moves", 3, "moving-coordinator"
	createTopic(t, c, topic, partitions)
	p := newProducer(t, c, txnID, Linger(0))
	ctx := testCtx(t)
	statePartition := c.CoordinatorPartition(1, txnID)

	stop := make(chan struct{})
	var moves atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(2+rand.IntN(10)) * time.Millisecond):
			}
			leader, err := c.Leader(wire.TransactionStateTopic, statePartition)
			if !assert.NoError(t, err) {
				return
			}
			if !assert.NoError(t, c.MoveLeader(wire.TransactionStateTopic, statePartition, (leader+1)%3)) {
				return
			}
			moves.Add(1)
		}
	}()
	defer wg.Wait()
	defer close(stop)

	committed := make(map[string]bool)
	var aborted int
	for i := 0; i < 150 || moves.Load() < 50; i++ {
		require.NoError(t, ctx.Err(), "after %d transactions and %d moves", i, moves.Load())
		require.NoError(t, p.BeginTransaction())
		var vals []string
		for j := range 10 {
			v := fmt.Sprintf("t%03d-r%02d", i, j)
			vals = append(vals, v)
			p.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}, nil)
		}
		err := p.CommitTransaction(ctx)
		if err == nil {
			for _, v := range vals {
				committed[v] = true
			}
			continue
		}
		require.ErrorIs(t, err, txnclient.ErrAbortable, "commit %d", i)
		require.NotErrorIs(t, err, txnclient.ErrFatal)
		aborted++
		require.NoError(t, p.AbortTransaction(ctx), "abort after %v", err)
	}
	t.Logf("%d transactions committed, %d aborted, %d leadership moves", len(committed)/10, aborted, moves.Load())
	require.Equal(t, txnclient.StateReady, p.Transactions().State())

	seen := make(map[string]int)
	for _, r := range readCommitted(t, c, topic, partitions) {
		seen[r.value]++
	}
	for v := range committed {
		require.Equal(t, 1, seen[v], "committed record %s", v)
	}
	require.Len(t, seen, len(committed), "no record of an aborted transaction is visible")
}

// With a client that cannot send EndTxn v5 / Produce v12 (pinned to Kafka
// 3.5's versions), transactions fall back to TV1: AddPartitionsToTxn v3
// before the first record of each partition, no epoch bump at EndTxn, and
// the same read_committed outcome.
func TestTV1Fallback(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const topic, partitions = "tv1", 3
	createTopic(t, c, topic, partitions)
	var mu sync.Mutex
	var adds []*kmsg.AddPartitionsToTxnRequest
	stop := c.ObserveRequests(func(_ int32, req kmsg.Request) {
		if r, ok := req.(*kmsg.AddPartitionsToTxnRequest); ok {
			mu.Lock()
			adds = append(adds, r)
			mu.Unlock()
		}
	})
	defer stop()
	p := newProducer(t, c, "tv1-txn", Linger(0), KgoOpts(kgo.MaxVersions(kversion.V3_5_0())))
	require.False(t, p.Transactions().TV2())
	ctx := testCtx(t)
	pid, epoch := p.Transactions().ProducerID()

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
	gotPID, gotEpoch := p.Transactions().ProducerID()
	require.Equal(t, pid, gotPID)
	require.Equal(t, epoch, gotEpoch, "TV1 keeps the epoch across transactions")
	mu.Lock()
	clientAdds := 0
	for _, a := range adds {
		if a.Version <= 3 { // v4+ are the leaders' own verification requests
			require.Equal(t, "tv1-txn", a.TransactionalID)
			clientAdds++
		}
	}
	mu.Unlock()
	require.GreaterOrEqual(t, clientAdds, 4, "AddPartitionsToTxn v3 in every transaction")
	got := map[string]bool{}
	for _, r := range readCommitted(t, c, topic, partitions) {
		require.False(t, got[r.value], "duplicate %s", r.value)
		got[r.value] = true
	}
	require.Equal(t, want, got)
}

// While the leaders of the data partitions keep moving, produce requests
// meet NOT_LEADER_OR_FOLLOWER and are retried at the new leaders with the
// same sequence numbers: every committed record lands exactly once.
func TestCommitsWhileDataLeadersMove(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const topic, partitions = "moving-data", 3
	createTopic(t, c, topic, partitions)
	p := newProducer(t, c, "moving-data-txn", Linger(time.Millisecond))
	ctx := testCtx(t)

	stop := make(chan struct{})
	var moves atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int32(0); ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(5+rand.IntN(15)) * time.Millisecond):
			}
			part := i % partitions
			leader, err := c.Leader(topic, part)
			if !assert.NoError(t, err) || !assert.NoError(t, c.MoveLeader(topic, part, (leader+1)%3)) {
				return
			}
			moves.Add(1)
		}
	}()
	stopMoving := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopMoving()

	committed := make(map[string]bool)
	for i := 0; i < 60 || moves.Load() < 30; i++ {
		require.NoError(t, ctx.Err(), "after %d transactions and %d moves", i, moves.Load())
		require.NoError(t, p.BeginTransaction())
		var vals []string
		for j := range 30 {
			v := fmt.Sprintf("t%04d-r%02d", i, j)
			vals = append(vals, v)
			p.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}, nil)
		}
		err := p.CommitTransaction(ctx)
		if err != nil {
			require.ErrorIs(t, err, txnclient.ErrAbortable, "transaction %d", i)
			require.NoError(t, p.AbortTransaction(ctx))
			continue
		}
		for _, v := range vals {
			committed[v] = true
		}
	}
	stopMoving() // the reader below needs leaders that stay put
	t.Logf("%d records committed across %d leader moves", len(committed), moves.Load())
	require.NotEmpty(t, committed)
	seen := make(map[string]int)
	for _, r := range readCommitted(t, c, topic, partitions) {
		seen[r.value]++
	}
	for v := range committed {
		require.Equal(t, 1, seen[v], "committed record %s", v)
	}
	require.Len(t, seen, len(committed))
}
