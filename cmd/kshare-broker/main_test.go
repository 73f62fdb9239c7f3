package main

import (
	"bufio"
	"context"
	"crypto/rand"
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

func TestBadFlagsFail(t *testing.T) {
	bin := buildBroker(t)
	for _, args := range [][]string{
		{"-nodes", "0"},
		{"-log-level", "loud"},
		{"-port", "70000"},
		{"-no-such-flag"},
		{"-old-nodes", "x"},
		{"-max-bytes", "-1"},
		{"-read-timeout", "0s"},
		{"-fetch-max-bytes", "4294967296"},
		{"-max-connections", "-2"},
		{"-nodes", "2", "-old-nodes", "2"},
		{"-group-config", "share.auto.offset.reset"},
		{"-group-config", "share.auto.offset.reset=sideways"},
		{"-group-config", "no.such.config=1"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "args %v: %s", args, out)
		require.NotEqual(t, 0, exit.ExitCode())
		require.Contains(t, string(out), "kshare-broker", "args %v must say what is wrong", args)
	}
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
