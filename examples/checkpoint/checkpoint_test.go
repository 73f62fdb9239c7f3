package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/eos"
)

// TestCheckpointExactlyOnceWithFailedCheckpoints runs the checkpointing
// pipeline of examples/checkpoint, shortened, on a bundled cluster: source
// readers stage their acknowledgements per checkpoint and commit them
// through the acknowledger when the checkpoint completes. Checkpoints fail
// on purpose, a reader stalls past its locks so that it declines one, and
// some checkpoints take longer than the lock duration. The committed sink
// must hold every input exactly once, every input must be acknowledged,
// and no record may be delivered again while its checkpoint is staged.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheckpointExactlyOnceWithFailedCheckpoints(t *testing.T) {
	c, err := broker.NewCluster(broker.Nodes(3))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const lock = 2 * time.Second
	sum, err := eos.RunCheckpoint(ctx, eos.CheckpointConfig{
		Seeds:         c.Bootstrap(),
		Input:         "checkpoint-input",
		Group:         "checkpoint",
		Records:       20000,
		Readers:       3,
		Interval:      50 * time.Millisecond,
		FailEvery:     4,
		LongEvery:     3,
		SlowSnapshots: 1,
		LockDuration:  lock,
		MaxDuration:   3 * time.Minute,
	}, newReader)
	require.NoError(t, err)
	var table bytes.Buffer
	require.NoError(t, sum.WriteTable(&table))
	t.Logf("checkpoint run:\n%s", table.String())

	require.Equal(t, 20000, sum.Inputs)
	require.Zero(t, sum.Duplicates, "duplicates, e.g. %v", sum.DuplicateSample)
	require.Zero(t, sum.Missing, "missing, e.g. %v", sum.MissingSample)
	require.Zero(t, sum.Unknown)
	require.Zero(t, sum.ArchivedByFailure+sum.ArchivedOnPurpose, "bounded failures keep every record under the delivery limit")
	require.Zero(t, sum.Unacknowledged)
	require.Equal(t, 20000, sum.Outputs)

	require.Positive(t, sum.FailedOnPurpose, "checkpoints failed on purpose")
	require.Positive(t, sum.DeclinedByReader, "a stalled reader's staging fails and it declines")
	require.Equal(t, int64(1), sum.Faults["slow_snapshot"])
	require.Positive(t, sum.Redelivered, "the records of failed checkpoints come back")
	require.Positive(t, sum.LongCheckpoints, "checkpoints held past the lock duration")
	require.Positive(t, sum.RecordsHeldPastLock)
	require.Zero(t, sum.StagedRedelivered, "staged locks are renewed until the checkpoint ends")
	require.True(t, sum.OK)
	require.Equal(t, "exactly-once: OK", sum.Line())
}

// TestCheckpointFailsFastWithoutKIP1289 runs the command against a broker
// without the KIP-1289 APIs: the first commit or release of a checkpoint
// fails with ErrShareAcksUnsupported (ErrFatal), so the run stops at once
// with the SDK's message and exit 2, long before -max-duration.
func TestCheckpointFailsFastWithoutKIP1289(t *testing.T) {
	c, err := broker.NewCluster(broker.Nodes(1), broker.ShareTxnAPIs(false))
	require.NoError(t, err)
	defer c.Close()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := eos.Main(command(), []string{"-brokers", strings.Join(c.Bootstrap(), ","), "-records", "1000", "-lock-duration", "2s", "-max-duration", "2m"}, &stdout, &stderr)
	t.Logf("exit %d after %.1fs:\n%s", code, time.Since(start).Seconds(), stderr.String())
	require.Equal(t, eos.ExitError, code)
	require.Empty(t, stdout.String())
	require.Contains(t, stderr.String(), "checkpoint: reader ")
	require.Contains(t, stderr.String(), "broker does not support transactional share acknowledgements (KIP-1289)")
}

// TestCheckpointRejectsPoisonOnPurpose: poison inputs are staged with
// REJECT, archived, have no output, and the verdict counts them.
func TestCheckpointRejectsPoisonOnPurpose(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := eos.Main(command(), []string{"-records", "3000", "-reject-every", "5", "-json", "-checkpoint-interval", "50ms"}, &stdout, &stderr)
	t.Logf("stderr:\n%s", stderr.String())
	require.Equal(t, eos.ExitOK, code)
	var sum eos.CheckpointSummary
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &sum), stdout.String())
	require.Equal(t, eos.VerdictOK, sum.Verdict)
	require.Equal(t, 600, sum.Rejected)
	require.Equal(t, 2400, sum.Outputs)
	require.Zero(t, sum.RejectedOutput)
	require.Contains(t, stderr.String(), "exactly-once: OK (600 rejected on purpose)")
}

// TestTinyCheckpointIntervalMakesProgress: a checkpoint interval far
// shorter than a snapshot (1ns) must still process the input. Before, the
// coordinator triggered a barrier on every tick whatever the readers had
// answered; barriers piled up in their mailboxes faster than they were
// handled, no reader got to poll, and only -max-duration ended the run
// (INCOMPLETE, nothing processed). -max-duration is the hang guard here:
// its expiry (exit 3) is the failure.
func TestTinyCheckpointIntervalMakesProgress(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := eos.Main(command(), []string{"-records", "200", "-consumers", "2", "-checkpoint-interval", "1ns", "-max-duration", "2m"}, &stdout, &stderr)
	t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	require.Equal(t, eos.ExitOK, code)
	require.Contains(t, stdout.String(), "exactly-once: OK")
}
