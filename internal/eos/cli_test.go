package eos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeCommand is a command whose run returns report and err without
// touching a cluster.
func fakeCommand(report Report, err error) (Command, *Flags) {
	var got Flags
	var workers int
	return Command{
		Name:         "fake",
		Synopsis:     "Usage: fake [flags]",
		Description:  "A command for tests.",
		LockDuration: 5 * time.Second,
		Define: func(fs *flag.FlagSet) func() error {
			fs.IntVar(&workers, "workers", 4, "workers, at least 1")
			return func() error { return CheckPositive("workers", workers) }
		},
		Header: func(f Flags, _ []string) string { return fmt.Sprintf("%d records", f.Records) },
		Run: func(_ context.Context, f Flags, _ Env) (Report, error) {
			got = f
			return report, err
		},
	}, &got
}

func runMain(cmd Command, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Main(cmd, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestMainRefusesBadFlags(t *testing.T) {
	cmd, _ := fakeCommand(Summary{}, nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-records", "-5"}, "fake: -records -5: must be at least 1"},
		{[]string{"-records", "0"}, "fake: -records 0: must be at least 1"},
		{[]string{"-workers", "0"}, "fake: -workers 0: must be at least 1"},
		{[]string{"-reject-every", "1"}, "fake: -reject-every 1: must be 0 (none) or at least 2"},
		{[]string{"-reject-every", "-3"}, "fake: -reject-every -3: must be 0 (none) or at least 2"},
		{[]string{"-max-duration", "0s"}, "fake: -max-duration 0s: must be positive"},
		{[]string{"-lock-duration", "-1s"}, "fake: -lock-duration -1s: must be at least 1ms"},
		{[]string{"-replication-factor", "0"}, "fake: -replication-factor 0: must be -1 (the cluster's default) or 1 to 32767"},
		{[]string{"-replication-factor", "40000"}, "fake: -replication-factor 40000: must be -1 (the cluster's default) or 1 to 32767"},
		{[]string{"-log-level", "loud"}, "fake: -log-level loud:"},
		{[]string{"-brokers", " , "}, "names no broker"},
		{[]string{"stray"}, `fake: unexpected argument "stray"`},
		{[]string{"-no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"-records", "many"}, `invalid value "many" for flag -records`},
	} {
		code, stdout, stderr := runMain(cmd, tc.args...)
		require.Equal(t, ExitError, code, "%v", tc.args)
		require.Empty(t, stdout, "%v", tc.args)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
	}
	// Every bad value is reported at once, not one per run.
	code, _, stderr := runMain(cmd, "-records", "-5", "-workers", "0")
	require.Equal(t, ExitError, code)
	require.Contains(t, stderr, "-records -5")
	require.Contains(t, stderr, "-workers 0")
}

func TestMainHelpNamesEveryFlagAndExitCode(t *testing.T) {
	cmd, _ := fakeCommand(Summary{}, nil)
	code, stdout, stderr := runMain(cmd, "-h")
	require.Equal(t, ExitOK, code)
	require.Empty(t, stdout)
	for _, want := range []string{"Usage: fake", "A command for tests.", "exit 0", "exit 1", "exits 2", "exit 3",
		"-brokers", "-records", "-reject-every", "-lock-duration", "-max-duration", "-replication-factor", "-faults", "-json", "-log-level", "-workers"} {
		require.Contains(t, stderr, want)
	}
}

func TestMainReportsVerdictsWithTheirExitCodes(t *testing.T) {
	in := testInput(10, 0)
	counts, outputs := outputsOf(in, nil)
	ok := Summary{Result: NewResult(checkCounts(counts, outputs, in, allAcknowledged(in), Endings{}), "", time.Second)}
	counts[ID(3)]++
	failed := Summary{Result: NewResult(checkCounts(counts, outputs+1, in, allAcknowledged(in), Endings{}), "", time.Second)}
	incomplete := Summary{Result: NewResult(checkCounts(map[string]int{}, 0, in, nil, Endings{}), "max duration 1s", time.Second)}
	for _, tc := range []struct {
		sum     Summary
		code    int
		verdict string
	}{
		{ok, ExitOK, VerdictOK},
		{failed, ExitFailed, VerdictFailed},
		{incomplete, ExitIncomplete, VerdictIncomplete},
	} {
		cmd, _ := fakeCommand(tc.sum, nil)
		code, stdout, stderr := runMain(cmd, "-brokers", "127.0.0.1:1")
		require.Equal(t, tc.code, code)
		require.True(t, strings.HasSuffix(stdout, tc.sum.Line()+"\n"), stdout)
		require.Contains(t, stdout, "inputs processed")
		require.Contains(t, stderr, "fake: 100000 records, brokers 127.0.0.1:1")

		code, stdout, stderr = runMain(cmd, "-brokers", "127.0.0.1:1", "-json")
		require.Equal(t, tc.code, code)
		var doc map[string]any
		dec := json.NewDecoder(strings.NewReader(stdout))
		require.NoError(t, dec.Decode(&doc), stdout)
		require.False(t, dec.More(), "stdout must hold one JSON document and nothing else: %s", stdout)
		require.Equal(t, tc.verdict, doc["verdict"])
		require.Equal(t, tc.verdict == VerdictOK, doc["ok"])
		require.Contains(t, stderr, tc.sum.Line(), "the verdict line goes to stderr with -json")
	}
}

func TestMainRunErrorExitsTwo(t *testing.T) {
	cmd, _ := fakeCommand(nil, errors.New("worker 0: kshare: broker does not support transactional share acknowledgements (KIP-1289)"))
	code, stdout, stderr := runMain(cmd, "-brokers", "127.0.0.1:1")
	require.Equal(t, ExitError, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "fake: worker 0: kshare: broker does not support transactional share acknowledgements (KIP-1289)")

	code, stdout, _ = runMain(cmd, "-brokers", "127.0.0.1:1", "-json")
	require.Equal(t, ExitError, code)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc), stdout)
	require.Equal(t, VerdictError, doc["verdict"])
	require.Equal(t, false, doc["ok"])
	require.Contains(t, doc["error"], "KIP-1289")
}

func TestMainExternalLockDurationDefault(t *testing.T) {
	cmd, got := fakeCommand(Summary{Result: Result{Verdict: VerdictOK}}, nil)
	runMain(cmd, "-brokers", "127.0.0.1:1")
	require.Equal(t, externalLockDuration, got.LockDuration, "Apache Kafka refuses less by default")
	runMain(cmd, "-brokers", "127.0.0.1:1", "-lock-duration", "3s")
	require.Equal(t, 3*time.Second, got.LockDuration, "an explicit value wins")
}

// TestMainRefusedWithJSONWritesADocument: with -json, stdout is one JSON
// document whatever the ending, a refused command line included (once the
// flag package has parsed -json).
func TestMainRefusedWithJSONWritesADocument(t *testing.T) {
	cmd, _ := fakeCommand(Summary{}, nil)
	for _, args := range [][]string{
		{"-json", "-records", "0"},
		{"-json", "-workers", "-1"},
		{"-json", "-reject-every", "1"},
		{"-json", "unexpected-positional"},
		{"-json", "-records", "many"},
	} {
		code, stdout, stderr := runMain(cmd, args...)
		require.Equal(t, ExitError, code, "%v", args)
		dec := json.NewDecoder(strings.NewReader(stdout))
		var doc map[string]any
		require.NoError(t, dec.Decode(&doc), "%v: stdout %q", args, stdout)
		require.False(t, dec.More(), "%v: stdout must hold one JSON document: %s", args, stdout)
		require.Equal(t, VerdictError, doc["verdict"], "%v", args)
		require.Equal(t, false, doc["ok"], "%v", args)
		require.Contains(t, stderr, doc["error"].(string)[:10], "%v: the document says what stderr says", args)
	}
}
