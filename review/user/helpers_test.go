//go:build review

package user

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// repoRoot is the repository's root, two levels up from this package.
var repoRoot = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}()

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// bin builds the user-facing commands once per test binary and returns
// the path of name: "ctp", "checkpoint", "kshare-broker" or
// "kshare-benthos".
func bin(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "kshare-review-user-")
		if buildErr != nil {
			return
		}
		for _, b := range [][]string{
			{"build", "-o", filepath.Join(binDir, "ctp"), "./examples/ctp"},
			{"build", "-o", filepath.Join(binDir, "checkpoint"), "./examples/checkpoint"},
			{"build", "-o", filepath.Join(binDir, "kshare-broker"), "./cmd/kshare-broker"},
			{"-C", "connectors/benthos", "build", "-o", filepath.Join(binDir, "kshare-benthos"), "./cmd/kshare-benthos"},
		} {
			cmd := exec.Command("go", b...)
			cmd.Dir = repoRoot
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go %s: %w\n%s", strings.Join(b, " "), err, out)
				return
			}
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(binDir, name)
}

// result is how a command ended.
type result struct {
	code           int // exit code; -1 when a signal ended it
	signal         syscall.Signal
	stdout, stderr string
	elapsed        time.Duration
	timedOut       bool // the test's bound ran out and killed it
}

// proc is a command started in the background.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *lockedBuffer
	start          time.Time
	done           chan struct{}
	res            result
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start runs path with args in dir (repoRoot if empty) and kills it when
// the test ends.
func start(t *testing.T, dir, path string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	if dir == "" {
		cmd.Dir = repoRoot
	}
	// A process group of its own, so that the cleanup kills what it
	// started (go run's child included) and nothing else.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &proc{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	p.start = time.Now()
	require.NoError(t, cmd.Start())
	go func() {
		err := cmd.Wait()
		p.res.elapsed = time.Since(p.start)
		p.res.stdout, p.res.stderr = p.stdout.String(), p.stderr.String()
		p.res.code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.res.signal = ws.Signal()
		}
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.res.stderr += "\n(wait: " + err.Error() + ")"
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
	return p
}

// wait waits for the process to end, at most bound; past it, it kills the
// process group and marks the result timed out.
func (p *proc) wait(bound time.Duration) result {
	select {
	case <-p.done:
	case <-time.After(bound):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		p.res.timedOut = true
	}
	return p.res
}

// signal sends sig to the process itself (not its group).
func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// waitFor waits until the process's stderr (or stdout) contains s, at most
// bound, and reports whether it did.
func (p *proc) waitFor(s string, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if strings.Contains(p.stderr.String(), s) || strings.Contains(p.stdout.String(), s) {
			return true
		}
		select {
		case <-p.done:
			return strings.Contains(p.stderr.String(), s) || strings.Contains(p.stdout.String(), s)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// run runs path with args to its end, at most bound.
func run(t *testing.T, bound time.Duration, path string, args ...string) result {
	t.Helper()
	r := start(t, "", path, args...).wait(bound)
	t.Logf("%s %s: exit %d signal %v after %.1fs timedOut=%v\nstdout:\n%s\nstderr (last 2000 bytes):\n%s",
		filepath.Base(path), strings.Join(args, " "), r.code, r.signal, r.elapsed.Seconds(), r.timedOut, r.stdout, tail(r.stderr, 2000))
	return r
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// broker is a kshare-broker process.
type broker struct {
	*proc
	seeds string // comma-separated bootstrap list from the ready line
}

// startBroker starts kshare-broker with args (on free ports unless args
// say otherwise) and waits for its ready line.
func startBroker(t *testing.T, args ...string) *broker {
	t.Helper()
	p := start(t, "", bin(t, "kshare-broker"), append([]string{"-log-level", "error"}, args...)...)
	const prefix = "kshare-broker ready bootstrap="
	require.True(t, p.waitFor(prefix, 30*time.Second), "no ready line; stderr:\n%s", p.stderr.String())
	line, _, _ := strings.Cut(p.stdout.String(), "\n")
	return &broker{proc: p, seeds: strings.TrimPrefix(line, prefix)}
}

// kill ends the broker at once, as a crash would.
func (b *broker) kill() {
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	<-b.done
}

// readCommitted reads every committed record of topic from seeds, up to
// each partition's last stable offset once no transaction is open there,
// and returns the values.
func readCommitted(t *testing.T, seeds, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(seeds, ",")...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var stable kadm.ListedOffsets
	for {
		stable, err = adm.ListCommittedOffsets(ctx, topic)
		require.NoError(t, err)
		require.NoError(t, stable.Error())
		ends, err := adm.ListEndOffsets(ctx, topic)
		require.NoError(t, err)
		open := false
		stable.Each(func(o kadm.ListedOffset) {
			if e, ok := ends.Lookup(topic, o.Partition); ok && e.Offset != o.Offset {
				open = true
			}
		})
		if !open {
			break
		}
		require.NoError(t, ctx.Err(), "a transaction stays open on %s", topic)
		time.Sleep(100 * time.Millisecond)
	}
	meta, err := adm.Metadata(ctx, topic)
	require.NoError(t, err)
	td := meta.Topics[topic]
	var values []string
	stable.Each(func(o kadm.ListedOffset) {
		leader := td.Partitions[o.Partition].Leader
		for offset := int64(0); offset < o.Offset; {
			req := kmsg.NewPtrFetchRequest()
			req.MaxBytes, req.IsolationLevel, req.SessionEpoch = 8<<20, 1, -1
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = topic, td.ID
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = o.Partition, offset, 8<<20
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			raw, err := cl.Broker(int(leader)).Request(ctx, req)
			require.NoError(t, err)
			resp := raw.(*kmsg.FetchResponse)
			require.Len(t, resp.Topics, 1)
			require.Len(t, resp.Topics[0].Partitions, 1)
			fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
				Offset: offset, IsolationLevel: kgo.ReadCommitted(), Topic: topic, Partition: o.Partition,
			}, &resp.Topics[0].Partitions[0], kgo.DefaultDecompressor(), nil)
			require.NoError(t, fp.Err)
			for _, r := range fp.Records {
				if r.Offset < o.Offset {
					values = append(values, string(r.Value))
				}
			}
			require.Greater(t, next, offset, "no progress reading %s/%d", topic, o.Partition)
			offset = next
		}
	})
	return values
}

// lines splits s into lines, without empty ones.
func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}
