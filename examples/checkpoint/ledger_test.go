package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/eos"
)

// TestCheckpointLedgerWithoutKIP1289 runs the checkpoint-driven source
// with a claim ledger on a bundled cluster without the KIP-1289 APIs,
// with failed, long and slow checkpoints: exactly-once OK. Without
// -ledger, the command is refused and names it.
func TestCheckpointLedgerWithoutKIP1289(t *testing.T) {
	c, err := broker.NewCluster(broker.Nodes(3), broker.ShareTxnAPIs(false))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sum, err := eos.RunCheckpoint(ctx, eos.CheckpointConfig{
		Seeds: c.Bootstrap(), Input: "checkpoint-input", Group: "checkpoint",
		Ledger:  "claims",
		Records: 10000, RejectEvery: 9, Readers: 3,
		Interval: 50 * time.Millisecond, FailEvery: 4, LongEvery: 3, SlowSnapshots: 1,
		LockDuration: 2 * time.Second,
		MaxDuration:  3 * time.Minute,
	}, newReader)
	require.NoError(t, err)
	t.Log(sum.Line())
	require.True(t, sum.OK, sum.Line())
	require.Zero(t, sum.Duplicates, "duplicates, e.g. %v", sum.DuplicateSample)
	require.Zero(t, sum.Missing, "missing, e.g. %v", sum.MissingSample)
	require.Zero(t, sum.Unacknowledged)
	require.Zero(t, sum.ArchivedByFailure)
	require.Equal(t, 10000/9, sum.Rejected)
	require.Equal(t, 10000-10000/9, sum.Outputs)
	require.Positive(t, sum.FailedOnPurpose, "checkpoints failed on purpose")
	require.Positive(t, sum.LongCheckpoints, "checkpoints held past the lock duration")

	var stdout, stderr bytes.Buffer
	code := eos.Main(command(), []string{"-brokers", strings.Join(c.Bootstrap(), ","), "-records", "100", "-lock-duration", "2s", "-faults=false"}, &stdout, &stderr)
	require.Equal(t, eos.ExitError, code)
	require.Contains(t, stderr.String(), "run with -ledger TOPIC")
}
