package eos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/shareconsumer"
)

// runScope is what Run and RunCheckpoint share while the pipeline runs:
// a context that ends with the caller's, at MaxDuration, or at the first
// error of a part of the run (fail), and the goroutines of those parts.
type runScope struct {
	// run ends with the caller's context or at MaxDuration; ctx also ends
	// when a part fails or the run is over. Both end by cancellation, never
	// by a deadline, MaxDuration included: a client's dial that an expected
	// stop cuts short then fails with context.Canceled, which kgo does not
	// log as a broker it could not reach (it does log a dial that ran into
	// a deadline, at WARN).
	run, ctx context.Context
	cancel   context.CancelCauseFunc
	stop     context.CancelFunc
	timer    *time.Timer
	start    time.Time

	wg       sync.WaitGroup
	failOnce sync.Once
	err      error // the first failure
}

// newRunScope starts the clock of a run that may last maxDuration, setup
// and input included, so that -max-duration bounds a run whose cluster
// stops answering while it writes the input.
func newRunScope(parent context.Context, maxDuration time.Duration) *runScope {
	s := &runScope{start: time.Now()}
	s.run, s.cancel = context.WithCancelCause(parent)
	s.timer = time.AfterFunc(maxDuration, func() { s.cancel(fmt.Errorf("max duration %v", maxDuration)) })
	s.ctx, s.stop = context.WithCancel(s.run)
	return s
}

// release frees the scope's timer and contexts; end calls it.
func (s *runScope) release() {
	s.timer.Stop()
	s.stop()
	s.cancel(nil)
}

// stoppedInSetup judges a run whose setup (topics, group configs, the
// input) failed with setupErr. If the caller's context or MaxDuration ended
// it, the run was stopped early rather than refused: ok is true and the
// result is INCOMPLETE with nothing processed, so that the command still
// prints its table and verdict. Otherwise ok is false and setupErr is the
// run's error. Either way the scope is released.
func (s *runScope) stoppedInSetup(records int, setupErr error) (r Result, ok bool) {
	defer s.release()
	if s.run.Err() == nil || !errors.Is(setupErr, context.Canceled) {
		return Result{}, false
	}
	stoppedBy := context.Cause(s.run).Error() + " while setting up"
	return NewResult(Check{Inputs: records, Unacknowledged: records}, stoppedBy, time.Since(s.start)), true
}

// fail stops the run because of err; the first failure is the one
// reported.
func (s *runScope) fail(err error) {
	s.failOnce.Do(func() { s.err = err })
	s.stop()
}

// spawn runs fn(s.ctx) in a goroutine that end waits for.
func (s *runScope) spawn(fn func(ctx context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn(s.ctx)
	}()
}

// end stops every part and waits for them, given the error with which
// watching the run ended (nil: every input was acknowledged). It returns
// how long the run took, why it stopped early ("" if it did not, or if a
// part failed) and the first failure of a part.
func (s *runScope) end(watchErr error) (elapsed time.Duration, stoppedBy string, err error) {
	s.stop()
	s.wg.Wait()
	s.release()
	elapsed = time.Since(s.start)
	if s.err != nil {
		return elapsed, "", s.err
	}
	if watchErr != nil {
		stoppedBy = context.Cause(s.run).Error()
	}
	return elapsed, stoppedBy, nil
}

// checkAndJudge checks the outcome with check (see finalCheck) and judges it; a
// run that acknowledged everything was not stopped early, whatever ended
// it.
func checkAndJudge(ctx context.Context, elapsed time.Duration, stoppedBy string, check func(ctx context.Context) (Check, error)) (Result, error) {
	c, err := check(ctx)
	if err != nil {
		return Result{}, err
	}
	if c.Unacknowledged == 0 {
		stoppedBy = ""
	}
	return NewResult(c, stoppedBy, elapsed), nil
}

// deliveries counts a poll's records into stats (polled, redelivered) and
// reports, per record, whether it was delivered as often as limit allows.
// cons may be nil (a loop that never called Started): delivery counts are
// then unknown.
func deliveries(cons *shareconsumer.Consumer, records []*kgo.Record, stats *runStats, limit int) []bool {
	stats.polled.Add(int64(len(records)))
	atLimit := make([]bool, len(records))
	if cons == nil {
		return atLimit
	}
	for i, r := range records {
		n, ok := cons.DeliveryCount(r)
		if ok && n > 1 {
			stats.redelivered.Add(1)
		}
		atLimit[i] = ok && int(n) >= limit
	}
	return atLimit
}
