package benthos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/shareconsumer"
)

// ackReq is what the AckFunc of one batch asks the acker to commit: the
// handles to accept (dropped messages), release and reject (nacked ones).
// Handles that an output claimed are skipped when it is served.
type ackReq struct {
	accept, release, reject []*pendingAck
	cause                   error // the nack's error, for logs
	done                    chan error
}

func (r *ackReq) empty() bool {
	return len(r.accept)+len(r.release)+len(r.reject) == 0
}

// acker commits the acknowledgements that no output committed, in
// acknowledgement-only transactions of the input's acknowledger. One
// goroutine serves every AckFunc: the requests that queue while a commit
// runs are merged into the next one, so a pipeline that drops a few
// messages of every batch adds one transaction per round, not one per
// batch.
type acker struct {
	cons    *shareconsumer.Consumer
	ack     *acknowledger.Acknowledger
	ledger  *ledger
	timeout time.Duration
	log     *service.Logger

	mu      sync.Mutex
	queue   []*ackReq
	closing bool
	wake    chan struct{} // capacity 1
	exited  chan struct{}

	fatalErr atomic.Pointer[error]
	metrics  *inputMetrics
	// stuck, if set (before the first submit), is told once that the
	// acknowledger failed fatally: the input can commit nothing more.
	stuck func(cause error)
}

func newAcker(cons *shareconsumer.Consumer, ack *acknowledger.Acknowledger, l *ledger, timeout time.Duration, log *service.Logger, m *inputMetrics) *acker {
	a := &acker{
		cons: cons, ack: ack, ledger: l, timeout: timeout, log: log, metrics: m,
		wake: make(chan struct{}, 1), exited: make(chan struct{}),
	}
	go a.loop()
	return a
}

// submit queues req and waits, within ctx, for its commit. The commit
// goes on if ctx ends first (its handles are the acker's by then).
func (a *acker) submit(ctx context.Context, req *ackReq) error {
	if req.empty() {
		return nil
	}
	req.done = make(chan error, 1)
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		// The input is closing: the consumer gives back whatever was
		// not committed.
		return errors.New("kshare_share: closed before these acknowledgements could commit; their records come back to the group")
	}
	a.queue = append(a.queue, req)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("kshare_share: acknowledgement commit still running: %w", ctx.Err())
	}
}

// fatal returns the error that stopped the acker from committing at all
// (its acknowledger was fenced, or failed otherwise for good), or nil.
func (a *acker) fatal() error {
	if p := a.fatalErr.Load(); p != nil {
		return *p
	}
	return nil
}

// close serves what is queued and stops the loop.
func (a *acker) close() {
	a.mu.Lock()
	a.closing = true
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	<-a.exited
}

func (a *acker) loop() {
	defer close(a.exited)
	for range a.wake {
		for {
			a.mu.Lock()
			reqs, closing := a.queue, a.closing
			a.queue = nil
			a.mu.Unlock()
			if len(reqs) == 0 {
				if closing {
					return
				}
				break
			}
			err := a.commit(reqs)
			for _, r := range reqs {
				r.done <- err
			}
		}
	}
}

// commit claims the still-pending handles of reqs and commits their
// acknowledgements in one transaction. It settles every handle it claimed:
// committed, or released when the transaction aborted (the consumer then
// gives the records back at once), or left in doubt when not even the
// abort could learn the outcome.
func (a *acker) commit(reqs []*ackReq) error {
	if err := a.fatal(); err != nil {
		return err
	}
	var accept, release, reject []*pendingAck
	for _, r := range reqs {
		accept = append(accept, r.accept...)
		release = append(release, r.release...)
		reject = append(reject, r.reject...)
	}
	accept, _ = a.ledger.claim(accept, a)
	release, _ = a.ledger.claim(release, a)
	reject, _ = a.ledger.claim(reject, a)
	all := append(append(append([]*pendingAck(nil), accept...), release...), reject...)
	if len(all) == 0 {
		return nil
	}
	acks := a.cons.Acks(records(accept), kshare.AckAccept).
		Merge(a.cons.Acks(records(release), kshare.AckRelease)).
		Merge(a.cons.Acks(records(reject), kshare.AckReject))
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	err := a.ack.CommitAcknowledgements(ctx, acks, a.cons.GroupMetadata())
	if err != nil {
		a.metrics.failed.add(1)
	}
	switch {
	case err == nil:
		a.settleCommitted(accept, release, reject)
		a.metrics.accepted.add(len(accept))
		a.metrics.released.add(len(release))
		a.metrics.rejected.add(len(reject))
		return nil
	case errors.Is(err, kshare.ErrInDoubt):
		// Not even the abort learned the outcome; keep asking within
		// the timeout.
		a.ledger.settle(all, a, inDoubt)
		for ctx.Err() == nil {
			aerr := a.ack.AbortAcknowledgements(ctx)
			switch {
			case errors.Is(aerr, kshare.ErrCommitted):
				a.settleCommitted(accept, release, reject)
				a.metrics.accepted.add(len(accept))
				a.metrics.released.add(len(release))
				a.metrics.rejected.add(len(reject))
				return nil
			case aerr == nil:
				a.ledger.settle(all, a, released)
				return fmt.Errorf("kshare_share: acknowledgement-only transaction aborted; %d records come back to the group: %w", len(all), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Errorf("kshare_share: outcome of an acknowledgement-only transaction unknown (the acknowledger learns it when it next commits or closes): %w", err)
	case errors.Is(err, kshare.ErrFatal), errors.Is(err, kshare.ErrUnsupported), errors.Is(err, kshare.ErrClosed):
		// CommitAcknowledgements aborted before returning (or sent
		// nothing): nothing of it commits.
		// The acknowledger resolved what it had staged as not
		// committed: the consumer releases those records at once.
		a.ledger.settle(all, a, released)
		ferr := fmt.Errorf("kshare_share: acknowledgement-only transaction failed for good: %w", err)
		if !errors.Is(err, kshare.ErrClosed) && a.fatalErr.CompareAndSwap(nil, &ferr) && a.stuck != nil {
			a.stuck(err)
		}
		return ferr
	default:
		// Aborted before returning: the consumer releases the records
		// at once, and they come back.
		a.ledger.settle(all, a, released)
		a.log.Warnf("kshare_share: acknowledgement-only transaction of %d records aborted; they come back to the group: %v", len(all), err)
		return fmt.Errorf("kshare_share: acknowledgement-only transaction aborted: %w", err)
	}
}

// settleCommitted settles the handles of a transaction that committed.
// Accepted and rejected records are final: committed. A released record
// was given back (RELEASE is sent outside the transaction, so it is given
// back whatever the outcome): that delivery is over, and the group
// delivers the record again.
func (a *acker) settleCommitted(accept, release, reject []*pendingAck) {
	a.ledger.settle(accept, a, committed)
	a.ledger.settle(reject, a, committed)
	a.ledger.settle(release, a, released)
}

// records returns the records of hs.
func records(hs []*pendingAck) []*kgo.Record {
	out := make([]*kgo.Record, len(hs))
	for i, h := range hs {
		out[i] = h.rec
	}
	return out
}
