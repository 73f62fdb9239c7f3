package realkafka_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kshare-go/kshare/integration/kafkatest"
	"github.com/kshare-go/kshare/internal/testkit"
)

// TestExamplesFailFastOnRealKafka runs both example commands as a user
// would against Apache Kafka, which lacks KIP-1289: each must stop as soon
// as its first transaction tries to commit, with exit 2 and the SDK's
// message naming KIP-1289 on stderr, long before -max-duration, instead of
// retrying forever or archiving its input and calling that a success.
func TestExamplesFailFastOnRealKafka(t *testing.T) {
	seeds := strings.Join(kafkatest.Bootstrap(t), ",")
	for _, example := range []string{"ctp", "checkpoint"} {
		t.Run(example, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), example)
			out, err := exec.Command("go", "build", "-o", bin, "../../examples/"+example).CombinedOutput()
			if err != nil {
				t.Fatalf("go build: %v\n%s", err, out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-brokers", seeds, "-records", "2000", "-max-duration", "90s")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			err = cmd.Run()
			t.Logf("%s exited after %.1fs: %v\nstderr:\n%s", example, time.Since(start).Seconds(), err, stderr.String())
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("want exit status 2, got %v", err)
			}
			if !strings.Contains(stderr.String(), "does not support transactional share acknowledgements (KIP-1289)") {
				t.Error("stderr does not carry the SDK's KIP-1289 message")
			}
			if !strings.Contains(stderr.String(), "run with -ledger TOPIC") {
				t.Error("stderr does not name -ledger, the way to run on this cluster")
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout must stay empty, got %q", stdout.String())
			}
		})
	}
}

// TestExamplesWithLedgerOnRealKafka runs both example commands with a
// claim ledger against the two-node Apache Kafka, with every fault they
// inject (workers killed mid-transaction, coordinator moves, zombies,
// workers stalled past their locks; failed, long and slow checkpoints),
// for ctp also the faults of the ledger's race (a worker killed between
// its commit and its acknowledgements, a share consumer whose
// connections and sessions drop in an open transaction, a worker stopped
// past its locks before and after writing its claims), on input, output
// and ledger topics with two replicas and 3s locks (so that a stopped
// worker's locks run out within its transaction timeout, and the renewal,
// not the timeout, is what refuses its commit): each must end with exit
// 0 and "exactly-once: OK".
func TestExamplesWithLedgerOnRealKafka(t *testing.T) {
	two := kafkatest.Bootstrap2(t)
	for _, example := range []string{"ctp", "checkpoint"} {
		t.Run(example, func(t *testing.T) {
			bin := buildExample(t, example)
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
			defer cancel()
			ledger := replicatedLedger(ctx, t, two.Seeds, "kshare-claims-"+example)
			var extra []string
			if example == "ctp" {
				extra = []string{"-reject-every", "10", "-dlq", uniqueName(t, "kshare-dlq")}
			}
			run := startExample(ctx, t, bin, two.Seeds, ledger, "10000", extra...)
			stdout := run.wait(t)
			if example == "ctp" {
				if !regexp.MustCompile(`(?m)^dead-letter copies \(kshare-dlq-[0-9a-f]+\) +1000$`).MatchString(stdout) {
					t.Errorf("want 1000 dead-letter copies, one per rejected input")
				}
				for _, fault := range []string{"worker_killed_after_commit", "share_session_dropped",
					"worker_stopped_past_lock_before_claims", "worker_stopped_past_lock_after_claims"} {
					if !regexp.MustCompile(`(?m)^fault: ` + fault + ` +[1-9]`).MatchString(stdout) {
						t.Errorf("fault %s never fired", fault)
					}
				}
			}
		})
	}
}

// TestExampleWithLedgerSurvivesANodeRestart runs ctp with a claim ledger
// on the two-node Apache Kafka and restarts node 2 (a controlled
// shutdown, then a start with its data) once transactions commit: the
// leaders of the input, output and ledger partitions it led move to node
// 1, and the coordinators it ran (on single-replica internal topics) are
// unavailable until it is back. The run must end with exit 0 and
// "exactly-once: OK", every input exactly once.
func TestExampleWithLedgerSurvivesANodeRestart(t *testing.T) {
	two := kafkatest.Bootstrap2(t)
	bin := buildExample(t, "ctp")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ledger := replicatedLedger(ctx, t, two.Seeds, "kshare-claims-restart")
	run := startExample(ctx, t, bin, two.Seeds, ledger, "30000")
	restarted := false
	defer func() {
		if !restarted {
			if err := two.StartNode2(context.Background()); err != nil {
				t.Errorf("start node 2 after the test: %v", err)
			}
		}
	}()
	committed := run.progress(t, 0)
	if err := two.StopNode2(ctx); err != nil {
		t.Fatalf("stop node 2: %v", err)
	}
	t.Logf("node 2 stopped with %d transactions committed", committed)
	if err := two.StartNode2(ctx); err != nil {
		t.Fatalf("start node 2: %v", err)
	}
	restarted = true
	after := run.progress(t, committed)
	t.Logf("node 2 back; %d transactions committed since it stopped", after-committed)
	run.wait(t)
}

// buildExample builds examples/<name> into a temporary directory.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/"+name).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// replicatedLedger creates a ledger topic with two replicas (the SDK
// uses an existing one as it is) and returns its name.
func replicatedLedger(ctx context.Context, t *testing.T, seeds []string, prefix string) string {
	t.Helper()
	name := uniqueName(t, prefix)
	adm := kadm.NewClient(testkit.Client(t, seeds))
	resp, err := adm.CreateTopic(ctx, 16, 2, map[string]*string{"cleanup.policy": kadm.StringPtr("delete"), "retention.ms": kadm.StringPtr("-1")}, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create the ledger %s: %v", name, err)
	}
	return name
}

// exampleRun is an example command running against real Kafka.
type exampleRun struct {
	cmd     *exec.Cmd
	start   time.Time
	stdout  bytes.Buffer
	lines   chan string // stderr, line by line
	stderr  syncBuffer
	scanned chan struct{}
}

// startExample starts bin with a ledger on topics of two replicas, 3s
// locks, every fault and the extra flags.
func startExample(ctx context.Context, t *testing.T, bin string, seeds []string, ledger, records string, extra ...string) *exampleRun {
	t.Helper()
	r := &exampleRun{lines: make(chan string, 1024), scanned: make(chan struct{})}
	args := append([]string{"-brokers", strings.Join(seeds, ","), "-ledger", ledger,
		"-replication-factor", "2", "-lock-duration", "3s", "-records", records, "-max-duration", "5m"}, extra...)
	r.cmd = exec.CommandContext(ctx, bin, args...)
	r.cmd.Stdout = &r.stdout
	pipe, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.start = time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.scanned)
		defer close(r.lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			r.stderr.WriteString(sc.Text() + "\n")
			select {
			case r.lines <- sc.Text():
			default: // nobody waits for progress now
			}
		}
	}()
	return r
}

// progressCommitted reads the transactions committed from a progress
// line of ctp.
var progressCommitted = regexp.MustCompile(`transactions committed (\d+)`)

// progress waits for a progress line with more than after transactions
// committed and returns their count.
func (r *exampleRun) progress(t *testing.T, after int) int {
	t.Helper()
	for line := range r.lines {
		if m := progressCommitted.FindStringSubmatch(line); m != nil {
			if n, _ := strconv.Atoi(m[1]); n > after {
				return n
			}
		}
	}
	t.Fatalf("the command ended before more than %d transactions committed; stderr:\n%s", after, r.stderr.String())
	return 0
}

// wait waits for the command to end and checks exit 0 and the verdict
// line; it returns the report.
func (r *exampleRun) wait(t *testing.T) string {
	t.Helper()
	go func() {
		for range r.lines { // drain
		}
	}()
	<-r.scanned
	err := r.cmd.Wait()
	t.Logf("%s exited after %.1fs: %v\nstdout:\n%s", filepath.Base(r.cmd.Path), time.Since(r.start).Seconds(), err, r.stdout.String())
	if err != nil {
		t.Fatalf("want exit status 0, got %v; stderr:\n%s", err, r.stderr.String())
	}
	if !strings.Contains(r.stdout.String(), "exactly-once: OK") {
		t.Fatalf("no exactly-once: OK verdict; stderr:\n%s", r.stderr.String())
	}
	return r.stdout.String()
}

// syncBuffer is a bytes.Buffer safe for one writer and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) WriteString(x string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(x)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
