package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/internal/eos"
)

// deadLetterRun runs the README's loop with rejects and a dead-letter
// topic under the faults that end transactions every way (deliberate
// aborts, kills, zombies, stalls), with loop as the worker.
func deadLetterRun(t *testing.T, loop eos.WorkerFunc) eos.Summary {
	t.Helper()
	c := pipelineCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sum, err := eos.Run(ctx, eos.Config{
		Seeds: c.Bootstrap(), Input: "input", Output: "output", Group: "pipeline",
		DeadLetterTopic: "dlq.pipeline",
		Records:         4000, RejectEvery: 7, Workers: 4, TxnSize: 200,
		TxnTimeout:   10 * time.Second,
		LockDuration: 2 * time.Second,
		Faults:       eos.Faults{KillWorker: true, Zombie: true, SlowWorker: true, AbortEvery: 3},
		MaxDuration:  4 * time.Minute,
		Logger:       pipelineLogger(),
	}, loop)
	require.NoError(t, err)
	t.Log(sum.Line())
	return sum
}

// TestDeadLetterCopiesCommitWithTheirReject: every rejected input has
// exactly one committed dead-letter copy, however its transactions
// ended before (a third of them aborted on purpose), and no other input
// has one.
func TestDeadLetterCopiesCommitWithTheirReject(t *testing.T) {
	sum := deadLetterRun(t, runWorker)
	require.True(t, sum.OK, sum.Line())
	require.Equal(t, "dlq.pipeline", sum.DeadLetterTopic)
	require.Equal(t, sum.Rejected, sum.DeadLetters, "one copy per rejected input")
	require.Positive(t, sum.DeadLetters)
	require.Zero(t, sum.DeadLetterMissing)
	require.Zero(t, sum.DeadLetterDuplicates)
	require.Zero(t, sum.DeadLetterWrong)
	require.Contains(t, sum.Line(), "dead-lettered")
	require.Positive(t, sum.Faults["deliberate_abort"])
}

// TestDeadLetterMissingCopiesFailTheVerdict is the failure branch: a
// worker that rejects without writing the copy leaves rejected inputs
// without one, and the verdict is FAILED.
func TestDeadLetterMissingCopiesFailTheVerdict(t *testing.T) {
	sum := deadLetterRun(t, func(ctx context.Context, w eos.Worker) error {
		if w.Index == 0 {
			w.DeadLetter = ""
		}
		return runWorker(ctx, w)
	})
	require.False(t, sum.OK, sum.Line())
	require.Equal(t, eos.VerdictFailed, sum.Verdict)
	require.Positive(t, sum.DeadLetterMissing)
	require.Contains(t, sum.Reason, "rejected inputs without a dead-letter copy")
}
