package benthos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
)

// instances collects the inputs and outputs the plugins create during a
// test.
type instances struct {
	mu      sync.Mutex
	inputs  []*shareInput
	outputs []*txnOutput
}

func trackInstances(t *testing.T) *instances {
	is := &instances{}
	track := func(v any) {
		is.mu.Lock()
		defer is.mu.Unlock()
		switch v := v.(type) {
		case *shareInput:
			is.inputs = append(is.inputs, v)
		case *txnOutput:
			is.outputs = append(is.outputs, v)
		}
	}
	testCreated.Store(&track)
	t.Cleanup(func() { testCreated.Store(nil) })
	return is
}

// sum adds a counter over every input or output created.
func (is *instances) in(f func(*inputMetrics) *counter) int64 {
	is.mu.Lock()
	defer is.mu.Unlock()
	var n int64
	for _, in := range is.inputs {
		n += f(in.metrics).load()
	}
	return n
}

func (is *instances) out(f func(*outputMetrics) *counter) int64 {
	is.mu.Lock()
	defer is.mu.Unlock()
	var n int64
	for _, o := range is.outputs {
		n += f(o.metrics).load()
	}
	return n
}

// TestCopiesExactlyOnce runs input -> mapping -> output over N records:
// the committed output holds every input exactly once and the group has
// acknowledged every input, every acknowledgement in the transaction of
// its output (the input's own acknowledger committed nothing).
func TestCopiesExactlyOnce(t *testing.T) {
	const n = 2000
	c := newCluster(t)
	r := c.newRun(t, "copy", 3, n, 0)
	is := trackInstances(t)
	began := time.Now()
	p := start(t, testEnv(t, &observed{}, nil), r.yaml(basicPipeline))
	r.waitAcknowledged(t, 2*time.Minute)
	p.stop(t, 30*time.Second)
	requireExactlyOnce(t, r.verify(t, nil, time.Since(began)))
	require.EqualValues(t, n, is.out(func(m *outputMetrics) *counter { return m.acked }), "acknowledgements committed with the outputs")
	require.Zero(t, is.in(func(m *inputMetrics) *counter { return m.accepted }), "acknowledgement-only commits")
	require.Zero(t, is.out(func(m *outputMetrics) *counter { return m.orphans }))
}

// dropPoison deletes every poison message (every tenth input), after
// test_observe has seen it.
const dropPoison = `
    - test_observe: {}
    - mapping: |
        root = if content().string().has_prefix("poison:") { deleted() } else { content() }
`

// TestDroppedMessagesAreAcknowledged drops every tenth message in a
// mapping: the dropped records are accepted by the input's own
// acknowledgement-only transactions, delivered once and never again, and
// have no output; the others are copied exactly once.
func TestDroppedMessagesAreAcknowledged(t *testing.T) {
	const n, every = 2000, 10
	c := newCluster(t)
	r := c.newRun(t, "drop", 3, n, every)
	is := trackInstances(t)
	obs := &observed{}
	began := time.Now()
	yaml := strings.Replace(basicPipeline, "\n    - mapping: root = content()\n", dropPoison, 1)
	p := start(t, testEnv(t, obs, nil), r.yaml(yaml))
	r.waitAcknowledged(t, 2*time.Minute)
	// The stream goes on polling: a redelivery would show in the fetches
	// that follow. Wait for two whole fetches of the group after every
	// input was acknowledged (the third request is sent once the second
	// was answered), not for a time in which some number of them happen
	// to fit.
	fetches := make(chan struct{}, 3)
	stopObserving := c.ObserveRequests(func(_ int32, req kmsg.Request) {
		if f, ok := req.(*kmsg.ShareFetchRequest); ok && f.GroupID != nil && *f.GroupID == r.group {
			select {
			case fetches <- struct{}{}:
			default:
			}
		}
	})
	for i := range cap(fetches) {
		select {
		case <-fetches:
		case <-time.After(time.Minute):
			t.Fatalf("the stream sent %d fetches in a minute after every input was acknowledged", i)
		}
	}
	stopObserving()
	p.stop(t, 30*time.Second)
	res := r.verify(t, nil, time.Since(began))
	requireExactlyOnce(t, res)
	require.Equal(t, n/every, res.Rejected, "the dropped inputs have no output")
	require.EqualValues(t, n/every, is.in(func(m *inputMetrics) *counter { return m.accepted }), "dropped records accepted by the input")
	require.EqualValues(t, n-n/every, is.out(func(m *outputMetrics) *counter { return m.acked }))
	poison := 0
	for i := 0; i < n; i++ {
		if r.input.Poison(i) {
			poison++
			require.Equal(t, []int64{1}, obs.of(r.input.Value(i)), "%s delivered once", r.input.Value(i))
		}
	}
	require.Equal(t, n/every, poison)
}

// nackPipeline fails messages in test_fail and rejects the failed ones
// (a nack); the others go to kshare_txn.
const nackPipeline = `
input:
  kshare_share:
    seed_brokers: [ $SEEDS ]
    group: $GROUP
    topics: [ $IN ]
    transactional_id: $INTXN
    auto_offset_reset: earliest
    max_poll_records: 100
    max_wait: 100ms
    reject_after_deliveries: $REJECT
pipeline:
  threads: 1
  processors:
    - test_observe: {}
    - test_fail: {}
output:
  reject_errored:
    kshare_txn:
      seed_brokers: [ $SEEDS ]
      transactional_id: $OUTTXN
      topic: $OUT
      key: ${! @kafka_key }
`

// TestProcessorErrorNacks fails every seventh message at its first
// delivery: the nack releases those records, which come back at once
// (delivery 2) and are then copied; everything exactly once.
func TestProcessorErrorNacks(t *testing.T) {
	const n = 1400
	c := newCluster(t)
	r := c.newRun(t, "nack", 3, n, 0)
	is := trackInstances(t)
	obs := &observed{}
	failing := map[string]bool{}
	for i := 0; i < n; i += 7 {
		failing[r.input.Value(i)] = true
	}
	env := testEnv(t, obs, func(v string, delivery int64) bool { return failing[v] && delivery == 1 })
	began := time.Now()
	p := start(t, env, r.yaml(strings.Replace(nackPipeline, "$REJECT", "0", 1)))
	r.waitAcknowledged(t, 2*time.Minute)
	p.stop(t, 30*time.Second)
	requireExactlyOnce(t, r.verify(t, nil, time.Since(began)))
	for v := range failing {
		require.Equal(t, []int64{1, 2}, obs.of(v), "%s came back once after its nack", v)
	}
	require.EqualValues(t, len(failing), is.in(func(m *inputMetrics) *counter { return m.released }))
	require.Zero(t, is.in(func(m *inputMetrics) *counter { return m.rejected }))
}

// TestNackRejectsAfterDeliveries fails every poison message at every
// delivery, with reject_after_deliveries 3: each is released twice and
// rejected at its third delivery, and has no output.
func TestNackRejectsAfterDeliveries(t *testing.T) {
	const n, every = 500, 10
	c := newCluster(t)
	r := c.newRun(t, "reject", 3, n, every)
	is := trackInstances(t)
	obs := &observed{}
	env := testEnv(t, obs, func(v string, _ int64) bool { return strings.HasPrefix(v, "poison:") })
	began := time.Now()
	p := start(t, env, r.yaml(strings.Replace(nackPipeline, "$REJECT", "3", 1)))
	r.waitAcknowledged(t, 2*time.Minute)
	p.stop(t, 30*time.Second)
	res := r.verify(t, nil, time.Since(began))
	requireExactlyOnce(t, res)
	require.Equal(t, n/every, res.Rejected)
	poison := 0
	for i := 0; i < n; i++ {
		if r.input.Poison(i) {
			poison++
			require.Equal(t, []int64{1, 2, 3}, obs.of(r.input.Value(i)), "%s: released twice, rejected at its third delivery", r.input.Value(i))
		} else {
			require.Equal(t, []int64{1}, obs.of(r.input.Value(i)), "%s: not nacked", r.input.Value(i))
		}
	}
	require.Equal(t, n/every, poison)
	require.EqualValues(t, 2*n/every, is.in(func(m *inputMetrics) *counter { return m.released }))
	require.EqualValues(t, n/every, is.in(func(m *inputMetrics) *counter { return m.rejected }))
}

// TestCoordinatorMovesDuringTheRun moves every __transaction_state and
// __share_group_state partition to another node, over and over, while
// the pipeline runs: the output's and the acknowledger's transactions
// and the group's share state follow, and the result is exactly-once.
func TestCoordinatorMovesDuringTheRun(t *testing.T) {
	const n, every = 3000, 10
	c := newCluster(t, broker.Nodes(3), broker.TxnStatePartitions(3), broker.ShareStatePartitions(3))
	r := c.newRun(t, "moves", 3, n, every)
	yaml := strings.Replace(basicPipeline, "\n    - mapping: root = content()\n", dropPoison, 1)

	// The moves happen during the run because the run waits for them,
	// not because it happens to last long enough: the first output
	// transaction commits only once minMoves moves were made, and every
	// later one only after at least one more move since the commit before
	// it. (At full speed the whole run is a handful of transactions, over
	// in well under a second.)
	const minMoves = 7
	var moves atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	moved := make(chan struct{}, 1) // signalled after each move
	var atLastCommit atomic.Int64   // moves when the previous transaction committed
	hook := func(txnCtx context.Context) error {
		want := max(atLastCommit.Load()+1, minMoves)
		for moves.Load() < want {
			select {
			case <-moved:
			case <-txnCtx.Done():
				return fmt.Errorf("waiting for coordinator move %d: %w", want, txnCtx.Err())
			case <-ctx.Done():
				return fmt.Errorf("waiting for coordinator move %d: %w", want, ctx.Err())
			}
		}
		atLastCommit.Store(moves.Load())
		return nil
	}
	beforeCommitHook.Store(&hook)
	t.Cleanup(func() { beforeCommitHook.Store(nil) })
	began := time.Now()
	p := start(t, testEnv(t, &observed{}, nil), r.yaml(yaml))

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nodes := c.NodeIDs()
		for i := 0; ctx.Err() == nil; i++ {
			for _, topic := range []string{"__transaction_state", "__share_group_state"} {
				for part := int32(0); part < 3; part++ {
					lead, err := c.Leader(topic, part)
					if err != nil {
						continue // not created yet
					}
					to := nodes[(indexOf(nodes, lead)+1)%len(nodes)]
					if c.MoveLeader(topic, part, to) == nil {
						moves.Add(1)
						select {
						case moved <- struct{}{}:
						default:
						}
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(150 * time.Millisecond):
			}
		}
	}()
	r.waitAcknowledged(t, 3*time.Minute)
	cancel()
	wg.Wait()
	p.stop(t, 30*time.Second)
	res := r.verify(t, nil, time.Since(began))
	requireExactlyOnce(t, res)
	require.Equal(t, n/every, res.Rejected)
	require.GreaterOrEqual(t, moves.Load(), int64(minMoves), "coordinators moved during the run")
	t.Logf("%d coordinator moves", moves.Load())
}

func indexOf(ids []int32, id int32) int {
	for i, v := range ids {
		if v == id {
			return i
		}
	}
	return 0
}

// TestInDoubtCommitIsLearned loses every answer to the output's commits
// for longer than its commit timeout, once: the commit is in doubt, the
// output learns its outcome (it had committed) and the run is
// exactly-once.
func TestInDoubtCommitIsLearned(t *testing.T) {
	const n = 1500
	c := newCluster(t)
	r := c.newRun(t, "doubt", 3, n, 0)
	is := trackInstances(t)
	yaml := strings.Replace(basicPipeline, "    transactional_id: $OUTTXN\n", "    transactional_id: $OUTTXN\n    client_id: doubt-out\n    commit_timeout: 2s\n", 1)

	var commits atomic.Int64
	var windowEnd atomic.Int64 // unix nanos; 0 until the window opens
	stop := c.InjectFaults(func(_ int32, client string, req kmsg.Request) broker.FaultAction {
		end, ok := req.(*kmsg.EndTxnRequest)
		if client != "doubt-out" || !ok || !end.Commit {
			return broker.FaultAction{}
		}
		now := time.Now().UnixNano()
		// The window opens at the first commit: a run may have only a
		// few transactions (at full speed, one per input partition: a
		// fetch hands out the input producer's whole record batches), so
		// a later one, the third say, might never come.
		if commits.Add(1) == 1 {
			windowEnd.Store(now + int64(3*time.Second))
		}
		if we := windowEnd.Load(); we != 0 && now < we {
			return broker.FaultAction{Fault: broker.DropAnswer}
		}
		return broker.FaultAction{}
	})
	defer stop()
	began := time.Now()
	p := start(t, testEnv(t, &observed{}, nil), r.yaml(yaml))
	r.waitAcknowledged(t, 2*time.Minute)
	p.stop(t, 30*time.Second)
	requireExactlyOnce(t, r.verify(t, nil, time.Since(began)))
	require.GreaterOrEqual(t, is.out(func(m *outputMetrics) *counter { return m.inDoubt }), int64(1), "a commit was in doubt")
}

// TestLockExpiredInThePipeline holds two messages in a processor past
// their lock (2s). The consumer renews the locks of the records it holds,
// so nothing is delivered again: no message is skipped and no transaction
// aborts. Against brokers that cannot renew (before KIP-1222), the group
// delivers their records, and those of the same fetch, again while the old
// messages are still in the pipeline; nothing of the old deliveries is
// written (the output skips messages whose delivery was superseded, and a
// transaction meeting an expired lock aborts), the new deliveries are
// copied. Either way the result is exactly-once.
func TestLockExpiredInThePipeline(t *testing.T) {
	for _, renew := range []bool{true, false} {
		name := map[bool]string{true: "renewed", false: "without_renew"}[renew]
		t.Run(name, func(t *testing.T) {
			const n = 300
			c := newCluster(t)
			if !renew {
				bundled.WithoutRenew(t, c.Cluster)
			}
			r := c.newRun(t, "expiry", 1, n, 0)
			is := trackInstances(t)
			slow := map[string]bool{r.input.Value(5): true, r.input.Value(150): true}
			env := testEnvSlow(t, &observed{}, nil, func(v string, d int64) time.Duration {
				if slow[v] && d == 1 {
					return 3 * time.Second
				}
				return 0
			})
			yaml := strings.Replace(basicPipeline, "    auto_offset_reset: earliest\n", "    auto_offset_reset: earliest\n    record_lock_duration: 2s\n", 1)
			yaml = strings.Replace(yaml, "    - mapping: root = content()\n", "    - test_slow: {}\n    - mapping: root = content()\n", 1)
			began := time.Now()
			p := start(t, env, r.yaml(yaml))
			r.waitAcknowledged(t, 2*time.Minute)
			p.stop(t, 30*time.Second)
			requireExactlyOnce(t, r.verify(t, nil, time.Since(began)))
			skipped := is.out(func(m *outputMetrics) *counter { return m.skipped })
			aborted := is.out(func(m *outputMetrics) *counter { return m.aborted })
			t.Logf("skipped %d messages, aborted %d transactions", skipped, aborted)
			if renew {
				require.Zero(t, skipped+aborted, "the held records' locks were renewed: nothing was delivered again")
				return
			}
			require.Positive(t, skipped+aborted, "the late deliveries were skipped or their transaction aborted")
		})
	}
}
