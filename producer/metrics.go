package producer

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kshare-go/kshare/internal/txn"
)

// latencyWindow is how many recent commit latencies the percentiles cover.
const latencyWindow = 4096

// Metrics is a snapshot of a Producer's counters since it was created.
type Metrics struct {
	// TransactionsCommitted and TransactionsAborted count transactions
	// that ended with a commit or an abort.
	TransactionsCommitted int64
	TransactionsAborted   int64
	// CommitLatencyP50 and CommitLatencyP99 are percentiles of the
	// duration of successful CommitTransaction calls (flush, share
	// acknowledgements and EndTxn) over the last 4096 commits; zero before
	// the first.
	CommitLatencyP50 time.Duration
	CommitLatencyP99 time.Duration
	// RecordsProduced and BytesProduced count records the brokers wrote
	// (whatever their transaction's outcome) and their key, value and
	// header bytes.
	RecordsProduced int64
	BytesProduced   int64
	// ShareAcksCommitted counts acknowledged offsets in committed
	// transactions.
	ShareAcksCommitted int64
}

type metrics struct {
	records atomic.Int64
	bytes   atomic.Int64

	mu        sync.Mutex
	latencies []time.Duration // ring of the last latencyWindow commits
	next      int
}

func (m *metrics) init() { m.latencies = make([]time.Duration, 0, latencyWindow) }

func (m *metrics) produced(records, bytes int64) {
	m.records.Add(records)
	m.bytes.Add(bytes)
}

func (m *metrics) commit(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.latencies) < latencyWindow {
		m.latencies = append(m.latencies, d)
		return
	}
	m.latencies[m.next] = d
	m.next = (m.next + 1) % latencyWindow
}

func (m *metrics) snapshot(s txn.Stats) Metrics {
	out := Metrics{
		TransactionsCommitted: s.Committed,
		TransactionsAborted:   s.Aborted,
		RecordsProduced:       m.records.Load(),
		BytesProduced:         m.bytes.Load(),
		ShareAcksCommitted:    s.ShareAcksCommitted,
	}
	m.mu.Lock()
	lat := slices.Clone(m.latencies)
	m.mu.Unlock()
	if len(lat) > 0 {
		slices.Sort(lat)
		out.CommitLatencyP50 = percentile(lat, 50)
		out.CommitLatencyP99 = percentile(lat, 99)
	}
	return out
}

// percentile returns the nearest-rank percentile of sorted values.
func percentile(sorted []time.Duration, pct int) time.Duration {
	rank := (pct*len(sorted) + 99) / 100
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}
