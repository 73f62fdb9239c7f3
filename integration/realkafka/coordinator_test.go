package realkafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/integration/kafkatest"
	"github.com/kshare-go/kshare/internal/javahash"
	"github.com/kshare-go/kshare/internal/retry"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/producer"
)

const (
	// coordinatorTestTimeout bounds the whole coordinator test: four moves,
	// three outages of node 2 (each a JVM restart) and the final read.
	coordinatorTestTimeout = 8 * time.Minute
	// stepTimeout bounds one wait of that test: a reassignment, a restart,
	// a few commits.
	stepTimeout = 2 * time.Minute
	// coordinatorTxnTimeout is the producer's transaction timeout in that
	// test. It is long enough for a transaction to outlast a restart of the
	// coordinator's node, so that each commit can still succeed.
	coordinatorTxnTimeout = 3 * time.Minute
	txnStateTopic         = "__transaction_state"
	recordsPerTxn         = 20
	findCoordinatorKey    = 10
)

// txnCoordinator locates and moves the transaction coordinator of one
// transactional id by reassigning its __transaction_state partition.
type txnCoordinator struct {
	t         *testing.T
	cl        *kgo.Client
	adm       *kadm.Client
	txnID     string
	partition int32
}

// node asks FindCoordinator where the coordinator is.
func (c *txnCoordinator) node(ctx context.Context) (int32, error) {
	r, ok := c.adm.FindTxnCoordinators(ctx, c.txnID)[c.txnID]
	if !ok {
		return -1, errors.New("FindCoordinator answered nothing for the transactional id")
	}
	if r.Err != nil {
		return -1, fmt.Errorf("FindCoordinator: %w %s", r.Err, r.ErrMessage)
	}
	return r.NodeID, nil
}

// partitionState returns the metadata of the topic's partitions, straight
// from a broker.
func partitionState(ctx context.Context, cl *kgo.Client, topic string) ([]kmsg.MetadataResponseTopicPartition, []int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, err
	}
	var brokers []int32
	for _, b := range resp.Brokers {
		brokers = append(brokers, b.NodeID)
	}
	slices.Sort(brokers)
	if len(resp.Topics) != 1 {
		return nil, brokers, fmt.Errorf("metadata of %s: %d topics in the answer", topic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return nil, brokers, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	return resp.Topics[0].Partitions, brokers, nil
}

// state describes where the partition is and what FindCoordinator says.
func (c *txnCoordinator) state(ctx context.Context) (leader int32, replicas []int32, coordinator int32, err error) {
	parts, _, err := partitionState(ctx, c.cl, txnStateTopic)
	if err != nil {
		return -1, nil, -1, err
	}
	leader = -1
	for _, p := range parts {
		if p.Partition == c.partition {
			leader, replicas = p.Leader, p.Replicas
		}
	}
	coordinator, err = c.node(ctx)
	return leader, replicas, coordinator, err
}

// settled waits until the partition has a leader that FindCoordinator
// names too, and returns it.
func (c *txnCoordinator) settled(ctx context.Context) int32 {
	c.t.Helper()
	var node int32
	waitFor(ctx, c.t, "the transaction coordinator to settle", func(ctx context.Context) (bool, string) {
		leader, replicas, coord, err := c.state(ctx)
		node = coord
		return err == nil && leader >= 0 && leader == coord,
			fmt.Sprintf("partition %d leader %d replicas %v, FindCoordinator %d, err %v", c.partition, leader, replicas, coord, err)
	})
	return node
}

// moveTo reassigns the partition's only replica to node and waits until
// the reassignment is over and FindCoordinator names node.
func (c *txnCoordinator) moveTo(ctx context.Context, node int32) {
	c.t.Helper()
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(txnStateTopic, c.partition, []int32{node})
	resps, err := c.adm.AlterPartitionAssignments(ctx, req)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		c.t.Fatalf("reassign %s/%d to node %d: %v", txnStateTopic, c.partition, node, err)
	}
	waitFor(ctx, c.t, fmt.Sprintf("the transaction coordinator to move to node %d", node), func(ctx context.Context) (bool, string) {
		ongoing, err := c.adm.ListPartitionReassignments(ctx, kadm.TopicsSet{txnStateTopic: {c.partition: {}}})
		if err != nil {
			return false, fmt.Sprintf("list reassignments: %v", err)
		}
		if r, ok := ongoing[txnStateTopic][c.partition]; ok {
			return false, fmt.Sprintf("reassignment in progress: replicas %v adding %v removing %v", r.Replicas, r.AddingReplicas, r.RemovingReplicas)
		}
		leader, replicas, coord, err := c.state(ctx)
		return err == nil && leader == node && slices.Equal(replicas, []int32{node}) && coord == node,
			fmt.Sprintf("leader %d replicas %v, FindCoordinator %d, err %v", leader, replicas, coord, err)
	})
}

// waitFor polls cond until it holds, failing the test with cond's last
// description when stepTimeout or ctx ends first.
func waitFor(ctx context.Context, t *testing.T, what string, cond func(context.Context) (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		ok, desc := cond(ctx)
		if ok {
			return
		}
		last = desc
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last seen: %s", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// createTopicOn creates topic with the given replica of each partition.
func createTopicOn(ctx context.Context, t testing.TB, cl *kgo.Client, topic string, replicaOf map[int32]int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions, rt.ReplicationFactor = -1, -1
	for p, node := range replicaOf {
		a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		a.Partition, a.Replicas = p, []int32{node}
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("CreateTopics %s: %v", topic, err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			t.Fatalf("CreateTopics %s: %v", rt.Topic, err)
		}
	}
}

// txnWorker commits a stream of transactions with the SDK producer: each
// writes recordsPerTxn records; a commit that fails with ErrAbortable, or
// is left in doubt (ErrInDoubt), is aborted: the abort of an in-doubt
// commit may learn that it had committed (ErrCommitted), otherwise the
// transaction is redone under a new attempt number, so every value names
// its transaction and attempt. Any other error stops it.
type txnWorker struct {
	p     *producer.Producer
	topic string
	hold  chan *commitHold
	done  chan struct{}

	mu        sync.Mutex
	committed map[string]bool // values of committed attempts
	aborted   map[string]bool // values of aborted attempts
	commits   int
	failures  int   // commits that failed with ErrAbortable or ErrInDoubt
	aborts    int   // attempts aborted after such a failure
	learned   int   // in-doubt commits whose abort learned they had committed
	lastAbort error // the error of the latest failure
	err       error // why the worker stopped early
}

// commitHold stops the worker once, between writing a transaction's
// records and committing it, until released. A commitTimeout bounds that
// commit.
type commitHold struct {
	commitTimeout time.Duration
	reached       chan struct{}
	release       chan struct{}
}

func newTxnWorker(p *producer.Producer, topic string) *txnWorker {
	return &txnWorker{
		p:         p,
		topic:     topic,
		hold:      make(chan *commitHold),
		done:      make(chan struct{}),
		committed: make(map[string]bool),
		aborted:   make(map[string]bool),
	}
}

// run commits transactions until stop is closed (finishing the current
// one) or an error other than ErrAbortable or ErrInDoubt, or ctx, ends it.
func (w *txnWorker) run(ctx context.Context, stop <-chan struct{}) {
	defer close(w.done)
	for txn := 0; ; txn++ {
		select {
		case <-stop:
			return
		default:
		}
		for attempt := 0; ; attempt++ {
			committed, err := w.attempt(ctx, txn, attempt)
			if err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
			if committed {
				break
			}
		}
	}
}

func (w *txnWorker) attempt(ctx context.Context, txn, attempt int) (committed bool, err error) {
	if err := w.p.BeginTransaction(); err != nil {
		return false, fmt.Errorf("transaction %d attempt %d: begin: %w", txn, attempt, err)
	}
	recs := make([]*kgo.Record, recordsPerTxn)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: w.topic, Value: fmt.Appendf(nil, "t%04d-a%d-r%02d", txn, attempt, i)}
	}
	err = w.p.ProduceSync(ctx, recs...).FirstErr()
	if err == nil {
		commitCtx := ctx
		if d := w.holdIfAsked(ctx); d > 0 {
			var cancel context.CancelFunc
			commitCtx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		err = w.p.CommitTransaction(commitCtx)
	}
	if err == nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, r := range recs {
			w.committed[string(r.Value)] = true
		}
		w.commits++
		return true, nil
	}
	if !errors.Is(err, kshare.ErrAbortable) && !errors.Is(err, kshare.ErrInDoubt) {
		return false, fmt.Errorf("transaction %d attempt %d: %w", txn, attempt, err)
	}
	w.mu.Lock()
	w.failures++
	w.mu.Unlock()
	// The abort needs the coordinator too; an abortable or in-doubt
	// failure of the abort itself (the coordinator still away) is retried.
	abortErr := backoff.Retry(func() error {
		err := w.p.AbortTransaction(ctx)
		if errors.Is(err, kshare.ErrAbortable) || errors.Is(err, kshare.ErrInDoubt) {
			return err
		}
		if err != nil {
			return backoff.Permanent(err)
		}
		return nil
	}, retry.WithContext(ctx))
	if errors.Is(abortErr, kshare.ErrCommitted) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, r := range recs {
			w.committed[string(r.Value)] = true
		}
		w.commits++
		w.learned++
		w.lastAbort = err
		return true, nil
	}
	if abortErr != nil {
		return false, fmt.Errorf("transaction %d attempt %d: abort after %v: %w", txn, attempt, err, abortErr)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range recs {
		w.aborted[string(r.Value)] = true
	}
	w.aborts++
	w.lastAbort = err
	return false, nil
}

// holdIfAsked waits while a hold is asked for, and returns the timeout of
// the commit that follows (0: none but ctx).
func (w *txnWorker) holdIfAsked(ctx context.Context) time.Duration {
	select {
	case h := <-w.hold:
		close(h.reached)
		select {
		case <-h.release:
		case <-ctx.Done():
		}
		return h.commitTimeout
	default:
		return 0
	}
}

// holdBeforeCommit returns once the worker has written a transaction's
// records and waits to commit it, with commitTimeout if positive; close the
// hold's release to let it.
func (w *txnWorker) holdBeforeCommit(ctx context.Context, t *testing.T, commitTimeout time.Duration) *commitHold {
	t.Helper()
	h := &commitHold{commitTimeout: commitTimeout, reached: make(chan struct{}), release: make(chan struct{})}
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	select {
	case w.hold <- h:
	case <-w.done:
		t.Fatalf("the worker stopped: %v", w.stopErr())
	case <-ctx.Done():
		t.Fatalf("the worker did not reach a commit: %v", ctx.Err())
	}
	<-h.reached // closed right after the worker took h
	return h
}

func (w *txnWorker) stopErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *txnWorker) commitCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.commits
}

func (w *txnWorker) failureCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failures
}

// waitCommits waits until the worker has committed n transactions in all.
func (w *txnWorker) waitCommits(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("%d commits", n), func(context.Context) (bool, string) {
		select {
		case <-w.done:
			t.Fatalf("the worker stopped: %v", w.stopErr())
		default:
		}
		c := w.commitCount()
		return c >= n, fmt.Sprintf("%d commits", c)
	})
}

// TestProducerFollowsTransactionCoordinator runs the SDK's transactional
// producer on a two-node real Kafka while the coordinator of its
// transactional id moves between the nodes (its __transaction_state
// partition is reassigned, with a transaction open or at a random moment)
// and while the coordinator is unavailable (node 2, hosting it, is stopped
// and started again). The first outage starts with a commit under way, so
// EndTxn must find the coordinator again; in the second that commit gives
// up (ErrAbortable, or ErrInDoubt if EndTxn was sent), so the abort waits
// for the coordinator and the transaction is redone (or, in doubt, learned
// committed); the third starts at a random moment, which is
// mostly while records are produced: the partition leader cannot add the
// partition to the transaction and answers NOT_ENOUGH_REPLICAS until the
// coordinator is back. No error may be fatal, every abortable failure is
// aborted and redone, and a read_committed reader sees every committed
// record exactly once and no aborted one.
func TestProducerFollowsTransactionCoordinator(t *testing.T) {
	cluster := kafkatest.Bootstrap2(t)
	seeds := cluster.Seeds
	ctx, cancel := context.WithTimeout(t.Context(), coordinatorTestTimeout)
	defer cancel()
	admin := testkit.Client(t, seeds)
	adm := kadm.NewClient(admin)

	node2Down := false
	t.Cleanup(func() {
		if node2Down { // a failed step must not leave node 2 stopped
			startCtx, cancel := context.WithTimeout(context.Background(), stepTimeout)
			defer cancel()
			if err := cluster.StartNode2(startCtx); err != nil {
				t.Errorf("restart node 2 after the test: %v", err)
			}
		}
	})

	const partitions = 2
	topic := uniqueName(t, "kshare-coord")
	// The records stay on node 1, so that stopping node 2 takes away the
	// transaction coordinator only.
	createTopicOn(ctx, t, admin, topic, map[int32]int32{0: 1, 1: 1})
	txnID := uniqueName(t, "kshare-coord-txn")
	hook := &writtenKeys{}
	p := newProducer(ctx, t, seeds, txnID,
		producer.TransactionTimeout(coordinatorTxnTimeout),
		producer.KgoOpts(kgo.WithHooks(hook)),
		producer.Logger(testkit.Logger()))

	parts, brokers, err := partitionState(ctx, admin, txnStateTopic)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(brokers, []int32{1, 2}) {
		t.Fatalf("brokers %v; the test needs the two-node cluster of kafka.sh start --nodes 2", brokers)
	}
	coord := &txnCoordinator{t: t, cl: admin, adm: adm, txnID: txnID,
		partition: javahash.Partition(txnID, int32(len(parts)))}
	other := func(n int32) int32 { return 3 - n }
	t.Logf("%s lives in %s/%d of %d partitions; coordinator node %d",
		txnID, txnStateTopic, coord.partition, len(parts), coord.settled(ctx))

	w := newTxnWorker(p, topic)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	stop := make(chan struct{})
	var stopOnce sync.Once
	go w.run(wctx, stop)
	defer func() {
		stopOnce.Do(func() { close(stop) })
		if t.Failed() || ctx.Err() != nil {
			// Closing fails what the producer still holds, so the worker
			// returns now rather than when its retries run out.
			wcancel()
			closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = p.Close(closeCtx)
		}
		<-w.done
	}()
	w.waitCommits(ctx, t, 3)

	// Moves: with a transaction open (its records written, its commit
	// waiting) and at whatever point the worker is.
	const moves = 4
	for i := range moves {
		from := coord.settled(ctx)
		if i%2 == 0 {
			h := w.holdBeforeCommit(ctx, t, 0)
			coord.moveTo(ctx, other(from))
			close(h.release)
		} else {
			coord.moveTo(ctx, other(from))
		}
		t.Logf("move %d: coordinator moved from node %d to node %d (%d commits so far)", i+1, from, other(from), w.commitCount())
		w.waitCommits(ctx, t, w.commitCount()+3)
	}

	// Outages of node 2 while it hosts the coordinator: with a commit under
	// way, which must find the coordinator again once it is back; with a
	// commit under way that gives up first (ErrAbortable or ErrInDoubt), so
	// that the transaction is aborted through the returning coordinator and
	// redone; and at whatever point the worker is.
	if coord.settled(ctx) != 2 {
		coord.moveTo(ctx, 2)
		w.waitCommits(ctx, t, w.commitCount()+2)
	}
	outages := []struct {
		name          string
		hold          bool
		commitTimeout time.Duration
	}{
		{name: "commit under way", hold: true},
		{name: "commit gives up", hold: true, commitTimeout: 2 * time.Second},
		{name: "random moment"},
	}
	for _, o := range outages {
		var h *commitHold
		if o.hold {
			h = w.holdBeforeCommit(ctx, t, o.commitTimeout)
		}
		node2Down = true
		if err := cluster.StopNode2(ctx); err != nil {
			t.Fatal(err)
		}
		before, failed := w.commitCount(), w.failureCount()
		finds := hook.count(findCoordinatorKey)
		switch {
		case o.commitTimeout > 0:
			close(h.release)
			waitFor(ctx, t, "the commit to give up", func(context.Context) (bool, string) {
				n := w.failureCount() - failed
				return n > 0, fmt.Sprintf("%d abortable or in-doubt failures since node 2 stopped (worker error: %v)", n, w.stopErr())
			})
		case o.hold:
			close(h.release)
			waitFor(ctx, t, "the commit to look for the unavailable coordinator", func(context.Context) (bool, string) {
				n := hook.count(findCoordinatorKey) - finds
				return n >= 5, fmt.Sprintf("%d FindCoordinator requests since node 2 stopped", n)
			})
		default:
			time.Sleep(3 * time.Second) // let the worker run into the outage wherever it is
		}
		if n := w.commitCount(); n != before {
			t.Errorf("outage (%s): %d transactions committed while their coordinator was down", o.name, n-before)
		}
		if err := cluster.StartNode2(ctx); err != nil {
			t.Fatal(err)
		}
		node2Down = false
		w.waitCommits(ctx, t, w.commitCount()+3)
		t.Logf("outage (%s): node 2 stopped and started again; %d FindCoordinator requests, %d failed commits since (%d commits so far)",
			o.name, hook.count(findCoordinatorKey)-finds, w.failureCount()-failed, w.commitCount())
		if o.commitTimeout > 0 && w.failureCount() == failed {
			t.Errorf("outage (%s): the commit did not fail", o.name)
		}
	}

	stopOnce.Do(func() { close(stop) })
	select {
	case <-w.done:
	case <-ctx.Done():
		t.Fatalf("the worker did not finish its last transaction: %v", ctx.Err())
	}
	if err := w.stopErr(); err != nil {
		t.Fatalf("the producer failed for good: %v", err)
	}

	const sentinel = "\x00end"
	writeSentinels(ctx, t, seeds, topic, partitions, sentinel)
	reader := testkit.Client(t, seeds, consumeFromStart(topic, partitions), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	seen := make(map[string]int)
	for _, vals := range readUntilSentinels(ctx, t, reader, partitions, sentinel) {
		for _, v := range vals {
			seen[v]++
		}
	}
	for v, n := range seen {
		switch {
		case w.aborted[v]:
			t.Errorf("aborted record %s visible to read_committed", v)
		case !w.committed[v]:
			t.Errorf("record %s visible but never committed", v)
		case n != 1:
			t.Errorf("committed record %s read %d times", v, n)
		}
	}
	for v := range w.committed {
		if seen[v] == 0 {
			t.Errorf("committed record %s missing", v)
		}
	}
	if w.aborts+w.learned != w.failures || w.failures == 0 {
		t.Errorf("%d failed commits, %d aborts, %d in-doubt commits learned as committed; want every failure resolved, and the outage whose commit gave up among them", w.failures, w.aborts, w.learned)
	}
	m := p.Metrics()
	if m.TransactionsCommitted != int64(w.commits) || m.TransactionsAborted != int64(w.aborts) {
		t.Errorf("metrics: %d committed, %d aborted; the worker saw %d and %d", m.TransactionsCommitted, m.TransactionsAborted, w.commits, w.aborts)
	}
	t.Logf("%d transactions committed (%d records read exactly once, %d of them after an in-doubt commit), %d aborted and redone; last failure: %v",
		w.commits, len(seen), w.learned, w.aborts, w.lastAbort)
}
