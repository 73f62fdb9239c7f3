package realkafka_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kshare-go/kshare/integration/kafkatest"
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
// workers stalled past their locks; failed, long and slow checkpoints):
// each ends exactly-once: OK, exit 0, on a cluster without KIP-1289.
func TestExamplesWithLedgerOnRealKafka(t *testing.T) {
	two := kafkatest.Bootstrap2(t)
	seeds := strings.Join(two.Seeds, ",")
	for _, example := range []string{"ctp", "checkpoint"} {
		t.Run(example, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), example)
			out, err := exec.Command("go", "build", "-o", bin, "../../examples/"+example).CombinedOutput()
			if err != nil {
				t.Fatalf("go build: %v\n%s", err, out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
			defer cancel()
			ledger := uniqueName(t, "kshare-claims-"+example)
			cmd := exec.CommandContext(ctx, bin, "-brokers", seeds, "-ledger", ledger, "-records", "10000", "-max-duration", "5m")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			err = cmd.Run()
			t.Logf("%s -ledger exited after %.1fs: %v\nstdout:\n%s", example, time.Since(start).Seconds(), err, stdout.String())
			if err != nil {
				t.Fatalf("want exit status 0, got %v; stderr:\n%s", err, stderr.String())
			}
			if !strings.Contains(stdout.String(), "exactly-once: OK") {
				t.Fatalf("no exactly-once: OK verdict")
			}
		})
	}
}
