package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/eos"
	"github.com/kshare-go/kshare/internal/txn"
)

// TestLedgerPipelineWithoutKIP1289 runs the README's loop with a claim
// ledger on a bundled cluster without the KIP-1289 APIs (as Apache Kafka
// is released), under every fault the command injects, and with
// deliberate aborts and rejects, and the faults of the ledger's race
// (workers killed between their commit and their acknowledgements, share
// sessions dropped in an open transaction, workers stopped past their
// locks after writing their claims): the verdict is exactly-once OK.
// These leave records whose output committed and whose acknowledgement
// did not reach the leader, or whose claims were written in a transaction
// that must not commit; the ledger settles the first and the renewal
// before the commit refuses the second.
func TestLedgerPipelineWithoutKIP1289(t *testing.T) {
	c := pipelineCluster(t, broker.ShareTxnAPIs(false))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sum, err := eos.Run(ctx, eos.Config{
		Seeds: c.Bootstrap(), Input: "input", Output: "output", Group: "pipeline",
		Ledger:          "claims",
		DeadLetterTopic: "dlq.pipeline",
		Records:         6000, RejectEvery: 7, Workers: 4, TxnSize: 200,
		TxnTimeout:   10 * time.Second,
		LockDuration: 2 * time.Second,
		Faults: eos.Faults{KillWorker: true, Zombie: true, SlowWorker: true, AbortEvery: 3,
			KillAfterCommit: true, DropSession: true, PausePastLock: true},
		MaxDuration: 4 * time.Minute,
		Logger:      pipelineLogger(),
	}, runWorker)
	require.NoError(t, err)
	t.Log(sum.Line())
	require.True(t, sum.OK, sum.Line())
	require.Equal(t, eos.ExitOK, sum.ExitCode())
	require.Zero(t, sum.Duplicates, "duplicates: %v", sum.DuplicateSample)
	require.Zero(t, sum.Missing, "missing: %v", sum.MissingSample)
	require.Zero(t, sum.Unknown)
	require.Zero(t, sum.Unacknowledged)
	require.Zero(t, sum.ArchivedByFailure)
	require.Zero(t, sum.RejectedOutput)
	require.Equal(t, 6000/7, sum.Rejected)
	require.Equal(t, sum.Inputs, sum.Outputs+sum.Rejected+sum.ArchivedOnPurpose)
	require.Zero(t, sum.StaleCommits)
	require.Equal(t, sum.Rejected, sum.DeadLetters, "one dead-letter copy per rejected input")
	for _, f := range []string{"worker_killed_mid_transaction", "zombie_instance", "slow_worker_lock_expired", "deliberate_abort",
		"worker_killed_after_commit", "share_session_dropped",
		"worker_stopped_past_lock_before_claims", "worker_stopped_past_lock_after_claims"} {
		require.Positive(t, sum.Faults[f], "fault %s never fired", f)
	}
}

// TestLedgerStaleCommitFailsTheVerdict is the failure branch of the
// pause fault: with the renewal before EndTxn skipped, a worker stopped
// past its locks commits what another member has been handed since, and
// the verdict is FAILED, counting the commits that the renewal refuses.
func TestLedgerStaleCommitFailsTheVerdict(t *testing.T) {
	c := pipelineCluster(t, broker.ShareTxnAPIs(false))
	txn.SkipLedgerRenewal.Store(true)
	defer txn.SkipLedgerRenewal.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sum, err := eos.Run(ctx, eos.Config{
		Seeds: c.Bootstrap(), Input: "input", Output: "output", Group: "pipeline",
		Ledger:  "claims",
		Records: 3000, Workers: 4, TxnSize: 200,
		TxnTimeout:   10 * time.Second,
		LockDuration: 2 * time.Second,
		Faults:       eos.Faults{PausePastLock: true},
		MaxDuration:  4 * time.Minute,
		Logger:       pipelineLogger(),
	}, runWorker)
	require.NoError(t, err)
	t.Log(sum.Line())
	require.False(t, sum.OK, sum.Line())
	require.Equal(t, eos.VerdictFailed, sum.Verdict)
	require.Equal(t, eos.ExitFailed, sum.ExitCode())
	require.Positive(t, sum.StaleCommits)
	require.Contains(t, sum.Reason, "commits by a worker stopped past its locks")
	require.Positive(t, sum.Faults["worker_stopped_past_lock_before_claims"])
}

// TestLedgerFlagOnTheCommandLine: without -ledger, a cluster without
// KIP-1289 is refused at once with a message that names -ledger; with it,
// the same command ends exactly-once: OK.
func TestLedgerFlagOnTheCommandLine(t *testing.T) {
	c, err := broker.NewCluster(broker.Nodes(1), broker.ShareTxnAPIs(false))
	require.NoError(t, err)
	defer c.Close()
	seeds := strings.Join(c.Bootstrap(), ",")

	code, _, stderr := runCtp(t, "-brokers", seeds, "-records", "500", "-lock-duration", "5s", "-faults=false")
	require.Equal(t, eos.ExitError, code)
	require.Contains(t, stderr, "run with -ledger TOPIC")

	code, stdout, _ := runCtp(t, "-brokers", seeds, "-records", "2000", "-lock-duration", "5s", "-faults=false", "-ledger", "claims")
	require.Equal(t, eos.ExitOK, code, stdout)
	require.Contains(t, stdout, "exactly-once: OK")
}
