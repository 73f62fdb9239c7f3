package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func buildBroker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kshare-broker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// startBroker starts the command with args and returns it, its stdout
// after the ready line, and the bootstrap addresses the line names.
func startBroker(ctx context.Context, t *testing.T, bin string, args ...string) (*exec.Cmd, *bufio.Scanner, []string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stdout)
	require.True(t, lines.Scan(), "no ready line")
	ready := lines.Text()
	require.True(t, strings.HasPrefix(ready, "kshare-broker ready bootstrap="), ready)
	return cmd, lines, strings.Split(strings.TrimPrefix(ready, "kshare-broker ready bootstrap="), ",")
}

// TestReadyLineServeAndStop starts the command as a process: it prints
// exactly one ready line naming every node, serves Kafka clients, and exits
// cleanly on SIGTERM.
func TestReadyLineServeAndStop(t *testing.T) {
	bin := buildBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, lines, seeds := startBroker(ctx, t, bin, "-nodes", "3", "-port", "0", "-log-level", "warn")
	require.Len(t, seeds, 3)

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "cmd-test", Value: []byte("v")}).FirstErr())
	cl.Close()

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.False(t, lines.Scan(), "stdout must carry nothing but the ready line, got %q", lines.Text())
	require.NoError(t, cmd.Wait(), "exit status after SIGTERM")
}

// runBroker runs the command in this process with args and a context
// that is already cancelled, so that a command line it accepts starts the
// cluster, prints the ready line and stops at once. It returns the exit
// code, stdout and stderr.
func runBroker(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut)
	t.Logf("kshare-broker %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// TestBadFlagsFail: every command line the broker refuses exits 2 (the
// flag package's convention, as the examples do) before the cluster
// starts, with a message naming the flag; none panics. A stray argument
// and a partition count past int32 are refused rather than ignored or
// cut short.
func TestBadFlagsFail(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-nodes", "0"}, "-nodes 0: must be in 1..65535"},
		{[]string{"-nodes", "-1"}, "-nodes -1: must be in 1..65535"},
		{[]string{"-nodes", "9223372036854775807", "-port", "1"}, "-nodes 9223372036854775807"},
		{[]string{"-log-level", "loud"}, "-log-level"},
		{[]string{"-port", "70000"}, "-port 70000"},
		{[]string{"-port", "abc"}, `invalid value "abc" for flag -port`},
		{[]string{"-no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"-old-nodes", "x"}, "-old-nodes"},
		{[]string{"-max-bytes", "-1"}, "kshare-broker:"},
		{[]string{"-read-timeout", "0s"}, "kshare-broker:"},
		{[]string{"-fetch-max-bytes", "4294967296"}, "-fetch-max-bytes 4294967296"},
		{[]string{"-max-connections", "-2"}, "kshare-broker:"},
		{[]string{"-nodes", "2", "-old-nodes", "2"}, "kshare-broker:"},
		{[]string{"-group-config", "share.auto.offset.reset"}, "is not NAME=VALUE"},
		{[]string{"-group-config", "share.auto.offset.reset=sideways"}, "kshare-broker:"},
		{[]string{"-group-config", "no.such.config=1"}, "kshare-broker:"},
		{[]string{"-port", "0", "stray-argument"}, `unexpected argument "stray-argument"`},
		{[]string{"-share-state-partitions", "4294967297"}, "-share-state-partitions 4294967297: must be in 1..2147483647"},
		{[]string{"-txn-state-partitions", "4294967297"}, "-txn-state-partitions 4294967297"},
		{[]string{"-offsets-partitions", "0"}, "-offsets-partitions 0"},
	} {
		code, stdout, stderr := runBroker(t, tc.args...)
		require.Equal(t, exitUsage, code, "args %v", tc.args)
		require.Empty(t, stdout, "args %v: the cluster must not start", tc.args)
		require.Contains(t, stderr, tc.want, "args %v must say what is wrong", tc.args)
	}
}

// TestHelpExitsZero: -h prints the flags and is not an error.
func TestHelpExitsZero(t *testing.T) {
	code, stdout, stderr := runBroker(t, "-h")
	require.Equal(t, exitOK, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "-nodes")
	require.NotContains(t, stderr, "help requested")
}

// TestRunStartsAndStops: a good command line starts the cluster, prints
// the ready line and exits 0 when its context (the signals, in main)
// ends.
func TestRunStartsAndStops(t *testing.T) {
	code, stdout, _ := runBroker(t, "-nodes", "2", "-log-level", "error")
	require.Equal(t, exitOK, code)
	require.Regexp(t, `^kshare-broker ready bootstrap=127\.0\.0\.1:\d+,127\.0\.0\.1:\d+\n$`, stdout)
}

// TestFlagsAreDocumented: docs/broker.md is the broker's reference; every
// flag the command defines appears there as `-name.
func TestFlagsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/broker.md")
	require.NoError(t, err)
	fs, _ := newFlagSet(io.Discard)
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(doc), "`-"+f.Name) {
			missing = append(missing, "-"+f.Name)
		}
	})
	require.Empty(t, missing, "flags of kshare-broker that docs/broker.md does not list")
}

// TestOldNodesFlag: -old-nodes makes the named node advertise
// WriteTxnMarkers up to v1 only, the others v2.
func TestOldNodesFlag(t *testing.T) {
	bin := buildBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, _, seeds := startBroker(ctx, t, bin, "-nodes", "2", "-old-nodes", "1", "-log-level", "warn")
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	require.Len(t, seeds, 2)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	for node, want := range []int16{2, 1} {
		resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl.Broker(node))
		require.NoError(t, err)
		got := int16(-1)
		for _, k := range resp.ApiKeys {
			if k.ApiKey == 27 {
				got = k.MaxVersion
			}
		}
		require.Equal(t, want, got, "node %d", node)
	}
}

// TestGroupConfigFlag: -group-config sets the default of a group config
// for every group.
func TestGroupConfigFlag(t *testing.T) {
	bin := buildBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, _, seeds := startBroker(ctx, t, bin, "-group-config", "share.auto.offset.reset=earliest", "-log-level", "warn")
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "any-group"
	res.ConfigNames = []string{"share.auto.offset.reset"}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, resp.Resources, 1)
	require.Len(t, resp.Resources[0].Configs, 1)
	require.Equal(t, "earliest", *resp.Resources[0].Configs[0].Value)
}

// TestMaxBytesFlagRefusesProduceAndKeepsReads: with -max-bytes the
// process refuses records past its budget with POLICY_VIOLATION, which the
// client does not retry, and keeps serving what it holds.
func TestMaxBytesFlagRefusesProduceAndKeepsReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, _, seeds := startBroker(ctx, t, buildBroker(t), "-port", "0", "-log-level", "error", "-max-bytes", "65536")
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("budget"),
		kgo.ConsumeTopics("budget"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	value := make([]byte, 8<<10)
	_, _ = rand.Read(value) // incompressible: kgo compresses batches
	var refused error
	produced := 0
	for i := 0; i < 20 && refused == nil; i++ {
		if refused = cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); refused == nil {
			produced++
		}
	}
	require.ErrorIs(t, refused, kerr.PolicyViolation)
	require.Positive(t, produced)
	got := 0
	for got < produced {
		fetches := cl.PollFetches(ctx)
		require.NoError(t, fetches.Err())
		got += fetches.NumRecords()
	}
	require.Equal(t, produced, got)
}
