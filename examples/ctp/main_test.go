package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/eos"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runCtp runs the command in this process as "ctp args..." and returns
// its exit code, stdout and stderr.
func runCtp(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	start := time.Now()
	code = eos.Main(command(), args, &out, &errOut)
	t.Logf("ctp %s: exit %d after %.1fs\nstderr:\n%s", strings.Join(args, " "), code, time.Since(start).Seconds(), errOut.String())
	return code, out.String(), errOut.String()
}

// TestFailsFastWithoutKIP1289 runs the pipeline against a broker without
// the KIP-1289 APIs: the SDK's first SendShareAcksToTransaction fails with
// ErrShareAcksUnsupported (ErrFatal), which no injected fault explains, so
// the run stops at once with the SDK's message and exit 2, long before
// -max-duration, instead of archiving its input and calling that OK.
func TestFailsFastWithoutKIP1289(t *testing.T) {
	c, err := broker.NewCluster(broker.Nodes(1), broker.ShareTxnAPIs(false))
	require.NoError(t, err)
	defer c.Close()
	seeds := strings.Join(c.Bootstrap(), ",")

	code, stdout, stderr := runCtp(t, "-brokers", seeds, "-records", "1000", "-lock-duration", "5s", "-max-duration", "2m", "-faults=false")
	require.Equal(t, eos.ExitError, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "ctp: worker ")
	require.Contains(t, stderr, "broker does not support transactional share acknowledgements (KIP-1289)")
	require.NotContains(t, stderr, "exactly-once:")

	code, stdout, _ = runCtp(t, "-brokers", seeds, "-records", "100", "-lock-duration", "5s", "-max-duration", "2m", "-json")
	require.Equal(t, eos.ExitError, code, "with faults too: no fault explains it")
	var doc struct {
		Verdict string `json:"verdict"`
		OK      bool   `json:"ok"`
		Error   string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc), stdout)
	require.Equal(t, eos.VerdictError, doc.Verdict)
	require.False(t, doc.OK)
	require.Contains(t, doc.Error, "KIP-1289")
}

// TestJSONReport: with -json, stdout is one JSON document carrying the
// verdict, and the human lines go to stderr.
func TestJSONReport(t *testing.T) {
	code, stdout, stderr := runCtp(t, "-records", "3000", "-reject-every", "10", "-json")
	require.Equal(t, eos.ExitOK, code)
	dec := json.NewDecoder(strings.NewReader(stdout))
	var sum eos.Summary
	require.NoError(t, dec.Decode(&sum), stdout)
	_, err := dec.Token()
	require.ErrorIs(t, err, io.EOF, "stdout holds one JSON document and nothing else")
	require.Equal(t, eos.VerdictOK, sum.Verdict)
	require.True(t, sum.OK)
	require.Equal(t, 3000, sum.Inputs)
	require.Equal(t, 300, sum.Rejected, "every 10th input is poison and rejected on purpose")
	require.Equal(t, 2700, sum.Outputs)
	require.Positive(t, sum.Faults["worker_killed_mid_transaction"])
	require.Contains(t, stderr, "exactly-once: OK (300 rejected on purpose)")
	require.Contains(t, stderr, "ctp: 3000 records, 4 workers")
}

// TestMaxDurationIsIncomplete: a run stopped by -max-duration reports what
// it processed, with verdict INCOMPLETE and exit 3.
func TestMaxDurationIsIncomplete(t *testing.T) {
	code, stdout, _ := runCtp(t, "-records", "50000", "-txn-size", "100", "-txn-hold", "100ms", "-faults=false", "-max-duration", "2s")
	require.Equal(t, eos.ExitIncomplete, code)
	require.Contains(t, stdout, "exactly-once: INCOMPLETE (stopped by max duration 2s after ")
	require.Contains(t, stdout, "none lost or duplicated so far")
	require.Contains(t, stdout, "stopped by")
	require.NotContains(t, stdout, "FAILED")
}

// TestInterruptIsIncomplete runs the command as a process and interrupts
// it: it prints a partial report with verdict INCOMPLETE and exits 3.
func TestInterruptIsIncomplete(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ctp")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-records", "50000", "-txn-size", "100", "-txn-hold", "100ms", "-faults=false")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stderr)
	var seen []string
	for lines.Scan() {
		seen = append(seen, lines.Text())
		if strings.Contains(lines.Text(), " output ") {
			break // the pipeline runs
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	for lines.Scan() {
		seen = append(seen, lines.Text())
	}
	err = cmd.Wait()
	t.Logf("stderr:\n%s\nstdout:\n%s", strings.Join(seen, "\n"), stdout.String())
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, eos.ExitIncomplete, exit.ExitCode())
	require.Contains(t, stdout.String(), "exactly-once: INCOMPLETE (stopped by Ctrl-C (SIGINT) after ")
	require.Contains(t, stdout.String(), "inputs processed")
}
