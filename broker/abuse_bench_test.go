package broker

// Abuse benchmarks (issue 14): each row of the table, run on
// loopback beside a prober, a client producing one record every 10 ms to
// its own partition, whose latencies say how much the abuse delays
// everybody else. Each benchmark runs its experiment once per iteration;
// run them one at a time with
//
//	go test -run '^$' -bench 'BenchmarkAbuse' -benchtime 1x ./broker/
//
// Sizes have moderate defaults and grow with environment variables
// (KSHARE_ABUSE_*, see each benchmark) up to the figures. The
// figures of a run are in the closing note of issue 14.

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// envInt reads a size knob of the benchmarks.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// envDuration reads a duration knob of the benchmarks.
func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// prober produces one record every 10 ms to topic/partition over its own
// connection and records how long each produce takes.
type prober struct {
	c       *Cluster
	conn    net.Conn
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	lat     []time.Duration
	failure error
}

func startProber(tb testing.TB, c *Cluster, topic string, partition int32) *prober {
	tb.Helper()
	leader, err := c.Leader(topic, partition)
	require.NoError(tb, err)
	conn, err := net.DialTimeout("tcp", c.nodes[leader].addr(), 5*time.Second)
	require.NoError(tb, err)
	p := &prober{c: c, conn: conn, stop: make(chan struct{}), done: make(chan struct{})}
	go p.run(topic, partition)
	return p
}

func (p *prober) run(topic string, partition int32) {
	defer close(p.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for corr := int32(1); ; corr++ {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		req := kmsg.NewPtrProduceRequest()
		req.Version = 9
		req.Acks, req.TimeoutMillis = 1, 30000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = partition
		rp.Records = buildBatch([]kv{{value: []byte("probe")}}, -1, -1, -1, false, false, time.Now())
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		start := time.Now()
		_ = p.conn.SetDeadline(start.Add(2 * time.Minute))
		err := p.roundTrip(requestFrame(req, corr))
		elapsed := time.Since(start)
		p.mu.Lock()
		if err != nil {
			p.failure = err
			p.mu.Unlock()
			return
		}
		p.lat = append(p.lat, elapsed)
		p.mu.Unlock()
	}
}

func (p *prober) roundTrip(frame []byte) error {
	if _, err := p.conn.Write(frame); err != nil {
		return err
	}
	var size [4]byte
	if _, err := io.ReadFull(p.conn, size[:]); err != nil {
		return err
	}
	_, err := io.CopyN(io.Discard, p.conn, int64(binary.BigEndian.Uint32(size[:])))
	return err
}

// reset forgets the latencies so far (those of the set-up), and the
// loop's longest turn. It collects the set-up's garbage first, so that
// the measurement does not pay for it.
func (p *prober) reset() {
	runtime.GC()
	p.mu.Lock()
	p.lat = p.lat[:0]
	p.mu.Unlock()
	_ = p.c.do(func() { resetLongestTurn(p.c) })
}

// finish stops the prober and reports its latencies as metrics, with the
// loop's longest turn since reset: the prober's latency includes the
// machine's scheduling, the loop's turn is the broker's own doing.
func (p *prober) finish(b *testing.B) {
	close(p.stop)
	<-p.done
	p.conn.Close()
	var turn time.Duration
	if err := p.c.do(func() { turn = longestTurn(p.c) }); err == nil {
		b.ReportMetric(float64(turn)/float64(time.Millisecond), "loop-max-ms")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	require.NoError(b, p.failure, "the prober's produce failed")
	lat := append([]time.Duration(nil), p.lat...)
	if len(lat) == 0 {
		b.ReportMetric(0, "probes")
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(len(lat)), "probes")
	b.ReportMetric(ms(lat[len(lat)/2]), "probe-p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "probe-p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "probe-max-ms")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuOver returns the share of one core the process used during d.
func cpuOver(d time.Duration) float64 {
	start, wall := cpuTime(), time.Now()
	time.Sleep(d)
	return 100 * float64(cpuTime()-start) / float64(time.Since(wall))
}

// heapInUse returns the live heap and goroutine stacks after a GC.
func heapInUse() (heap, stacks uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ms.StackInuse
}

// rssBytes returns the process's resident set size, after handing freed
// memory back to the OS.
func rssBytes(tb testing.TB) uint64 {
	debug.FreeOSMemory()
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(tb, err)
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			require.NoError(tb, err)
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS in /proc/self/status")
	return 0
}

const mib = 1 << 20

// abuseCluster starts a one-node cluster with the prober's topic.
func abuseCluster(b *testing.B, opts ...Opt) (*Cluster, *prober) {
	b.Helper()
	c, err := NewCluster(append(abuseOpts(), opts...)...)
	require.NoError(b, err)
	b.Cleanup(func() { c.Close() })
	// The prober's own records are kept within 1 MiB, so that they do not
	// count as growth.
	require.NoError(b, c.do(func() {
		c.createTopic("probe", 1, map[string]string{"retention.bytes": fmt.Sprint(mib)}, false)
	}))
	return c, startProber(b, c, "probe", 0)
}

// fillPartition stores batches of batchBytes until the partition holds
// total bytes, with increasing timestamps from base.
func fillPartition(b *testing.B, c *Cluster, topic string, partition int32, total, batchBytes int, base time.Time) {
	b.Helper()
	value := make([]byte, max(batchBytes-80, 1))
	require.NoError(b, c.do(func() {
		p := c.partitionOf(topic, partition)
		for i := 0; p.bytes < int64(total); i++ {
			ts := base.Add(time.Duration(i) * time.Millisecond)
			p.store(buildBatch([]kv{{value: value}}, -1, -1, -1, false, false, ts), 0, -1, -1, false, false, ts.UnixMilli(), time.Now())
		}
	}))
}

// timeRequest sends req over a fresh connection and returns how long its
// answer took and the answer's size.
func timeRequest(b *testing.B, c *Cluster, node int32, req kmsg.Request) (time.Duration, int) {
	b.Helper()
	rc := dialNode(b, c, node)
	require.NoError(b, rc.conn.SetDeadline(time.Now().Add(10*time.Minute)))
	frame := requestFrame(req, 1)
	start := time.Now()
	rc.send(frame)
	_, body, err := rc.read()
	require.NoError(b, err)
	return time.Since(start), len(body)
}

// abuseRequest sends the abusive request beside the prober and reports
// its size, how long its answer took, and the prober's latencies.
func abuseRequest(b *testing.B, c *Cluster, pr *prober, req kmsg.Request) {
	b.Helper()
	b.ReportMetric(float64(len(requestFrame(req, 1)))/1024, "request-KiB")
	pr.reset()
	b.ResetTimer()
	var took time.Duration
	for i := 0; i < b.N; i++ {
		took, _ = timeRequest(b, c, 0, req)
	}
	b.StopTimer()
	time.Sleep(50 * time.Millisecond) // what the prober sent meanwhile comes back
	pr.finish(b)
	b.ReportMetric(float64(took)/float64(time.Millisecond), "request-ms")
}

// BenchmarkAbuseListOffsets: one ListOffsets request naming one partition
// thousands of times (KSHARE_ABUSE_BATCHES batches, default 200000; the
// issue used 1M and 200k), and one naming 10,000 partitions once each.
func BenchmarkAbuseListOffsets(b *testing.B) {
	batches := envInt("KSHARE_ABUSE_BATCHES", 200000)
	for _, entries := range []int{5000, 10000} {
		b.Run(fmt.Sprintf("repeated-%d", entries), func(b *testing.B) {
			c, pr := abuseCluster(b)
			require.NoError(b, c.do(func() { c.createTopic("data", 1, nil, false) }))
			base := time.Now().Add(-time.Hour)
			fillPartition(b, c, "data", 0, batches*90, 90, base)
			req := listOffsetsReq("data", nil, 0)
			for i := 0; i < entries; i++ {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Timestamp, rp.CurrentLeaderEpoch = base.Add(time.Duration(batches-10)*time.Millisecond).UnixMilli(), -1
				req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
			}
			abuseRequest(b, c, pr, req)
		})
	}
	b.Run("distinct-10000-partitions", func(b *testing.B) {
		c, pr := abuseCluster(b)
		const parts = 10000
		require.NoError(b, c.do(func() { c.createTopic("wide", parts, nil, false) }))
		base := time.Now().Add(-time.Hour)
		for p := int32(0); p < parts; p++ {
			fillPartition(b, c, "wide", p, 50*90, 90, base)
		}
		ps := make([]int32, parts)
		for i := range ps {
			ps[i] = int32(i)
		}
		req := listOffsetsReq("wide", ps, base.Add(25*time.Millisecond).UnixMilli())
		abuseRequest(b, c, pr, req)
	})
}

// BenchmarkAbuseParkedFetch: a Fetch with MinBytes 2^31-1 and a 30 s wait
// parked over a partition of KSHARE_ABUSE_PARTITION_MB (default 256) MiB,
// for KSHARE_ABUSE_WATCH (default 10s), while the prober produces to that
// very partition (every produce is a change the parked fetch hears of).
// Reports the process's CPU while it waits, and the same without it.
func BenchmarkAbuseParkedFetch(b *testing.B) {
	size := envInt("KSHARE_ABUSE_PARTITION_MB", 256) * mib
	watch := envDuration("KSHARE_ABUSE_WATCH", 10*time.Second)
	for i := 0; i < b.N; i++ {
		c, err := NewCluster(abuseOpts()...)
		require.NoError(b, err)
		require.NoError(b, c.do(func() { c.createTopic("data", 1, nil, false) }))
		fillPartition(b, c, "data", 0, size, mib, time.Now().Add(-time.Hour))
		pr := startProber(b, c, "data", 0)
		idle := cpuOver(watch)
		pr.reset()
		rc := dialNode(b, c, 0)
		rc.send(requestFrame(fetchReq("data", 1<<31-1, 1<<31-1, 30000, fetchPart(0, 0, 1<<31-1)), 1))
		time.Sleep(100 * time.Millisecond)
		parked := cpuOver(watch)
		pr.finish(b)
		b.ReportMetric(idle, "cpu-%-prober-only")
		b.ReportMetric(parked, "cpu-%-with-parked-fetch")
		b.ReportMetric(float64(rssBytes(b))/mib, "rss-MiB")
		c.Close()
	}
}

// BenchmarkAbuseFetchHuge: one Fetch asking for 2^31-1 bytes of a
// partition of KSHARE_ABUSE_PARTITION_MB (default 256) MiB.
func BenchmarkAbuseFetchHuge(b *testing.B) {
	size := envInt("KSHARE_ABUSE_PARTITION_MB", 256) * mib
	c, pr := abuseCluster(b)
	require.NoError(b, c.do(func() { c.createTopic("data", 1, nil, false) }))
	fillPartition(b, c, "data", 0, size, mib, time.Now().Add(-time.Hour))
	rssBefore := rssBytes(b)
	pr.reset()
	b.ResetTimer()
	var took time.Duration
	var answer int
	for i := 0; i < b.N; i++ {
		took, answer = timeRequest(b, c, 0, fetchReq("data", 1<<31-1, 0, 0, fetchPart(0, 0, 1<<31-1)))
	}
	b.StopTimer()
	time.Sleep(50 * time.Millisecond)
	pr.finish(b)
	b.ReportMetric(float64(took)/float64(time.Millisecond), "request-ms")
	b.ReportMetric(float64(answer)/mib, "answer-MiB")
	b.ReportMetric(float64(int64(rssBytes(b))-int64(rssBefore))/mib, "rss-growth-MiB")
}

// BenchmarkAbuseCreateTopics: one CreateTopics of 10,000 names with '_'.
func BenchmarkAbuseCreateTopics(b *testing.B) {
	for i := 0; i < b.N; i++ {
		c, pr := abuseCluster(b)
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version = 7
		for n := 0; n < 10000; n++ {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = fmt.Sprintf("abuse_topic_%05d", n), 1, 1
			req.Topics = append(req.Topics, rt)
		}
		pr.reset()
		took, _ := timeRequest(b, c, 0, req)
		time.Sleep(50 * time.Millisecond)
		pr.finish(b)
		b.ReportMetric(float64(len(requestFrame(req, 1)))/1024, "request-KiB")
		b.ReportMetric(float64(took)/float64(time.Millisecond), "request-ms")
		c.Close()
	}
}

// requireOK fails on a non-zero error code.
func requireOK(tb testing.TB, code int16, what string) {
	tb.Helper()
	require.NoError(tb, kerr.ErrorForCode(code), what)
}
