package eos

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// runStats is what the pipeline's hooks and the fault injector count while
// a run runs; both pipelines share it.
type runStats struct {
	// committed and aborted count transactions (consume-transform-produce)
	// or reader commits and releases (checkpoints).
	committed, aborted atomic.Int64
	// outputs counts the records output by what committed, as the
	// pipeline counts them.
	outputs atomic.Int64
	// polled counts the records the pipeline was delivered.
	polled      atomic.Int64
	redelivered atomic.Int64
	// staleCommits counts the commits of workers stopped past their
	// locks (Faults.PausePastLock): each is a violation.
	staleCommits atomic.Int64
	faults       sync.Map // name -> *atomic.Int64
	// archived maps the value of every input whose delivery at the
	// group's limit ended without a commit to why (an Archive).
	archived sync.Map

	mu        sync.Mutex
	latencies []time.Duration

	waits waits
}

func (s *runStats) fault(name string) {
	v, _ := s.faults.LoadOrStore(name, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (s *runStats) faultCounts() map[string]int64 {
	out := map[string]int64{}
	s.faults.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// noteArchived records that the delivery of value at the group's limit
// ended without a commit, for why. A failure outranks an earlier purpose.
func (s *runStats) noteArchived(value string, why Archive) {
	if prev, loaded := s.archived.LoadOrStore(value, why); loaded && prev.(Archive) < why {
		s.archived.Store(value, why)
	}
}

func (s *runStats) archivedValues() map[string]Archive {
	out := map[string]Archive{}
	s.archived.Range(func(k, v any) bool {
		out[k.(string)] = v.(Archive)
		return true
	})
	return out
}

func (s *runStats) commitLatency(d time.Duration) {
	s.mu.Lock()
	s.latencies = append(s.latencies, d)
	s.mu.Unlock()
}

// percentileMillis returns the p-th commit latency in milliseconds.
func (s *runStats) percentileMillis(p float64) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.latencies) == 0 {
		return 0
	}
	sorted := append([]time.Duration(nil), s.latencies...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return float64(sorted[int(p*float64(len(sorted)-1))]) / float64(time.Millisecond)
}

// Progress is the state of a run, reported about once a second.
type Progress struct {
	Elapsed time.Duration // since the pipeline started
	Inputs  int           // input records in all
	// Outputs counts the records output by what committed so far, as the
	// pipeline counts them; Acknowledged the inputs the group's start
	// offsets have passed (acknowledged, rejected or archived: the
	// table's "inputs acknowledged").
	Outputs      int64
	Acknowledged int64
	// Committed and Aborted count transactions committed and aborted
	// (consume-transform-produce) or checkpoints completed and failed;
	// Labels name them, e.g. {"transactions", "committed", "aborted"}.
	Committed, Aborted int64
	Labels             [3]string
	// Waiting says what the run is waiting for when nothing moved since
	// the last report ("" when something did).
	Waiting string
}

// String formats the progress as one line.
func (p Progress) String() string {
	line := fmt.Sprintf("%5.1fs  output %d  acknowledged %d/%d  %s %s %d %s %d",
		p.Elapsed.Seconds(), p.Outputs, p.Acknowledged, p.Inputs, p.Labels[0], p.Labels[1], p.Committed, p.Labels[2], p.Aborted)
	if p.Waiting != "" {
		line += "  | " + p.Waiting
	}
	return line
}

// waits are the known reasons for the run to stand still: records locked
// by a killed worker until their locks run out, a worker stalled past its
// locks, a checkpoint held open. Each ends at a known time at the latest.
type waits struct {
	mu   sync.Mutex
	list []*wait
}

type wait struct {
	what    string
	records int
	until   time.Time
}

// add notes that the run may wait for what, about records records, until
// until at the latest; the returned wait is passed to done if it ends
// sooner.
func (w *waits) add(what string, records int, until time.Time) *wait {
	x := &wait{what: what, records: records, until: until}
	w.mu.Lock()
	w.list = append(w.list, x)
	w.mu.Unlock()
	return x
}

// done drops x.
func (w *waits) done(x *wait) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, y := range w.list {
		if y == x {
			w.list = append(w.list[:i], w.list[i+1:]...)
			return
		}
	}
}

// describe says what the run waits for at now, the waits that end first
// first, and drops those that are over; "" if it knows of none.
func (w *waits) describe(now time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	live := w.list[:0]
	for _, x := range w.list {
		if x.until.After(now) {
			live = append(live, x)
		}
	}
	clear(w.list[len(live):])
	w.list = live
	sorted := append([]*wait(nil), live...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].until.Before(sorted[j].until) })
	parts := make([]string, 0, len(sorted))
	for _, x := range sorted {
		what := x.what
		if x.records > 0 {
			what = fmt.Sprintf("%s (%d records)", what, x.records)
		}
		parts = append(parts, fmt.Sprintf("%s, %.1f s left", what, x.until.Sub(now).Seconds()))
	}
	if len(parts) == 0 {
		return ""
	}
	return "waiting for " + strings.Join(parts, "; ")
}
