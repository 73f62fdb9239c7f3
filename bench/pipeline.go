package main

// The measurement of a multi-worker pipeline run.
//
// Workers start together and join their group; the clock starts when the
// last of them has its first records (so group joins, which differ between
// share groups and consumer groups and are not the pipeline's speed, stay
// out) and stops when the run's target of distinct input records has
// committed. The rate is the records committed in between over that time.

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// pipeRun is one run of a pipeline with several workers.
type pipeRun struct {
	target  int
	workers int
	seen    *seen
	started []atomic.Bool
	active  atomic.Int32
	aborts  atomic.Int64
	// ledgerPolls and ledgerNanos add up the workers' Polls that resolved
	// against a claim ledger and the time that took.
	ledgerPolls, ledgerNanos atomic.Int64

	mu       sync.Mutex
	t0       time.Time // workers started
	tStart   time.Time // every worker active
	base     int64     // inputs committed at tStart
	allocs0  allocMeter
	tEnd     time.Time
	allocs   float64 // per record in the window
	bytes    float64
	lat      []time.Duration
	done     chan struct{}
	doneOnce sync.Once
}

// newPipeRun starts a run that ends when target of the inputs (indexes
// 0..inputs-1) have committed.
func newPipeRun(target, inputs, workers int) *pipeRun {
	return &pipeRun{
		target:  target,
		workers: workers,
		seen:    newSeen(inputs),
		started: make([]atomic.Bool, workers),
		t0:      time.Now(),
		done:    make(chan struct{}),
	}
}

// polled tells that worker w has records in hand.
func (p *pipeRun) polled(w int) {
	if p.started[w].Swap(true) {
		return
	}
	if int(p.active.Add(1)) == p.workers {
		p.mu.Lock()
		p.tStart, p.base, p.allocs0 = time.Now(), p.seen.count.Load(), startAllocs()
		p.mu.Unlock()
	}
}

// committed tells that worker w committed records, in a commit that took
// lat (0: the pipeline has no commit to time).
func (p *pipeRun) committed(recs []*kgo.Record, lat time.Duration) {
	for _, r := range recs {
		p.seen.mark(keyIndex(r.Key))
	}
	p.mu.Lock()
	if lat > 0 && !p.tStart.IsZero() {
		p.lat = append(p.lat, lat)
	}
	p.mu.Unlock()
	if p.seen.count.Load() >= int64(p.target) {
		p.doneOnce.Do(func() {
			p.mu.Lock()
			p.tEnd = time.Now()
			if !p.allocs0.zero() {
				// The allocation window closes when the last input
				// commits, before the workers shut down.
				p.allocs, p.bytes = p.allocs0.per(int(int64(p.target) - p.base))
			}
			p.mu.Unlock()
			close(p.done)
		})
	}
}

// result is the run's measurement; call after done.
func (p *pipeRun) result() (sample, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	start, base := p.tStart, p.base
	if start.IsZero() || start.After(p.tEnd) {
		// A worker never got a record: the run counts from the start.
		start, base = p.t0, 0
	}
	n := int64(p.target) - base
	if n <= 0 || !p.tEnd.After(start) {
		return sample{}, fmt.Errorf("the run finished before every worker was active (%d of %d inputs committed by then); use more records", base, p.target)
	}
	s := sample{
		Records: int(n),
		Seconds: p.tEnd.Sub(start).Seconds(),
		Aborts:  p.aborts.Load(),
		Dups:    p.seen.dups.Load(),
	}
	s.Rate = float64(n) / s.Seconds
	if polls := p.ledgerPolls.Load(); polls > 0 {
		s.LedgerPollMs = float64(p.ledgerNanos.Load()) / float64(polls) / 1e6
	}
	s.Allocs, s.AllocBytes = p.allocs, p.bytes
	if len(p.lat) > 0 {
		s.P50, s.P99 = ms(percentile(p.lat, 50)), ms(percentile(p.lat, 99))
		s.Commits = len(p.lat)
	}
	return s, nil
}

func (a allocMeter) zero() bool { return a == allocMeter{} }

// worker runs one pipeline worker until ctx ends; an error ends the run.
type worker func(ctx context.Context, w int, run *pipeRun) error

// runPipeline runs workers until target of the inputs committed or
// timeout.
// gate, if not nil, runs after the workers start and before the clock may
// start; it returns when the workers may go (consumer groups settle here).
func runPipeline(ctx context.Context, target, inputs, workers int, timeout time.Duration, work worker, gate func(ctx context.Context) error) (sample, error) {
	runtime.GC() // the previous run's garbage is not this run's cost
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := newPipeRun(target, inputs, workers)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := work(ctx, w, run); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("worker %d: %w", w, err)
			}
		}()
	}
	finish := func(err error) (sample, error) {
		cancel()
		wg.Wait()
		if err != nil {
			return sample{}, err
		}
		return run.result()
	}
	if gate != nil {
		if err := gate(ctx); err != nil {
			return finish(fmt.Errorf("workers did not settle: %w", err))
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-run.done:
		return finish(nil)
	case err := <-errc:
		return finish(err)
	case <-timer.C:
		return finish(fmt.Errorf("%w: %d of %d inputs committed in %v", errTimeout, run.seen.count.Load(), target, timeout))
	case <-ctx.Done():
		return finish(ctx.Err())
	}
}
