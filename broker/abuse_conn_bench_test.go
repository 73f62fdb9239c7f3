package broker

// Abuse benchmarks of connections: frames declared and never sent, slow
// requests, and many idle connections. See abuse_bench_test.go.

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitClosed waits until every connection reads EOF or an error, up to
// limit, and returns when the last one closed (zero if some did not).
func waitClosed(conns []net.Conn, limit time.Duration) time.Duration {
	start := time.Now()
	done := make(chan struct{}, len(conns))
	for _, conn := range conns {
		go func(conn net.Conn) {
			_ = conn.SetReadDeadline(start.Add(limit))
			var buf [1]byte
			for {
				if _, err := conn.Read(buf[:]); err != nil {
					break
				}
			}
			done <- struct{}{}
		}(conn)
	}
	for range conns {
		<-done
	}
	if took := time.Since(start); took < limit {
		return took
	}
	return 0
}

// BenchmarkAbuseDeclaredFrames: 10 connections each declaring a 100 MiB
// frame and sending nothing more, with a ReadTimeout of
// KSHARE_ABUSE_READ_TIMEOUT (default 5s). Reports the resident memory they
// add and when the broker closed them.
func BenchmarkAbuseDeclaredFrames(b *testing.B) {
	readTimeout := envDuration("KSHARE_ABUSE_READ_TIMEOUT", 5*time.Second)
	for i := 0; i < b.N; i++ {
		c, pr := abuseCluster(b, abuseConnOpts(readTimeout, time.Hour)...)
		before := rssBytes(b)
		heapBefore, _ := heapInUse()
		var conns []net.Conn
		for n := 0; n < 10; n++ {
			conn, err := net.Dial("tcp", c.Bootstrap()[0])
			require.NoError(b, err)
			_, err = conn.Write(binary.BigEndian.AppendUint32(nil, 100<<20))
			require.NoError(b, err)
			conns = append(conns, conn)
		}
		pr.reset()
		time.Sleep(500 * time.Millisecond)
		// Fresh memory costs no RSS until written: the heap is what a
		// long-running process pays once its heap is reused.
		heapDuring, _ := heapInUse()
		during := rssBytes(b)
		closed := waitClosed(conns, readTimeout+10*time.Second)
		pr.finish(b)
		for _, conn := range conns {
			conn.Close()
		}
		b.ReportMetric(float64(int64(during)-int64(before))/mib, "rss-added-MiB")
		b.ReportMetric(float64(int64(heapDuring)-int64(heapBefore))/mib, "heap-added-MiB")
		b.ReportMetric(float64(during)/mib, "rss-MiB")
		b.ReportMetric(closed.Seconds(), "closed-after-s")
		c.Close()
	}
}

// BenchmarkAbuseIdleConnections: KSHARE_ABUSE_IDLE_CONNS (default 5000)
// connections that each sent one Metadata request and then nothing, and
// 200 slowloris connections trickling a request one byte every 500 ms
// (ReadTimeout 5s). Reports heap and stack per idle connection and when
// the slowloris connections were all closed.
func BenchmarkAbuseIdleConnections(b *testing.B) {
	idle := envInt("KSHARE_ABUSE_IDLE_CONNS", 5000)
	for i := 0; i < b.N; i++ {
		c, pr := abuseCluster(b, abuseConnOpts(5*time.Second, time.Hour)...)
		heap0, stack0 := heapInUse()
		var conns []net.Conn
		frame := requestFrame(metadataRequest(), 1)
		for n := 0; n < idle; n++ {
			conn, err := net.Dial("tcp", c.Bootstrap()[0])
			require.NoError(b, err)
			rc := &rawConn{t: b, conn: conn}
			rc.send(frame)
			_, _, err = rc.read()
			require.NoError(b, err)
			conns = append(conns, conn)
		}
		heap1, stack1 := heapInUse()
		// Both ends of each connection are in this process: the client
		// side holds a net.Conn and nothing else.
		b.ReportMetric(float64(heap1-heap0)/mib, "heap-MiB")
		b.ReportMetric(float64(stack1-stack0)/mib, "stacks-MiB")
		b.ReportMetric(float64(heap1+stack1-heap0-stack0)/float64(idle)/1024, "KiB/conn")

		var slow []net.Conn
		for n := 0; n < 200; n++ {
			conn, err := net.Dial("tcp", c.Bootstrap()[0])
			require.NoError(b, err)
			slow = append(slow, conn)
		}
		stop := make(chan struct{})
		go func() {
			for k := 0; ; k++ {
				for _, conn := range slow {
					_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
					_, _ = conn.Write(frame[k%len(frame) : k%len(frame)+1])
				}
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
		pr.reset()
		closed := waitClosed(slow, 30*time.Second)
		close(stop)
		pr.finish(b)
		b.ReportMetric(closed.Seconds(), "slowloris-closed-after-s")
		for _, conn := range append(conns, slow...) {
			conn.Close()
		}
		c.Close()
	}
}
