package eos

import (
	"context"
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
	// when a part fails or the run is over.
	run, ctx     context.Context
	cancel, stop context.CancelFunc
	start        time.Time

	wg       sync.WaitGroup
	failOnce sync.Once
	err      error // the first failure
}

func newRunScope(parent context.Context, maxDuration time.Duration) *runScope {
	s := &runScope{start: time.Now()}
	s.run, s.cancel = context.WithTimeoutCause(parent, maxDuration, fmt.Errorf("max duration %v", maxDuration))
	s.ctx, s.stop = context.WithCancel(s.run)
	return s
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
	s.cancel()
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
