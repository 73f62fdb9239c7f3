package producer

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/testkit"
)

// fmHang is how long a Close may take before the model calls it hung: far
// beyond every context a run uses.
const fmHang = 60 * time.Second

// fmOutcome is what the broker holds once the run is over.
type fmOutcome struct {
	state   string // the coordinator's state of the transactional id after every Close
	visible int    // output records a read_committed reader sees
	start   int64  // the share group's start offset of the input
	offset  int64  // the offset the transaction committed for its consumer group, or -1
}

// finish closes the producer (the fault's Close, if any, then the
// application's own), checks what must hold right after Close, lets a
// newer producer end whatever the run left open, and reads what the
// broker holds.
func (r *fmRun) finish() (fmOutcome, []error) {
	t := r.t
	var closeErrs []error
	r.mu.Lock()
	ch := r.closeCh
	r.mu.Unlock()
	if ch != nil {
		err := r.waitClose(ch)
		r.record("Close from another goroutine", err)
		closeErrs = append(closeErrs, err)
	}
	ctx, cancel := context.WithTimeout(r.ctx, fmCallTimeout)
	defer cancel()
	final := make(chan error, 1)
	go func() { final <- r.p.Close(ctx) }()
	err := r.waitClose(final)
	r.record("Close at the end", err)
	closeErrs = append(closeErrs, err)
	r.closed.Store(true)
	r.promised.Wait()
	r.callsAfterClose()

	var out fmOutcome
	out.state = transactionState(t, r.c, r.txnID)

	// (c) before the consumer closes: it must hold none of the staged
	// records any more.
	staged, resolved := r.tracker.counts()
	if staged == 0 {
		assert.Empty(t, resolved, "(c) acknowledgements the tracker never accepted are never resolved")
	} else {
		assert.Len(t, resolved, 1, "(c) staged acknowledgements resolve exactly once")
		for _, rec := range r.inputs {
			_, held := r.cons.LockDeadline(rec)
			assert.False(t, held, "(c) the consumer still holds offset %d after its transaction ended", rec.Offset)
		}
	}
	r.mu.Lock()
	fencers := r.fencers
	r.mu.Unlock()
	for _, f := range fencers {
		require.NoError(t, f.Close(r.ctx))
	}
	endOpenTransaction(t, r.c, r.txnID)
	require.NoError(t, r.cons.Close(r.ctx))

	out.visible = len(readCommitted(t, r.c, r.out, 1))
	admin := newClient(t, r.c)
	out.start = testkit.StartOffsets(r.ctx, t, admin, r.group, r.in)[0]
	out.offset = committedOffset(t, admin, r.ogroup, r.in)
	return out, closeErrs
}

// waitClose waits for a Close, failing the run if it hangs.
func (r *fmRun) waitClose(ch <-chan error) error {
	select {
	case err := <-ch:
		return err
	case <-time.After(fmHang):
		r.t.Fatalf("(e) Close did not return within %v", fmHang)
		return nil
	}
}

// callsAfterClose requires that every call fails at once with ErrClosed
// after Close and sends nothing.
func (r *fmRun) callsAfterClose() {
	t, ctx := r.t, r.ctx
	meta := kshare.ShareGroupMetadata{GroupID: r.group, MemberID: "m", MemberEpoch: 1}
	for name, err := range map[string]error{
		"BeginTransaction":           r.p.BeginTransaction(),
		"InitTransactions":           r.p.InitTransactions(ctx),
		"CommitTransaction":          r.p.CommitTransaction(ctx),
		"AbortTransaction":           r.p.AbortTransaction(ctx),
		"SendShareAcksToTransaction": r.p.SendShareAcksToTransaction(ctx, ka(acktrack.New(nil)), meta),
		"SendOffsetsToTransaction": r.p.SendOffsetsToTransaction(ctx, map[string]map[int32]kgo.EpochOffset{r.in: {0: {Offset: 1}}},
			GroupMetadata{GroupID: r.ogroup, Generation: -1}),
		"Produce": r.p.ProduceSync(ctx, &kgo.Record{Topic: r.out}).FirstErr(),
		"Close":   r.p.Close(ctx),
	} {
		if name == "Close" {
			assert.NoError(t, err, "(e) Close again returns nil")
			continue
		}
		assert.ErrorIs(t, err, kshare.ErrClosed, "(e) %s after Close", name)
	}
	assert.Zero(t, r.late.Load(), "(e) the producer wrote requests after Close returned")
}

// committedOffset returns the offset group committed for partition 0 of
// topic, or -1.
func committedOffset(t require.TestingT, cl *kgo.Client, group, topic string) int64 {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				return p.Offset
			}
		}
	}
	return -1
}

// check verifies invariants (a), (b), (c) and (e) for a finished run;
// (d) is checked when the run's test ends.
func (r *fmRun) check() {
	t := r.t
	out, closeErrs := r.finish()
	r.mu.Lock()
	calls, began, offsetsSent, promiseErrs := r.calls, r.began, r.offsetsSent, r.promiseErrs
	r.mu.Unlock()
	for _, c := range calls {
		t.Logf("%s: %v", c.name, c.err)
	}
	t.Logf("coordinator after Close: %s; visible %d of %d; share start offset %d; committed offset %d",
		out.state, out.visible, fmRecords, out.start, out.offset)

	// (e) A transaction left open is one some Close said it could not end.
	switch out.state {
	case "Ongoing", "PrepareCommit", "PrepareAbort":
		anyErr := false
		for _, err := range closeErrs {
			anyErr = anyErr || err != nil && !errors.Is(err, kshare.ErrCommitted)
		}
		for _, c := range calls {
			anyErr = anyErr || (c.name == "Close" && c.err != nil)
		}
		assert.True(t, anyErr, "(e) the transaction was left %s and no Close said so", out.state)
	}

	// (a) All or nothing.
	committed := out.visible == fmRecords
	assert.Contains(t, []int{0, fmRecords}, out.visible, "(a) part of the transaction's records committed")
	staged, resolved := r.tracker.counts()
	if committed {
		assert.True(t, began, "(a) committed without a transaction")
		assert.Positive(t, staged, "(a) committed without its acknowledgements")
		assert.EqualValues(t, fmRecords, out.start, "(a) the outputs committed, the acknowledgements did not")
		if offsetsSent {
			assert.EqualValues(t, fmRecords, out.offset, "(a) the outputs committed, the offsets did not")
		}
	} else {
		assert.Zero(t, out.start, "(a) acknowledgements committed without the outputs")
		assert.EqualValues(t, -1, out.offset, "(a) offsets committed without the outputs")
	}

	// (b) The reports match the broker.
	m := r.p.Metrics()
	assert.LessOrEqual(t, m.TransactionsCommitted+m.TransactionsAborted, int64(1), "(b) one transaction, counted once")
	inDoubt := false
	for _, c := range calls {
		inDoubt = inDoubt || saysInDoubt(c.err)
	}
	for _, err := range closeErrs {
		inDoubt = inDoubt || saysInDoubt(err)
	}
	if m.TransactionsCommitted == 1 {
		assert.True(t, committed, "(b) the metrics say committed, the broker does not")
	}
	if m.TransactionsAborted == 1 {
		assert.False(t, committed, "(b) the metrics say aborted, the broker committed")
	}
	if committed && m.TransactionsCommitted == 0 {
		assert.True(t, inDoubt, "(b) the broker committed, and the SDK neither said so nor that it could not know")
	}
	for _, c := range calls {
		switch {
		case c.name == "Commit" && c.err == nil:
			assert.True(t, committed, "(b) CommitTransaction returned nil, the broker did not commit")
		case c.name == "Commit" && !saysInDoubt(c.err):
			assert.False(t, committed, "(b) CommitTransaction failed (%v), the broker committed", c.err)
		case errors.Is(c.err, kshare.ErrCommitted):
			assert.True(t, committed, "(b) %s said the transaction had committed, the broker did not", c.name)
		}
	}
	for _, err := range closeErrs {
		if errors.Is(err, kshare.ErrCommitted) {
			assert.True(t, committed, "(b) Close said the in-doubt commit had committed, the broker did not")
		}
	}
	if committed {
		assert.Empty(t, promiseErrs, "(b) a record of the committed transaction reported failure")
	}
	// (c) The resolution matches the broker, or the SDK said it could
	// not know.
	if len(resolved) == 1 {
		if resolved[0] {
			assert.True(t, committed, "(c) acknowledgements resolved as committed, the broker did not commit")
		} else if committed {
			assert.True(t, inDoubt, "(c) acknowledgements resolved as not committed, the broker committed")
		}
	}
}

// saysInDoubt reports whether err says that a commit's outcome is unknown:
// ErrInDoubt, or the fatal error of a producer fenced before it could
// learn the outcome, which says so in its message (an error has one
// class).
func saysInDoubt(err error) bool {
	return errors.Is(err, kshare.ErrInDoubt) ||
		errors.Is(err, kshare.ErrFatal) && strings.Contains(err.Error(), "outcome is unknown")
}
