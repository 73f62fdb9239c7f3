package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
// it processed, with verdict INCOMPLETE and exit 3. The limit counts the
// set-up and the input write too, so on a slow machine the stop may come
// before the pipeline runs ("while setting up"); either way the verdict is
// the same. 50,000 inputs whose transactions each wait 100 ms cannot be
// done in 2 s by 4 workers.
func TestMaxDurationIsIncomplete(t *testing.T) {
	code, stdout, _ := runCtp(t, "-records", "50000", "-txn-size", "100", "-txn-hold", "100ms", "-faults=false", "-max-duration", "2s")
	require.Equal(t, eos.ExitIncomplete, code)
	require.Contains(t, stdout, "exactly-once: INCOMPLETE (stopped by max duration 2s ")
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
	// The share state was still followed after the run stopped: its
	// reader outlives the run (it used to stop with it, and the
	// verification waited for it until its own timeout).
	require.Regexp(t, `archived inputs known from +broker\n`, stdout.String())
}

// watchWriter is the stderr of an in-process run: it calls on once, when
// what has been written so far contains s, from the run's own goroutine
// (the run waits for on).
type watchWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	s    string
	on   func()
	done bool
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.s) {
		w.done = true
		w.on()
	}
	return n, err
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// mainWithin runs the command in this process with stderr w and returns
// its exit code and stdout, failing the test if it has not ended within
// guard: a hang guard only, far above what the run needs.
func mainWithin(t *testing.T, guard time.Duration, w io.Writer, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- eos.Main(command(), args, &out, w) }()
	select {
	case code := <-done:
		t.Logf("ctp %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), w)
		return code, out.String()
	case <-time.After(guard):
		t.Fatalf("ctp %s still runs after %v (hang)\nstderr:\n%s", strings.Join(args, " "), guard, w)
		return 0, ""
	}
}

// TestMaxDurationBoundsAWriteToADeadCluster: the cluster dies as the run
// starts writing its input. -max-duration bounds the whole run, setup and
// input included: the run stops when it passes and reports INCOMPLETE,
// with one JSON document on stdout. Before, the input producer retried
// the dead cluster forever.
func TestMaxDurationBoundsAWriteToADeadCluster(t *testing.T) {
	c, err := broker.NewCluster(broker.Nodes(1))
	require.NoError(t, err)
	defer c.Close()
	stderr := &watchWriter{s: `msg="writing input"`, on: func() { _ = c.Close() }}
	code, stdout := mainWithin(t, 2*time.Minute, stderr,
		"-brokers", strings.Join(c.Bootstrap(), ","), "-records", "200000", "-max-duration", "2s", "-log-level", "info", "-json")
	require.Equal(t, eos.ExitIncomplete, code)
	dec := json.NewDecoder(strings.NewReader(stdout))
	var sum eos.Summary
	require.NoError(t, dec.Decode(&sum), stdout)
	require.False(t, dec.More(), "stdout holds one JSON document and nothing else")
	require.Equal(t, eos.VerdictIncomplete, sum.Verdict)
	require.Equal(t, "max duration 2s while setting up", sum.StoppedBy)
	require.Equal(t, 200000, sum.Inputs)
	require.Zero(t, sum.Processed)
}

// TestInterruptWhileSettingUpReports: Ctrl-C right after the start, while
// the run sets up and writes its input, still ends with the table and
// the INCOMPLETE verdict on stdout (exit 3), as a later Ctrl-C does. The
// signal goes to this process while eos.Main watches for it (it is sent
// from the run's own stderr write of the header line).
func TestInterruptWhileSettingUpReports(t *testing.T) {
	stderr := &watchWriter{s: "ctp: 200000 records", on: func() {
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	}}
	code, stdout := mainWithin(t, 2*time.Minute, stderr, "-records", "200000")
	require.Equal(t, eos.ExitIncomplete, code)
	require.Regexp(t, `(?m)^exactly-once: INCOMPLETE \(stopped by Ctrl-C \(SIGINT\) while setting up after \d+\.\ds: 0 of 200000 inputs processed`, stdout)
	require.Contains(t, stdout, "inputs processed (output or rejected)")
}
