package main

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/eos"
)

// pipelineRecords is the input size of each exactly-once run: CI runs the
// shortened matrix (go test -short), a full run ten times more.
func pipelineRecords() int {
	if testing.Short() {
		return 5000
	}
	return 50000
}

// pipelineLogger logs warnings, or everything with KSHARE_TEST_LOG set.
func pipelineLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("KSHARE_TEST_LOG") != "" {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// pipelineCluster starts a 3-node bundled cluster that the test closes.
func pipelineCluster(t *testing.T, opts ...broker.Opt) *broker.Cluster {
	t.Helper()
	logger := pipelineLogger().With("component", "broker")
	c, err := broker.NewCluster(append([]broker.Opt{broker.Nodes(3), broker.Logger(logger)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// runPipeline runs the consume-transform-produce pipeline on a fresh 3-node
// bundled cluster and returns its summary.
func runPipeline(t *testing.T, faults eos.Faults, shape pipelineShape, opts ...broker.Opt) eos.Summary {
	t.Helper()
	return runPipelineOn(t, pipelineCluster(t, opts...), faults, shape)
}

// runPipelineOn runs the pipeline (topics "input" and "output", share
// group "pipeline") on a running cluster and returns its summary.
func runPipelineOn(t *testing.T, c *broker.Cluster, faults eos.Faults, shape pipelineShape) eos.Summary {
	t.Helper()
	logger := pipelineLogger()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	records := shape.records
	if records == 0 {
		records = pipelineRecords()
	}
	sum, err := eos.Run(ctx, eos.Config{
		Seeds:        c.Bootstrap(),
		Input:        "input",
		Output:       "output",
		Group:        "pipeline",
		Records:      records,
		Workers:      4,
		TxnSize:      shape.txnSize,
		TxnTimeout:   10 * time.Second,
		LockDuration: 2 * time.Second,
		TxnHold:      shape.hold,
		Faults:       faults,
		MaxDuration:  3 * time.Minute,
		Logger:       logger,
	}, runWorker)
	require.NoError(t, err)
	var table bytesBuffer
	require.NoError(t, sum.WriteTable(&table))
	t.Logf("\n%s", table.String())
	return sum
}

// pipelineShape sets how big transactions are and how long each is held
// open before it commits, and how many records the run has (0:
// pipelineRecords).
type pipelineShape struct {
	txnSize int
	hold    time.Duration
	records int
}

var (
	quickTxns = pipelineShape{txnSize: 200}
	// slowTxns keep transactions open long enough for late markers and
	// coordinator moves to land in the middle of them.
	slowTxns = pipelineShape{txnSize: 50, hold: 20 * time.Millisecond}
)

type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
func (w *bytesBuffer) String() string              { return string(w.b) }

// requireExactlyOnce asserts the verdict OK: zero duplicates, zero
// missing, every input acknowledged, nothing archived after a failure, and
// that the named faults actually fired. Bounded faults never bring a
// record to the delivery limit; runs that abort transactions on purpose
// may archive a few (a record whose every delivery lands in an aborted
// transaction), and the checker must account for each of them as archived
// on purpose.
func requireExactlyOnce(t *testing.T, sum eos.Summary, abortsOnPurpose bool, faults ...string) {
	t.Helper()
	require.Zero(t, sum.Duplicates, "duplicates: %v", sum.DuplicateSample)
	require.Zero(t, sum.Missing, "missing: %v", sum.MissingSample)
	require.Zero(t, sum.Unknown)
	require.Zero(t, sum.ArchivedByFailure, "bounded faults must not reach the delivery limit")
	if !abortsOnPurpose {
		require.Zero(t, sum.ArchivedOnPurpose)
	}
	require.Zero(t, sum.Unacknowledged)
	require.Equal(t, sum.Inputs, sum.Outputs+sum.ArchivedOnPurpose)
	require.True(t, sum.OK, sum.Line())
	require.Equal(t, eos.ExitOK, sum.ExitCode())
	for _, f := range faults {
		require.Positive(t, sum.Faults[f], "fault %s never fired", f)
	}
}

// TestExactlyOnceFaultMatrix runs the pipeline under each fault alone and
// all together, and under the two upstream faults the broker can replay:
// late marker copies (KIP-1228's case) and a stale coordinator
// (KAFKA-21181). Every run must be exactly-once.
func TestExactlyOnceFaultMatrix(t *testing.T) {
	all := eos.Faults{KillWorker: true, CoordinatorMoves: true, Zombie: true, SlowWorker: true}
	cases := []struct {
		name   string
		faults eos.Faults
		opts   []broker.Opt
		shape  pipelineShape
		fired  []string
	}{
		{name: "no faults"},
		{name: "worker killed mid-transaction", faults: eos.Faults{KillWorker: true}, fired: []string{"worker_killed_mid_transaction"}},
		{name: "coordinator moves", faults: eos.Faults{CoordinatorMoves: true}, fired: []string{"coordinator_moves"}},
		{name: "zombie worker", faults: eos.Faults{Zombie: true}, fired: []string{"zombie_instance"}},
		{name: "slow worker", faults: eos.Faults{SlowWorker: true}, fired: []string{"slow_worker_lock_expired"}},
		{name: "deliberate aborts", faults: eos.Faults{AbortEvery: 3}, fired: []string{"deliberate_abort"}},
		{name: "all together", faults: all, fired: []string{"worker_killed_mid_transaction", "coordinator_moves", "zombie_instance", "slow_worker_lock_expired"}},
		{
			name:   "late marker copies",
			faults: eos.Faults{AbortEvery: 2, CoordinatorMoves: true},
			opts:   []broker.Opt{broker.LateMarkerCopies(5 * time.Millisecond)},
			shape:  slowTxns,
			fired:  []string{"deliberate_abort"},
		},
		{
			name:   "legacy stale coordinator",
			faults: eos.Faults{CoordinatorMoves: true, MaxPerKind: 10},
			opts:   []broker.Opt{broker.LegacyStaleCoordinator(500 * time.Millisecond)},
			shape:  slowTxns,
			fired:  []string{"coordinator_moves"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.shape.txnSize == 0 {
				tc.shape = quickTxns
			}
			sum := runPipeline(t, tc.faults, tc.shape, tc.opts...)
			requireExactlyOnce(t, sum, tc.faults.AbortEvery > 0, tc.fired...)
		})
	}
}

// TestCheckerDetectsLegacyMarkerViolation proves the checker and KIP-1228
// together: with late marker copies, transactions held open long enough
// for a late COMMIT marker of transaction N to meet transaction N+1, and
// every second transaction aborted on purpose, the legacy marker rule lets
// the late marker commit what N+1 wrote so far, and N+1's abort cannot take
// it back: its inputs are redelivered and processed again, so the output
// holds duplicates. The checker must see it. The same run with the strict
// rule is exactly-once (the "late marker copies" case of the matrix).
func TestCheckerDetectsLegacyMarkerViolation(t *testing.T) {
	// Each late copy is sent the moment the producer's next transaction
	// writes to one of its partitions, so that it meets that transaction
	// whatever the machine's speed (copies sent a fixed delay late met
	// one only when the timing allowed, and a run could pass without a
	// violation).
	sum := runPipeline(t, eos.Faults{AbortEvery: 2}, heldTxns,
		broker.LateMarkerCopiesOnNextTransaction(lateCopyBound),
		broker.LegacyMarkerValidation(true),
	)
	require.False(t, sum.OK, "the legacy marker rule must break exactly-once here")
	require.Positive(t, sum.Duplicates+sum.Missing, "the checker must report the violation")
	require.Contains(t, sum.Line(), "exactly-once: FAILED")
	require.Equal(t, eos.ExitFailed, sum.ExitCode())
	t.Logf("violation detected: %s", sum.Line())
}
