package shareconsumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
)

// Renew extends the acquisition locks of records Poll returned, with a
// RENEW acknowledgement (KIP-1222, ShareAcknowledge v2, Kafka 4.2+), for
// an application whose work on some records may outlast their lock: in
// Explicit mode, records not marked by Ack yet; in Transactional mode,
// records not staged yet (with RenewHeldLocks(true) the consumer renews
// those by itself). It renews only the records given, sends the RENEW at
// once (the Java client and kgo send it with the next commit or poll) and
// waits, within ctx, for the leaders' answers. After a nil return each
// record's lock runs a lock duration from when the RENEW was sent
// (LockDeadline says until when) and the record is still to be
// acknowledged or staged; a record that is then left alone is delivered
// again when that lock ends.
//
// It returns nil when every record's lock was extended, and a
// *RenewError (kshare.ErrAbortable) naming each record that was not and
// why: ErrLockExpired for a lock that is gone or that its leader would
// not renew (a leader without ShareAcknowledge v2 included: the message
// says so), the record will be delivered again, do not acknowledge it;
// ctx's error for records whose answer had not come when ctx ended (the
// RENEW may still take effect). The other records of a *RenewError were
// renewed. A Close while it waits fails every record with
// ErrLockExpired: Close gives them back. Records the application should
// not renew fail the whole call before anything is sent, naming the
// first: ErrNotHeld (kshare.ErrUsage) for a nil record or one the
// consumer does not hold, kshare.ErrUsage for one marked by Ack or staged
// (the consumer renews staged records itself). It fails with
// kshare.ErrUsage in Implicit mode or for a nil ctx, and kshare.ErrClosed
// when called after Close began.
func (c *Consumer) Renew(ctx context.Context, recs ...*kgo.Record) error {
	const op = "renew locks"
	if !c.made() {
		return errNotMade(op)
	}
	c.mu.Lock()
	switch {
	case c.closing: // whatever the arguments
		c.mu.Unlock()
		return errClosed(op)
	case ctx == nil:
		c.mu.Unlock()
		return errNilContext(op)
	case c.cfg.mode == Implicit:
		c.mu.Unlock()
		return errWrongMode(op, c.cfg.mode)
	}
	w := &renewCall{pending: make(map[*acquisition][]int64), done: make(chan struct{})}
	asked, err := c.askRenewalsLocked(w, recs, time.Now())
	if err != nil {
		c.mu.Unlock()
		return errs.Usage(op, err)
	}
	if len(w.pending) == 0 {
		c.mu.Unlock()
		return w.result()
	}
	for _, a := range asked {
		a.sess.renewRescanLocked()
		a.sess.poke()
	}
	c.mu.Unlock()

	// The sessions settle every acquisition asked; the recheck settles
	// those whose lock is lost in a way no session step reports, rather
	// than waiting until ctx ends.
	recheck := time.NewTicker(renewRecheck)
	defer recheck.Stop()
	for {
		select {
		case <-w.done:
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.closing {
				return w.closedResult()
			}
			return w.result()
		case <-c.closeCh:
			c.mu.Lock()
			defer c.mu.Unlock()
			w.abandonLocked()
			return w.closedResult()
		case <-ctx.Done():
			c.mu.Lock()
			defer c.mu.Unlock()
			err := fmt.Errorf("no answer before the call's context ended: %w", context.Cause(ctx))
			for a := range w.pending {
				w.dropLocked(a, err)
			}
			return w.result()
		case <-recheck.C:
			c.mu.Lock()
			now := time.Now()
			for a := range w.pending {
				if err := c.renewBlockedLocked(a, now); err != nil {
					w.dropLocked(a, err)
				}
			}
			c.mu.Unlock()
		}
	}
}

// askRenewalsLocked checks each record and asks its acquisition for a
// RENEW on behalf of w, cutting an acquisition so that only the records
// asked for are renewed. It returns the acquisitions asked; the records
// whose locks cannot be renewed are failed in w. A record the application
// should not renew (not held, marked by Ack, staged) fails the whole
// call, before anything is asked: the error says which.
func (c *Consumer) askRenewalsLocked(w *renewCall, recs []*kgo.Record, now time.Time) ([]*acquisition, error) {
	byAcq := make(map[*acquisition][]int64)
	var order []*acquisition
	seen := make(map[renewKey]bool, len(recs))
	for _, r := range recs {
		if r == nil {
			return nil, fmt.Errorf("a nil record: %w", ErrNotHeld)
		}
		k := renewKey{kshare.TopicPartition{Topic: r.Topic, Partition: r.Partition}, r.Offset}
		if seen[k] {
			continue
		}
		seen[k] = true
		a, idx, ok := c.held.find(k.tp, k.off)
		if !ok {
			return nil, fmt.Errorf("%s/%d offset %d (acknowledged or released since Poll returned it, forgotten after its lock ended, or never returned by Poll): %w", k.tp.Topic, k.tp.Partition, k.off, ErrNotHeld)
		}
		misuse, lost := c.renewableLocked(a, idx, r, now)
		switch {
		case misuse != nil:
			return nil, fmt.Errorf("%s/%d offset %d: %w", k.tp.Topic, k.tp.Partition, k.off, misuse)
		case lost != nil:
			w.fail(k, lost)
			continue
		}
		if byAcq[a] == nil {
			order = append(order, a)
		}
		byAcq[a] = append(byAcq[a], k.off)
	}
	var asked []*acquisition
	for _, a := range order {
		for _, piece := range c.cutForRenewalLocked(a, byAcq[a]) {
			offs := byAcq[a][:0:0]
			for _, off := range byAcq[a] {
				if piece.contains(off) {
					offs = append(offs, off)
				}
			}
			if len(offs) == 0 {
				continue
			}
			piece.asked = append(piece.asked, w)
			w.pending[piece] = offs
			for _, off := range offs {
				w.asked = append(w.asked, renewKey{piece.tp, off})
			}
			asked = append(asked, piece)
		}
	}
	return asked, nil
}

// renewableLocked says why the record r, held at idx of a, cannot be
// renewed now: misuse (ErrNotHeld, kshare.ErrUsage) when the application
// should not ask, lost (ErrLockExpired) when its lock is gone or cannot be
// renewed.
func (c *Consumer) renewableLocked(a *acquisition, idx int, r *kgo.Record, now time.Time) (misuse, lost error) {
	if d := deliveryOf(r); d != nil && d != a.delivery {
		return nil, fmt.Errorf("delivery %d ended, delivery %d holds it: %w", d.count, a.deliveries, ErrLockExpired)
	}
	switch a.states[idx] {
	case stDelivered:
	case stDecided:
		return fmt.Errorf("marked %s by Ack; Commit or the next Poll sends it: %w", kshare.AckType(a.decisions[idx]), kshare.ErrUsage), nil
	case stStaged:
		return fmt.Errorf("staged in a transaction, whose records the consumer renews itself: %w", kshare.ErrUsage), nil
	case stBuffered, stResolving:
		return nil, fmt.Errorf("delivered again since Poll returned it: %w", ErrLockExpired)
	default:
		return fmt.Errorf("no longer held: %w", ErrNotHeld), nil
	}
	return nil, c.renewBlockedLocked(a, now)
}

// renewBlockedLocked says why a, asked for a RENEW, cannot have one, or
// nil: its lock is gone, a leader refused it a renewal, or the
// application settled its records meanwhile. A RENEW in flight is not
// blocked: its answer settles a.
func (c *Consumer) renewBlockedLocked(a *acquisition, now time.Time) error {
	switch {
	case a.renewing:
		return nil
	case a.dead:
		return errLockLost
	case !now.Before(a.deadline):
		return fmt.Errorf("lock ended at %s: %w", a.deadline.Format(time.RFC3339Nano), ErrLockExpired)
	case a.renewStopped && c.renewMissing[a.sess.node]:
		return errCannotRenew(a.sess.node)
	case a.renewStopped:
		return fmt.Errorf("its leader refused an earlier renewal of the lock: %w", ErrLockExpired)
	case !a.holds(stDelivered):
		return errSettledUnderRenew
	}
	return nil
}

// cutForRenewalLocked splits a so that the offsets asked (a's, all
// delivered) are renewed without its other records, and returns the
// pieces that hold asked offsets. An acquisition that another Renew waits
// on, or whose RENEW is in flight, is renewed whole instead: the lock of
// what the other call asked must not move under it.
func (c *Consumer) cutForRenewalLocked(a *acquisition, offs []int64) []*acquisition {
	if a.renewing || len(a.asked) > 0 || len(a.askedSent) > 0 {
		return []*acquisition{a}
	}
	slices.Sort(offs)
	var cuts []int64 // where a piece starts, past a.first
	for i, off := range offs {
		if i == 0 || offs[i-1] != off-1 {
			cuts = append(cuts, off)
		}
		if i == len(offs)-1 || offs[i+1] != off+1 {
			cuts = append(cuts, off+1)
		}
	}
	cuts = slices.DeleteFunc(slices.Compact(cuts), func(off int64) bool { return off <= a.first || off > a.last() })
	pieces := []*acquisition{a}
	for i := len(cuts) - 1; i >= 0; i-- {
		b := c.held.split(a, cuts[i])
		if b.holds(stDecided) {
			c.decided[b] = struct{}{} // its marks are sent as a's were
		}
		pieces = append(pieces, b)
	}
	c.held.compact(a.tp)
	return pieces
}

// renewKey names one record asked for.
type renewKey struct {
	tp  kshare.TopicPartition
	off int64
}

// renewCall is one Renew: it waits for a RENEW, sent after the call, of
// each acquisition it asked. All of it is guarded by the consumer's mutex.
type renewCall struct {
	asked   []renewKey // every record sent for
	pending map[*acquisition][]int64
	failed  []RenewFailure
	done    chan struct{} // closed when pending empties
}

func (w *renewCall) fail(k renewKey, err error) {
	w.failed = append(w.failed, RenewFailure{Topic: k.tp.Topic, Partition: k.tp.Partition, Offset: k.off, Err: err})
}

// settleLocked gives the outcome of a's RENEW, err nil for renewed, to the
// records w asked of a.
func (w *renewCall) settleLocked(a *acquisition, err error) {
	offs, ok := w.pending[a]
	if !ok {
		return
	}
	delete(w.pending, a)
	if err != nil {
		for _, off := range offs {
			w.fail(renewKey{a.tp, off}, err)
		}
	}
	if len(w.pending) == 0 {
		close(w.done) // once: a settled acquisition is not pending any more
	}
}

// dropLocked takes w off a, so that no RENEW is sent for w's sake (one in
// flight still lands), and fails the records w asked of a with err.
func (w *renewCall) dropLocked(a *acquisition, err error) {
	a.asked = slices.DeleteFunc(a.asked, func(x *renewCall) bool { return x == w })
	a.askedSent = slices.DeleteFunc(a.askedSent, func(x *renewCall) bool { return x == w })
	w.settleLocked(a, err)
}

// abandonLocked takes w off the acquisitions it still waits on: the call
// returned without their answers.
func (w *renewCall) abandonLocked() {
	for a := range w.pending {
		w.dropLocked(a, nil)
	}
}

// closedResult is the answer of a call that Close cut short: Close gives
// back every record the call asked for, renewed or not (the records it
// refused keep their reason).
func (w *renewCall) closedResult() error {
	failed := make(map[renewKey]bool, len(w.failed))
	for _, f := range w.failed {
		failed[renewKey{kshare.TopicPartition{Topic: f.Topic, Partition: f.Partition}, f.Offset}] = true
	}
	for _, k := range w.asked {
		if !failed[k] {
			w.fail(k, errClosedUnderRenew)
		}
	}
	return w.result()
}

// errSettledUnderRenew is the failure of a record that the application
// acknowledged, marked or staged while its Renew waited: the renewal no
// longer applies, and its lock is what it was.
var errSettledUnderRenew = errors.New("acknowledged, marked or staged while the renewal waited, so not renewed")

// errClosedUnderRenew is the failure of a record whose Renew Close cut
// short.
var errClosedUnderRenew = fmt.Errorf("the consumer closed while the renewal waited, and gave the record back: %w", ErrLockExpired)

func (w *renewCall) result() error {
	if len(w.failed) == 0 {
		return nil
	}
	slices.SortFunc(w.failed, func(x, y RenewFailure) int {
		if c := cmp.Compare(x.Topic, y.Topic); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Partition, y.Partition); c != 0 {
			return c
		}
		return cmp.Compare(x.Offset, y.Offset)
	})
	return &RenewError{Failed: w.failed}
}

// sendAsked moves the Renew calls waiting on a to the RENEW being built.
func (a *acquisition) sendAsked() { a.askedSent, a.asked = append(a.askedSent, a.asked...), nil }

// askAgain puts the Renew calls of a RENEW that proved nothing (it failed
// as a whole, or a record was staged while it travelled) back to wait for
// the next one.
func (a *acquisition) askAgain() { a.askedSent, a.asked = nil, append(a.askedSent, a.asked...) }

// settleAskedLocked gives the outcome of a's RENEW to every Renew waiting
// on it: those whose RENEW was in flight (askedSent) and, when err is not
// nil, those waiting for the next one, which a no longer gets.
func settleAskedLocked(a *acquisition, err error) {
	for _, w := range a.askedSent {
		w.settleLocked(a, err)
	}
	a.askedSent = nil
	if err == nil {
		return
	}
	for _, w := range a.asked {
		w.settleLocked(a, err)
	}
	a.asked = nil
}

// RenewFailure is one record whose lock Renew did not extend, and why.
type RenewFailure struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

// RenewError is Renew's answer when some records' locks were not
// extended; the records it does not list were renewed. It is
// kshare.ErrAbortable: those records will be delivered again once their
// locks run out, so work on them must not be committed. errors.Is finds
// each failure's cause (ErrLockExpired, a context error).
type RenewError struct {
	// Failed lists the records, sorted by topic, partition and offset.
	Failed []RenewFailure
}

// Error names the failed records and their causes (the first few).
func (e *RenewError) Error() string {
	const listed = 8
	var b strings.Builder
	fmt.Fprintf(&b, "kshare: lock renewal failed for %d records:", len(e.Failed))
	for i, f := range e.Failed {
		if i == listed {
			fmt.Fprintf(&b, " and %d more", len(e.Failed)-listed)
			break
		}
		fmt.Fprintf(&b, " %s/%d offset %d: %v;", f.Topic, f.Partition, f.Offset, f.Err)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap returns kshare.ErrAbortable and each failure's cause.
func (e *RenewError) Unwrap() []error {
	out := make([]error, 0, len(e.Failed)+1)
	out = append(out, kshare.ErrAbortable)
	for _, f := range e.Failed {
		out = append(out, f.Err)
	}
	return out
}
