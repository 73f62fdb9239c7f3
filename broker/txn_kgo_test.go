package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// txnRun is what a transactional kgo producer wrote, per partition in
// offset order.
type txnRun struct {
	committed map[int32][]string
	all       map[int32][]string
	txns      int
}

func (r txnRun) count(m map[int32][]string) int {
	n := 0
	for _, vs := range m {
		n += len(vs)
	}
	return n
}

// runKgoTxns has a kgo.TransactionalID producer write transactions of
// perTxn records round-robin over topic's partitions, committing the even
// ones and aborting the odd ones, until at least minTxns are done and
// more() (nil: always false) says to stop. The last transaction commits.
func runKgoTxns(t *testing.T, c *Cluster, topic, txnID string, minTxns, perTxn int, more func() bool) txnRun {
	t.Helper()
	ctx := testCtx(t)
	cl := newTestClient(t, c,
		kgo.TransactionalID(txnID),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.TransactionTimeout(30*time.Second),
	)
	run := txnRun{committed: map[int32][]string{}, all: map[int32][]string{}}
	for i := 0; i < minTxns || (more != nil && more()) || i%2 == 0; i++ {
		require.NoError(t, cl.BeginTransaction())
		recs := make([]*kgo.Record, perTxn)
		for j := range recs {
			recs[j] = &kgo.Record{Value: fmt.Appendf(nil, "txn-%d-rec-%d", i, j)}
		}
		results := cl.ProduceSync(ctx, recs...)
		require.NoError(t, results.FirstErr(), "transaction %d: produce", i)
		commit := i%2 == 0
		require.NoError(t, cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)), "transaction %d: end (commit=%v)", i, commit)
		for _, r := range results {
			run.all[r.Record.Partition] = append(run.all[r.Record.Partition], string(r.Record.Value))
			if commit {
				run.committed[r.Record.Partition] = append(run.committed[r.Record.Partition], string(r.Record.Value))
			}
		}
		run.txns++
	}
	return run
}

// consumeKgo reads topic from the start at the isolation level until want
// records arrived, and returns them per partition in offset order.
func consumeKgo(t *testing.T, c *Cluster, topic string, isolation kgo.IsolationLevel, want int) map[int32][]string {
	t.Helper()
	ctx := testCtx(t)
	cl := newTestClient(t, c,
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(isolation),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	got := map[int32][]string{}
	n := 0
	for n < want {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records", n, want)
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			n++
		})
	}
	return got
}

// checkKgoReaders checks a read_committed reader sees exactly the committed
// records and a read_uncommitted reader all of them, in order per
// partition.
func checkKgoReaders(t *testing.T, c *Cluster, topic string, run txnRun, partitions int) {
	t.Helper()
	require.Len(t, run.all, partitions, "every partition took part")
	committed := consumeKgo(t, c, topic, kgo.ReadCommitted(), run.count(run.committed))
	require.Equal(t, run.committed, committed, "read_committed: exactly the committed records, in order")
	all := consumeKgo(t, c, topic, kgo.ReadUncommitted(), run.count(run.all))
	require.Equal(t, run.all, all, "read_uncommitted: every record, in order")
}

// txnVersionsSeen records the versions of the transactional requests the
// nodes receive, and the nodes that received EndTxn.
type txnVersionsSeen struct {
	mu          sync.Mutex
	endTxn      map[int16]int
	endTxnNodes map[int32]bool
	endTxnsAt   map[int32]int // EndTxn requests per node
	// lateClientAdds counts client AddPartitionsToTxn (v0-3, the TV1
	// path) sent after the first EndTxn v5.
	lateClientAdds int
}

func observeTxnVersions(t *testing.T, c *Cluster) *txnVersionsSeen {
	s := &txnVersionsSeen{endTxn: map[int16]int{}, endTxnNodes: map[int32]bool{}, endTxnsAt: map[int32]int{}}
	stop := c.ObserveRequests(func(node int32, req kmsg.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch req.Key() {
		case int16(kmsg.EndTxn):
			s.endTxn[req.GetVersion()]++
			s.endTxnNodes[node] = true
			s.endTxnsAt[node]++
		case int16(kmsg.AddPartitionsToTxn):
			if req.GetVersion() < 4 && s.endTxn[5] > 0 {
				s.lateClientAdds++
			}
		}
	})
	t.Cleanup(stop)
	return s
}

// requireTV2 checks that kgo ran its transactions as TV2: kgo learns the
// cluster's finalized transaction.version from its first responses, so its
// first transaction may still be TV1 (EndTxn v4); every later one must end
// with EndTxn v5 and leave the adds to the partition leaders.
func (s *txnVersionsSeen) requireTV2(t *testing.T, txns int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.GreaterOrEqual(t, s.endTxn[5], txns-1, "EndTxn v5 for every transaction but maybe the first: %v", s.endTxn)
	older := 0
	for v, n := range s.endTxn {
		if v < 5 {
			older += n
		}
	}
	require.LessOrEqual(t, older, 1, "at most the first transaction ends below v5: %v", s.endTxn)
	require.Zero(t, s.lateClientAdds, "TV2 producers do not add partitions themselves")
}

func TestTxnKgoCommitAbort(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "eos", 6)
	seen := observeTxnVersions(t, c)
	run := runKgoTxns(t, c, "eos", "kgo-eos", 21, 12, nil)
	require.Equal(t, 21, run.txns)
	seen.requireTV2(t, run.txns)
	checkKgoReaders(t, c, "eos", run, 6)
}

// TestTxnKgoCoordinatorMoves runs the same producer while the leadership
// of its __transaction_state partition moves every 200ms through
// AlterPartitionReassignments: kgo must see no fatal error (it follows
// NOT_COORDINATOR to the new coordinator), and readers must see every
// committed record and no aborted one.
func TestTxnKgoCoordinatorMoves(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "moving", 6)
	const txnID = "kgo-moving"
	txnPartition := c.CoordinatorPartition(coordinatorTxn, txnID)
	admin := newTestClient(t, c)
	seen := observeTxnVersions(t, c)

	ctx, cancel := context.WithCancel(testCtx(t))
	var moves atomic.Int32
	var wg sync.WaitGroup
	moveErr := make(chan error, 1)
	endedAtMove := map[int32]int{} // EndTxn requests seen at each node when it was last left
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			leader, err := c.Leader(wire.TransactionStateTopic, txnPartition)
			if err != nil {
				moveErr <- err
				return
			}
			// Move on only once the producer has ended a transaction at
			// this leader: on a loaded machine two moves could otherwise
			// fall inside one transaction and a node would never see it.
			seen.mu.Lock()
			ended := seen.endTxnsAt[leader] > endedAtMove[leader]
			endedAtMove[leader] = seen.endTxnsAt[leader]
			seen.mu.Unlock()
			if !ended {
				continue
			}
			req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
			rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
			rt.Topic = wire.TransactionStateTopic
			rp := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
			rp.Partition = txnPartition
			rp.Replicas = []int32{(leader + 1) % 3}
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, admin)
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			if err == nil {
				err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
			}
			if err != nil {
				if ctx.Err() == nil {
					moveErr <- err
				}
				return
			}
			moves.Add(1)
		}
	}()
	run := runKgoTxns(t, c, "moving", txnID, 20, 12, func() bool { return moves.Load() < 8 })
	cancel()
	wg.Wait()
	select {
	case err := <-moveErr:
		t.Fatalf("moving the coordinator: %v", err)
	default:
	}
	require.GreaterOrEqual(t, moves.Load(), int32(8))
	t.Logf("%d transactions across %d coordinator moves", run.txns, moves.Load())
	seen.requireTV2(t, run.txns)
	seen.mu.Lock()
	require.Len(t, seen.endTxnNodes, 3, "the producer followed its coordinator to every node")
	seen.mu.Unlock()
	checkKgoReaders(t, c, "moving", run, 6)
}
