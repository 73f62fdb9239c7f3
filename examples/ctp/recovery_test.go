package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/internal/eos"
)

// TestAbortBeforeStagingReleasesAtOnce: a transaction that aborts before
// its acknowledgements were staged (here every second one, on purpose, in
// BeforeCommit) gives its records back at once, through Release: with a
// lock of an hour the run could otherwise not finish within the test, and
// the aborted records would sit locked by a worker that is polling on.
// (Before, they came back only when the lock ran out: -abort-every 2 with
// a 5s lock took 226s against 11s without aborts.)
func TestAbortBeforeStagingReleasesAtOnce(t *testing.T) {
	c := pipelineCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := eos.Run(ctx, eos.Config{
		Seeds: c.Bootstrap(), Input: "input", Output: "output", Group: "pipeline",
		Records: 3000, Workers: 4, TxnSize: 100,
		LockDuration: time.Hour,
		Faults:       eos.Faults{AbortEvery: 2},
		MaxDuration:  90 * time.Second,
		Logger:       pipelineLogger(),
	}, runWorker)
	require.NoError(t, err)
	require.Empty(t, sum.StoppedBy, "the run stalled on records an aborted transaction left locked: %s", sum.Line())
	require.True(t, sum.OK, sum.Line())
	require.Positive(t, sum.Faults["deliberate_abort"])
}

// TestSlowTransactionIsRedoneNotFatal: a transaction that outlasts its
// transaction timeout (a worker stalled past its lock, longer than the
// timeout) fails abortable, and the abort that follows gets a context of
// its own, so the worker goes on: the transaction is redone. (Before, the
// abort reused the transaction's expired context and the worker stopped:
// exit 2.)
func TestSlowTransactionIsRedoneNotFatal(t *testing.T) {
	c := pipelineCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum, err := eos.Run(ctx, eos.Config{
		Seeds: c.Bootstrap(), Input: "input", Output: "output", Group: "pipeline",
		Records: 2000, Workers: 2, TxnSize: 100,
		TxnTimeout:   2 * time.Second,
		LockDuration: 3 * time.Second, // the slow worker stalls 4s: past the timeout too
		Faults:       eos.Faults{SlowWorker: true, MaxPerKind: 1},
		MaxDuration:  2 * time.Minute,
		Logger:       pipelineLogger(),
	}, runWorker)
	require.NoError(t, err, "a transaction past its timeout must be aborted and redone")
	require.True(t, sum.OK, sum.Line())
	require.EqualValues(t, 1, sum.Faults["slow_worker_lock_expired"])
}
