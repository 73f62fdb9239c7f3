package main

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/internal/eos"
)

// TestExternalBrokerFlagMixes runs the command the way a user tries it
// against a cluster of their own: a kshare-broker process started with
// its defaults, and ctp -brokers with its defaults there (a 15s lock, every
// fault, the slow worker stalling past its lock) and each flag mix users
// reach for. Every run ends exactly-once: OK, exit 0. (Before, each of
// them exited 2: the abort after a slow transaction reused the
// transaction's expired context and the worker stopped.)
func TestExternalBrokerFlagMixes(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kshare-broker")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/kshare-go/kshare/cmd/kshare-broker").CombinedOutput()
	require.NoError(t, err, "%s", out)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stdout)
	require.True(t, lines.Scan(), "kshare-broker printed no ready line")
	ready := lines.Text()
	const prefix = "kshare-broker ready bootstrap="
	require.True(t, strings.HasPrefix(ready, prefix), ready)
	seeds := strings.TrimPrefix(ready, prefix)
	go func() { // drain what the broker prints until it exits
		for lines.Scan() {
		}
	}()

	for _, mix := range []struct {
		name string
		args []string
	}{
		{"defaults", []string{"-records", "3000"}},
		{"16 consumers", []string{"-records", "3000", "-consumers", "16"}},
		{"one record per transaction", []string{"-records", "600", "-txn-size", "1"}},
		{"rejects", []string{"-records", "3000", "-reject-every", "3"}},
		// Aborts every fifth transaction, not every second: with every
		// second one aborted, a record lands in an aborted transaction
		// at about half its deliveries, so a few of 600 reach the
		// delivery limit (10) by chance, and one whose last delivery an
		// injected fault ended makes the verdict FAILED (archived after
		// failures) in some runs. At a fifth, nine aborted deliveries in
		// a row come about once in two million records.
		{"aborts", []string{"-records", "3000", "-abort-every", "5"}},
		{"all together", []string{"-records", "600", "-consumers", "16", "-txn-size", "1", "-reject-every", "3", "-abort-every", "5"}},
	} {
		t.Run(mix.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"-brokers", seeds, "-max-duration", "5m"}, mix.args...)
			code, stdout, _ := runCtp(t, args...)
			require.Equal(t, eos.ExitOK, code, "ctp %s:\n%s", strings.Join(args, " "), stdout)
			require.Contains(t, stdout, "exactly-once: OK")
		})
	}
}
