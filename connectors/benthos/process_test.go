package benthos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/testkit"
)

// buildBenthos builds cmd/kshare-benthos into a directory of the test
// and returns the binary's path. It is built without the race detector
// even when the tests run with it (GOFLAGS=-race): a race-built binary
// exits 66 on any race in the whole distribution, Benthos' own code
// included (CI once saw one at shutdown, between Benthos' HTTP server and
// its RunCLI), which this package cannot fix; the kshare components run
// under the race detector in this package's in-process tests.
func buildBenthos(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kshare-benthos")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/kshare-benthos")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/kshare-benthos:\n%s", out)
	return bin
}

// process is a kshare-benthos process the test started: what it wrote
// (Benthos logs to stdout, or to stderr when the output is stdout), what
// it wrote to stdout alone, and, once it has exited, its exit code.
type process struct {
	cmd    *exec.Cmd
	out    *syncBuffer // stdout and stderr
	stdout *syncBuffer
	exited chan struct{}
	code   int
}

// startProcess runs bin -c config with env added to the test's
// environment. The test's cleanup interrupts it if it still runs, kills it
// if it does not exit within 30s, and waits for it.
func startProcess(t *testing.T, bin, config string, env ...string) *process {
	t.Helper()
	return startArgs(t, bin, []string{"-c", config}, env...)
}

// startArgs runs bin with args; see startProcess.
func startArgs(t *testing.T, bin string, args []string, env ...string) *process {
	t.Helper()
	p := &process{out: &syncBuffer{}, stdout: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = io.MultiWriter(p.out, p.stdout), p.out
	require.NoError(t, p.cmd.Start())
	go func() {
		defer close(p.exited)
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("process %d did not exit within 30s of SIGINT; killing it", p.cmd.Process.Pid)
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// wait waits for the process to exit by itself and requires status 0.
func (p *process) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("process %d did not exit within %v:\n%s", p.cmd.Process.Pid, timeout, tail(p.out.String(), 30))
	}
	require.Zero(t, p.code, "exit status:\n%s", tail(p.out.String(), 30))
}

// done reports whether the process has exited.
func (p *process) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// stop interrupts the process (Ctrl-C) and waits for it to exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-p.exited:
	case <-time.After(45 * time.Second):
		t.Fatalf("process %d did not exit within 45s of SIGINT", p.cmd.Process.Pid)
	}
}

// processPipeline is the YAML both processes of TestTwoProcessesOneConfig
// run: the same file, the same ids. KSHARE_TEST_SLEEP slows each message
// of the first process down, so that it is in the middle of the input
// when the second one starts. Locks last $LOCK.
const processPipeline = `
http:
  enabled: false
logger:
  level: INFO
  format: logfmt
input:
  kshare_share:
    seed_brokers: [ $SEEDS ]
    group: $GROUP
    topics: [ $IN ]
    transactional_id: $INTXN
    auto_offset_reset: earliest
    record_lock_duration: $LOCK
    max_poll_records: 200
    max_wait: 100ms
    batching:
      count: 100
      period: 50ms
pipeline:
  threads: 2
  processors:
    - sleep:
        duration: "${KSHARE_TEST_SLEEP:0s}"
    - mapping: root = content()
output:
  kshare_txn:
    seed_brokers: [ $SEEDS ]
    transactional_id: $OUTTXN
    topic: $OUT
    key: ${! @kafka_key }
`

// firstMember records the member id of the first ShareGroupHeartbeat of
// a group.
type firstMember struct {
	group string
	id    atomic.Pointer[string]
}

func (f *firstMember) observe(_ int32, req kmsg.Request) {
	if r, ok := req.(*kmsg.ShareGroupHeartbeatRequest); ok && r.GroupID == f.group && r.MemberID != "" {
		id := r.MemberID
		f.id.CompareAndSwap(nil, &id)
	}
}

// commitsOf counts the EndTxn(COMMIT) requests of one transactional id.
type commitsOf struct {
	id string
	n  atomic.Int64
}

func (c *commitsOf) observe(_ int32, req kmsg.Request) {
	if r, ok := req.(*kmsg.EndTxnRequest); ok && r.Commit && r.TransactionalID == c.id {
		c.n.Add(1)
	}
}

// TestTwoProcessesOneConfig is what users did: two kshare-benthos
// processes on one YAML (one group, one acknowledger id, one output id),
// against a cluster (the bundled one, in the test process; the processes
// reach it on its loopback ports). The first runs slowly and is in the
// middle of the input, holding records under renewed locks, when the
// second starts and fences it. The first process must then give back what
// it holds (it sends RELEASE acknowledgements and leaves the group), say
// once that it can commit nothing more, and exit by itself with status 0;
// the second must acknowledge the whole input, exactly once, before
// fence + lock/4. Every record the first process held at the fence had at
// least half of its lock left (the consumer renews a lock when less than
// half is left), so it reached the second one before fence + lock/2 only
// if the first gave it back: waiting for expiry, as before, takes longer.
func TestTwoProcessesOneConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs kshare-benthos")
	}
	const n = 18000
	const lock = 60 * time.Second
	bin := buildBenthos(t)
	c := newCluster(t)
	r := c.newRun(t, "procs", 3, n, 0)
	// r.yaml, not r.inputTxn: the template's $IN is replaced within
	// $INTXN too.
	inTxn, outTxn, group := r.yaml("$INTXN"), r.yaml("$OUTTXN"), r.yaml("$GROUP")
	config := filepath.Join(t.TempDir(), "pipeline.yaml")
	require.NoError(t, os.WriteFile(config, []byte(strings.ReplaceAll(r.yaml(processPipeline), "$LOCK", lock.String())), 0o644))

	inits := &initsOf{}
	t.Cleanup(c.ObserveRequests(inits.observe))
	first := &firstMember{group: group}
	t.Cleanup(c.ObserveRequests(first.observe))
	commits := &commitsOf{id: outTxn}
	t.Cleanup(c.ObserveRequests(commits.observe))
	fromZombie := &memberRequests{}
	t.Cleanup(c.ObserveRequests(fromZombie.observe))
	began := time.Now()

	zombie := startProcess(t, bin, config, "KSHARE_TEST_SLEEP=3ms")
	waitFor(t, time.Minute, "the first process committed 3 transactions", func() bool {
		return zombie.done() || commits.n.Load() >= 3
	})
	require.False(t, zombie.done(), "the first process exited early (status %d):\n%s", zombie.code, zombie.out.String())
	member := first.id.Load()
	require.NotNil(t, member, "the first process's member id")
	fromZombie.member.Store(member)
	before := r.input.CountAcknowledged(r.startOffsets(t))
	require.Less(t, before, n/2, "the first process is in the middle of the input")

	healthy := startProcess(t, bin, config)
	waitFor(t, time.Minute, "the second process initialized both transactional ids", func() bool {
		return healthy.done() || (inits.count(inTxn) >= 2 && inits.count(outTxn) >= 2)
	})
	require.False(t, healthy.done(), "the second process exited (status %d):\n%s", healthy.code, healthy.out.String())
	fenced := time.Now()
	t.Logf("the second process fenced the first after %d of %d inputs were acknowledged", before, n)

	// Until both: the first process exits by itself, and the second
	// one has acknowledged every input.
	deadline := fenced.Add(lock / 4)
	var zombieExited time.Duration
	var once sync.Once
	logged := time.Now()
	for {
		got := r.input.CountAcknowledged(r.startOffsets(t))
		if zombie.done() {
			once.Do(func() {
				zombieExited = time.Since(fenced)
				fromZombie.ended.Store(true)
				t.Logf("the first process exited %v after the fence, with status %d", zombieExited.Round(time.Millisecond), zombie.code)
			})
		}
		if got == n && zombie.done() {
			t.Logf("the second process acknowledged the whole input %v after the fence", time.Since(fenced).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after the fence (lock/4): %d of %d inputs acknowledged, the first process %s; its output:\n%s",
				time.Since(fenced).Round(time.Millisecond), got, n, map[bool]string{true: "exited", false: "still runs"}[zombie.done()], tail(nonDebug(zombie.out.String()), 30))
		}
		if time.Since(logged) >= time.Second {
			logged = time.Now()
			t.Logf("%v after the fence: %d of %d inputs acknowledged; the first process %s", time.Since(fenced).Round(time.Second), got, n,
				map[bool]string{true: "has exited", false: "still runs"}[zombie.done()])
		}
		time.Sleep(50 * time.Millisecond)
	}
	healthy.stop(t)
	require.Zero(t, healthy.code, "the second process exits with status 0 on Ctrl-C:\n%s", tail(healthy.out.String(), 30))
	requireExactlyOnce(t, r.verify(t, nil, time.Since(began)))

	// The first process gave its records back, left the group, said
	// why once, and exited cleanly.
	out := zombie.out.String()
	require.Zero(t, zombie.code, "the fenced process exits with status 0:\n%s", tail(out, 30))
	require.Equal(t, 1, strings.Count(out, "can commit nothing more"), "the fenced process says it once:\n%s", tail(out, 30))
	require.Contains(t, out, "was fenced by a newer instance with the same transactional_id")
	require.NotContains(t, out, "Failed to read message", "the fenced input does not report errors in a loop")
	require.True(t, fromZombie.left.Load(), "the fenced process left the group")
	require.Positive(t, fromZombie.releases.Load(), "the fenced process released records")
	t.Logf("the fenced process sent %d RELEASE acknowledgement entries after the fence", fromZombie.releases.Load())
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestDistributionServesMetricsOnLoopback runs kshare-benthos on a config
// with no http and no metrics section (a generate input into kshare_txn,
// against a bundled cluster): the HTTP server listens on 127.0.0.1:4195
// only (Benthos' own default is every interface), and its /metrics serves
// Prometheus' text format, with the kshare_txn counters and the
// transactions the output committed.
func TestDistributionServesMetricsOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs kshare-benthos")
	}
	const addr = "127.0.0.1:4195"
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("%s is in use, so the default address cannot be checked: %v", addr, err)
	}
	require.NoError(t, l.Close())
	bin := buildBenthos(t)
	c := newCluster(t)
	testkit.CreateTopic(testkit.Context(t), t, c.admin, "dist-out", 1)
	config := filepath.Join(t.TempDir(), "seed.yaml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`
input:
  generate:
    interval: 20ms
    batch_size: 10
    mapping: root = counter().string()
output:
  kshare_txn:
    seed_brokers: [ %s ]
    transactional_id: dist-out
    topic: dist-out
`, strings.Join(c.seeds, ","))), 0o644))
	p := startProcess(t, bin, config)

	var page string
	waitFor(t, 30*time.Second, "/metrics shows a committed transaction", func() bool {
		require.False(t, p.done(), "kshare-benthos exited (status %d):\n%s", p.code, p.out.String())
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return false
		}
		page = string(body)
		s := parseScrape(t, page)
		v, ok := s[`kshare_txn_transactions_committed{label="",path="root.output"}`]
		return ok && v >= 1
	})
	for _, name := range kshareCounters {
		if strings.HasPrefix(name, "kshare_txn_") {
			require.Contains(t, page, "\n"+name+`{label="",path="root.output"} `)
		}
	}
	require.Contains(t, page, "# TYPE output_latency_seconds histogram")

	// Who listens on port 4195 (0x105B): the loopback address, and not
	// every interface (0.0.0.0 or ::).
	listening := listenersOn(t, 4195)
	if listening == nil {
		t.Log("no /proc/net/tcp: the listening address is not checked")
	} else {
		require.Equal(t, []string{"0100007F"}, listening, "listening addresses (hex, as /proc/net/tcp writes them) of port 4195")
	}
	p.stop(t)
	require.Zero(t, p.code, "exit status after Ctrl-C:\n%s", tail(p.out.String(), 20))
}

// listenersOn returns the local addresses (hex, as /proc/net/tcp and tcp6
// write them) of the sockets listening on port, or nil if /proc/net/tcp
// cannot be read.
func listenersOn(t *testing.T, port int) []string {
	t.Helper()
	suffix := fmt.Sprintf(":%04X", port)
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			if f == "/proc/net/tcp" {
				return nil
			}
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			// sl local_address rem_address st ...; st 0A is LISTEN.
			if len(fields) > 3 && fields[3] == "0A" && strings.HasSuffix(fields[1], suffix) {
				out = append(out, strings.TrimSuffix(fields[1], suffix))
			}
		}
	}
	if out == nil {
		out = []string{}
	}
	return out
}

// TestExamplesRun runs the README's example as a user would, with
// kshare-benthos, against a bundled cluster (the examples' seed broker
// replaced by its address, the HTTP server off): seed.yaml writes 1000
// orders and exits; pipeline.yaml copies those of at least 50 to
// orders-enriched; read.yaml prints what was committed there, one line
// per record, and exits by itself at the end: each kept order once, none
// of the others.
func TestExamplesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs kshare-benthos")
	}
	const orders = 1000
	bin := buildBenthos(t)
	c := newCluster(t)
	dir := t.TempDir()
	example := func(name string) []string {
		b, err := os.ReadFile(filepath.Join("examples", name))
		require.NoError(t, err)
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(string(b), "localhost:9092", strings.Join(c.seeds, ","))), 0o644))
		return []string{"-s", "http.enabled=false", "-c", path}
	}

	startArgs(t, bin, example("seed.yaml")).wait(t, time.Minute)
	kept := map[string]bool{}
	for _, r := range readTopic(t, c, "orders", orders) {
		var o struct {
			ID     string `json:"id"`
			Amount int    `json:"amount"`
		}
		require.NoError(t, json.Unmarshal(r.Value, &o))
		if o.Amount >= 50 {
			kept[o.ID] = true
		}
	}

	pipeline := startArgs(t, bin, example("pipeline.yaml"))
	readTopic(t, c, "orders-enriched", len(kept))
	require.False(t, pipeline.done(), "the pipeline runs until stopped:\n%s", tail(pipeline.out.String(), 30))

	read := startArgs(t, bin, example("read.yaml"))
	read.wait(t, time.Minute)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(read.stdout.String()), "\n") {
		// topic/partition@offset key value
		f := strings.SplitN(line, " ", 3)
		require.Len(t, f, 3, "a line of read.yaml: %q", line)
		require.True(t, strings.HasPrefix(f[0], "orders-enriched/"), line)
		var o struct {
			ID     string `json:"id"`
			Amount int    `json:"amount"`
			Tier   string `json:"tier"`
		}
		require.NoError(t, json.Unmarshal([]byte(f[2]), &o), line)
		require.Equal(t, o.ID, f[1], "the key is the order's id")
		require.True(t, kept[o.ID], "%s: only orders of at least 50", line)
		require.False(t, seen[o.ID], "%s: once", line)
		require.NotEmpty(t, o.Tier)
		seen[o.ID] = true
	}
	require.Len(t, seen, len(kept), "read.yaml printed every kept order")
	pipeline.stop(t)
	require.Zero(t, pipeline.code, "the pipeline exits with status 0 on Ctrl-C:\n%s", tail(pipeline.out.String(), 30))
}

// readTopic reads topic from the start as a read_committed consumer
// until want records came, and returns them.
func readTopic(t *testing.T, c *cluster, topic string, want int) []*kgo.Record {
	t.Helper()
	cl := testkit.Client(t, c.seeds, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	var got []*kgo.Record
	deadline := time.Now().Add(time.Minute)
	for len(got) < want {
		require.True(t, time.Now().Before(deadline), "%d of %d records of %s within a minute", len(got), want, topic)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		got = append(got, cl.PollFetches(ctx).Records()...)
		cancel()
	}
	return got
}
