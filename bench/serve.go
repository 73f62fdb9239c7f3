package main

// The brokers run in child processes (this binary started again with
// -serve), so that the benchmark's clients and the broker never share a
// heap or a garbage collector: the client-side allocation counts are the
// clients' alone, and the broker's heap per stored record is the broker's
// alone. Both brokers get the same treatment (the bundled one could run in
// process, kfake could not be measured apart then).
//
// The child prints "ready host:port,..." once the cluster listens, then
// answers one line per command read from stdin:
//
//	stats  ->  "stats <heap bytes after GC> <CPU nanoseconds used so far>"
//
// and stops the cluster (writing its CPU profile, if asked) at EOF.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
)

// Broker kinds.
const (
	bundled   = "bundled"
	kfakeKind = "kfake"
)

// serveEnv tells this binary, started by itself, to be a broker child:
// kind,nodes,partitions,cpuprofile. An environment variable rather than
// flags, so that a test binary (bench's own tests) can be a child too.
const serveEnv = "KSHARE_BENCH_SERVE"

// serveIfChild serves a cluster and reports true when this process is a
// broker child; it exits the process on failure.
func serveIfChild() bool {
	spec := os.Getenv(serveEnv)
	if spec == "" {
		return false
	}
	f := strings.SplitN(spec, ",", 4)
	nodes, err1 := strconv.Atoi(f[min(1, len(f)-1)])
	parts, err2 := strconv.Atoi(f[min(2, len(f)-1)])
	if len(f) != 4 || err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "bench: bad %s=%q\n", serveEnv, spec)
		os.Exit(2)
	}
	if err := serve(f[0], nodes, parts, f[3]); err != nil {
		fmt.Fprintln(os.Stderr, "bench broker child:", err)
		os.Exit(1)
	}
	return true
}

// serve runs a cluster of kind in this process until stdin closes.
func serve(kind string, nodes, partitions int, cpuProfile string) error {
	var seeds []string
	var stop func()
	switch kind {
	case bundled:
		c, err := broker.NewCluster(broker.Nodes(nodes), broker.DefaultPartitions(int32(partitions)),
			broker.Logger(slog.New(slog.DiscardHandler)))
		if err != nil {
			return err
		}
		c.ObserveRequests(func(_ int32, req kmsg.Request) {
			if k := req.Key(); k >= 0 && int(k) < len(requestCounts) {
				requestCounts[k].Add(1)
			}
		})
		seeds, stop = c.Bootstrap(), func() { c.Close() }
	case kfakeKind:
		c, err := kfake.NewCluster(kfake.NumBrokers(nodes), kfake.DefaultNumPartitions(partitions))
		if err != nil {
			return err
		}
		seeds, stop = c.ListenAddrs(), c.Close
	default:
		return fmt.Errorf("unknown broker kind %q (want %s or %s)", kind, bundled, kfakeKind)
	}
	defer stop()
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Printf("ready %s\n", strings.Join(seeds, ","))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "stats":
			fmt.Printf("stats %d %d%s\n", heapAfterGC(), cpuNanos(), requestCountsString())
		default:
			fmt.Printf("error unknown command %q\n", in.Text())
		}
	}
	return in.Err()
}

// requestCounts counts the requests the bundled broker's nodes received,
// by API key, clients' and the nodes' own (markers) alike.
var requestCounts [128]atomic.Int64

// requestCountsString is " key:count ..." for every key seen.
func requestCountsString() string {
	var b strings.Builder
	for k := range requestCounts {
		if n := requestCounts[k].Load(); n > 0 {
			fmt.Fprintf(&b, " %d:%d", k, n)
		}
	}
	return b.String()
}

// heapAfterGC is the live heap: what is left after two collections (the
// second one frees what finalizers of the first kept).
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// cpuNanos is the user and system CPU time this process has used.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// brokerProc is a broker child process seen from the parent.
type brokerProc struct {
	kind  string
	seeds []string
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
}

// brokerStats is what the child reports.
type brokerStats struct {
	heap     uint64 // bytes live after GC
	cpu      time.Duration
	requests map[int16]int64 // by API key (bundled broker only)
}

// startBroker starts a child serving a cluster of kind and waits for it to
// listen.
func startBroker(kind string, nodes, partitions int, cpuProfile string) (*brokerProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%d,%s", serveEnv, kind, nodes, partitions, cpuProfile))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the %s broker: %w", kind, err)
	}
	b := &brokerProc{kind: kind, cmd: cmd, in: in, out: bufio.NewReader(outPipe)}
	line, err := b.out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		b.close()
		return nil, fmt.Errorf("the %s broker did not start (%q): %w", kind, line, err)
	}
	b.seeds = strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "ready ")), ",")
	return b, nil
}

// stats asks the child for its heap and CPU time; an external cluster
// (no child) has none to give.
func (b *brokerProc) stats() (brokerStats, error) {
	if b.cmd == nil {
		return brokerStats{}, nil
	}
	if _, err := io.WriteString(b.in, "stats\n"); err != nil {
		return brokerStats{}, fmt.Errorf("%s broker: %w", b.kind, err)
	}
	line, err := b.out.ReadString('\n')
	if err != nil {
		return brokerStats{}, fmt.Errorf("%s broker: %w", b.kind, err)
	}
	st, err := parseStats(line)
	if err != nil {
		return brokerStats{}, fmt.Errorf("%s broker answered %q: %w", b.kind, line, err)
	}
	return st, nil
}

// parseStats reads a child's answer to "stats": "stats HEAP CPU" and,
// from the bundled broker, " KEY:COUNT" for every API key it served.
func parseStats(line string) (brokerStats, error) {
	f := strings.Fields(line)
	if len(f) < 3 || f[0] != "stats" {
		return brokerStats{}, errors.New("not a stats line")
	}
	heap, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return brokerStats{}, fmt.Errorf("heap: %w", err)
	}
	cpu, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return brokerStats{}, fmt.Errorf("cpu: %w", err)
	}
	st := brokerStats{heap: heap, cpu: time.Duration(cpu), requests: make(map[int16]int64)}
	for _, kv := range f[3:] {
		ks, ns, ok := strings.Cut(kv, ":")
		if !ok {
			return brokerStats{}, fmt.Errorf("request count %q is not KEY:COUNT", kv)
		}
		k, err := strconv.ParseInt(ks, 10, 16)
		if err != nil {
			return brokerStats{}, fmt.Errorf("request count %q: %w", kv, err)
		}
		n, err := strconv.ParseInt(ns, 10, 64)
		if err != nil {
			return brokerStats{}, fmt.Errorf("request count %q: %w", kv, err)
		}
		st.requests[int16(k)] = n
	}
	return st, nil
}

// close stops the child and waits for it (an external cluster is left
// alone).
func (b *brokerProc) close() error {
	if b.cmd == nil {
		return nil
	}
	b.in.Close()
	done := make(chan error, 1)
	go func() { done <- b.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		b.cmd.Process.Kill()
		<-done
		return errors.New(b.kind + " broker did not stop within 30s; killed")
	}
}
