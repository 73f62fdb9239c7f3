package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/shareconsumer"
)

// SourceReader is one source reader of the stream processor that
// RunCheckpoint simulates, as a Flink SourceReader is: the part of a
// checkpointing pipeline that its author writes. The runtime calls its
// methods from one goroutine per reader, one at a time, in this order:
// Poll whenever no checkpoint message waits; SnapshotState(id) when
// checkpoint id is triggered; then, once the coordinator has decided,
// NotifyCheckpointComplete(id) or NotifyCheckpointAborted(id), for the
// checkpoints in order; Close at the end.
type SourceReader interface {
	// Poll reads and processes what is available, returning when ctx ends
	// (the runtime ends it when a checkpoint message arrives) or when it
	// has processed something. An error stops the run.
	Poll(ctx context.Context) error
	// SnapshotState puts everything processed since the last snapshot
	// into checkpoint id. An error declines the checkpoint, which then
	// fails; one that does not match kshare.ErrAbortable also stops
	// the run.
	SnapshotState(ctx context.Context, id int64) error
	// NotifyCheckpointComplete commits checkpoint id, and every earlier
	// one not yet committed: their acknowledgements, and their output to
	// the sink. An error matching kshare.ErrAbortable says the checkpoint was dropped: no output, its
	// records come back; any other error stops the run.
	NotifyCheckpointComplete(ctx context.Context, id int64) error
	// NotifyCheckpointAborted drops checkpoint id, which failed, and
	// every earlier one not yet committed: their output is discarded and
	// their records come back. Errors are handled as for
	// NotifyCheckpointComplete.
	NotifyCheckpointAborted(ctx context.Context, id int64) error
	// Close releases the reader's clients, within ctx.
	Close(ctx context.Context) error
}

// NewReader creates and starts source reader r.Index; the runtime closes
// it when the run ends. An error stops the run.
type NewReader func(ctx context.Context, r Reader) (SourceReader, error)

// Reader is what RunCheckpoint hands NewReader: where to connect, what to
// read, where committed output goes, and the hooks through which the
// harness follows what the reader does.
type Reader struct {
	Index           int
	Seeds           []string
	Group, Input    string
	TransactionalID string
	// Ledger is the claim ledger topic ("": KIP-1289): the consumer and
	// the acknowledger name it (ShareLedger).
	Ledger     string
	TxnTimeout time.Duration
	Logger     *slog.Logger
	// Sink is the downstream system: output committed there is final.
	Sink *Sink
	// Hooks are the harness's; a nil *ReaderHooks does nothing.
	Hooks *ReaderHooks
}

// ReaderHooks are where a source reader lets the harness in. Each method
// does nothing on a nil *ReaderHooks.
type ReaderHooks struct {
	t *readerTask
}

// Started gives the harness the reader's consumer, whose delivery counts
// it reads.
func (h *ReaderHooks) Started(cons *shareconsumer.Consumer) {
	if h == nil {
		return
	}
	h.t.mu.Lock()
	h.t.cons = cons
	h.t.mu.Unlock()
}

// Polled tells the harness which records a poll returned.
func (h *ReaderHooks) Polled(records []*kgo.Record) {
	if h != nil {
		h.t.polled(records)
	}
}

// Snapshotted tells the harness which records SnapshotState put into
// checkpoint id, and whether staging them failed (err).
func (h *ReaderHooks) Snapshotted(id int64, records []*kgo.Record, err error) {
	if h != nil {
		h.t.snapshotted(id, records, err)
	}
}

// Sink is where the readers' committed output goes: the ids of every
// checkpoint whose acknowledgements committed, counted. Output of a
// checkpoint that failed never reaches it, so it holds exactly what a
// downstream system would have committed.
type Sink struct {
	mu     sync.Mutex
	counts map[string]int
	n      int64
}

func newCommittedSink(capacity int) *Sink {
	return &Sink{counts: make(map[string]int, capacity)}
}

// Commit adds outputs to the sink. It is safe for concurrent use.
func (s *Sink) Commit(outputs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range outputs {
		s.counts[v]++
	}
	s.n += int64(len(outputs))
}

func (s *Sink) total() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// check compares the sink with the input, given the group's start offsets
// and what is known of how inputs ended (see ReadCommitted).
func (s *Sink) check(in *Input, start map[int32]int64, ends Endings) Check {
	s.mu.Lock()
	defer s.mu.Unlock()
	return checkCounts(s.counts, int(s.n), in, start, ends)
}

// readerTask runs one source reader: it delivers the coordinator's
// messages to it between polls, injects the stall fault, and follows its
// records through its checkpoints.
type readerTask struct {
	index   int
	cfg     CheckpointConfig
	stats   *checkpointStats
	sink    *Sink
	box     *mailbox
	results chan<- snapshotResult
	log     *slog.Logger

	mu   sync.Mutex
	cons *shareconsumer.Consumer
	// atLimit holds the values of the records delivered as often as the
	// group's delivery limit allows, until their checkpoint ends.
	atLimit map[string]bool
	// open holds the records polled since the last snapshot, whose
	// locks a stalled snapshot waits out (stallPastLocks).
	open []*kgo.Record
	// staged holds, per staged checkpoint not yet resolved, the values
	// of its records and when it was staged.
	staged map[int64]*stagedCheckpoint
}

type stagedCheckpoint struct {
	values   []string
	stagedAt time.Time
}

// loggedStagedRedeliveries is how many staged records delivered again a
// run logs.
const loggedStagedRedeliveries = 10

func newReaderTask(index int, cfg CheckpointConfig, stats *checkpointStats, sink *Sink, results chan<- snapshotResult) *readerTask {
	return &readerTask{
		index:   index,
		cfg:     cfg,
		stats:   stats,
		sink:    sink,
		box:     newMailbox(),
		results: results,
		log:     cfg.Logger.With("reader", index),
		atLimit: map[string]bool{},
		staged:  map[int64]*stagedCheckpoint{},
	}
}

// run creates the reader and drives it until ctx ends. It returns an error
// only when the reader cannot go on.
func (t *readerTask) run(ctx context.Context, newReader NewReader) error {
	r, err := newReader(ctx, Reader{
		Index:           t.index,
		Seeds:           t.cfg.Seeds,
		Group:           t.cfg.Group,
		Input:           t.cfg.Input,
		TransactionalID: fmt.Sprintf("%s-reader-%d", t.cfg.Group, t.index),
		Ledger:          t.cfg.Ledger,
		TxnTimeout:      t.cfg.TxnTimeout,
		Logger:          t.log,
		Sink:            t.sink,
		Hooks:           &ReaderHooks{t: t},
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.TxnTimeout)
		defer cancel()
		if err := r.Close(closeCtx); err != nil {
			t.log.Info("closing the reader", "err", err)
		}
	}()
	for {
		for _, m := range t.box.drain() {
			if ctx.Err() != nil {
				return nil
			}
			if err := t.handle(ctx, r, m); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := t.poll(ctx, r); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("poll: %w", err)
		}
	}
}

// poll runs r.Poll until ctx ends or the coordinator sends a message.
func (t *readerTask) poll(ctx context.Context, r SourceReader) error {
	pollCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop, woken := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(woken)
		select {
		case <-t.box.signal:
			cancel()
		case <-stop:
		}
	}()
	err := r.Poll(pollCtx)
	close(stop)
	<-woken
	if err != nil && pollCtx.Err() != nil && ctx.Err() == nil {
		return nil // a message arrived
	}
	return err
}

// handle carries out one message of the coordinator.
func (t *readerTask) handle(ctx context.Context, r SourceReader, m readerMsg) error {
	switch m.kind {
	case msgBarrier:
		return t.snapshot(ctx, r, m)
	case msgComplete, msgAbort:
		return t.resolve(ctx, r, m)
	}
	return fmt.Errorf("unknown coordinator message %d", m.kind)
}

// snapshot has r snapshot checkpoint m.id, stalling first past the locks
// if the coordinator asked for it and r has records to snapshot, and
// answers the coordinator.
func (t *readerTask) snapshot(ctx context.Context, r SourceReader, m readerMsg) error {
	t.mu.Lock()
	open := len(t.open)
	t.mu.Unlock()
	res := snapshotResult{reader: t.index, id: m.id, records: open}
	if m.stall && open > 0 && t.stats.stallClaim.CompareAndSwap(false, true) {
		res.stalled = true
		t.stats.stalling.Add(1)
		t.stats.fault(faultSlowSnapshot)
		t.log.Info("fault "+faultSlowSnapshot+": the reader stalls past its locks before a snapshot", "checkpoint", m.id, "records", open)
		w := t.stats.waits.add(fmt.Sprintf("reader %d, stalled past its locks before checkpoint %d", t.index, m.id), open, t.locksGone())
		ok := t.stallPastLocks(ctx)
		t.stats.waits.done(w)
		if !ok {
			return nil
		}
	}
	err := r.SnapshotState(ctx, m.id)
	stop := err != nil && !errors.Is(err, kshare.ErrAbortable)
	switch {
	case err == nil:
	case stop:
		res.declined = err
	case res.stalled:
		res.declined = err
		t.log.Info("fault "+faultSlowSnapshot+": the stalled reader declines the checkpoint, as expected", "checkpoint", m.id, "err", err)
	default:
		res.declined = err
		t.log.Warn("the reader declines the checkpoint and no injected fault explains it", "checkpoint", m.id, "err", err)
	}
	select {
	case t.results <- res:
	case <-ctx.Done():
	}
	if stop {
		return fmt.Errorf("SnapshotState(%d): %w", m.id, err)
	}
	return nil
}

// stallMargin is how long past the last lock of its records a stalled
// reader goes on stalling, as a fraction of the lock duration.
const stallMargin = 4 // a quarter lock

// locksGone returns when the locks of the reader's open records end, as
// its consumer knows them (the latest deadline), plus the stall margin;
// without the consumer, a lock duration and the margin from now.
func (t *readerTask) locksGone() time.Time {
	t.mu.Lock()
	cons, recs := t.cons, t.open
	t.mu.Unlock()
	margin := t.cfg.LockDuration / stallMargin
	if cons == nil {
		return time.Now().Add(t.cfg.LockDuration + margin)
	}
	var last time.Time
	for _, r := range recs {
		if d, ok := cons.LockDeadline(r); ok && d.After(last) {
			last = d
		}
	}
	return last.Add(margin)
}

// stallPastLocks sleeps until the locks of the reader's open records have
// run out, so that staging them must fail: a fixed stall would not do,
// since a renewal sent late (a loaded machine) gives a lock that outlasts
// it. A renewal answered during the stall moves a deadline, and the stall
// goes on. It reports false if ctx ended first.
func (t *readerTask) stallPastLocks(ctx context.Context) bool {
	for {
		until := t.locksGone()
		if !time.Now().Before(until) {
			return true
		}
		if !sleep(ctx, time.Until(until)) {
			return false
		}
	}
}

// resolve has r commit or abort checkpoint m.id (and the earlier ones
// still staged) and follows their records.
func (t *readerTask) resolve(ctx context.Context, r SourceReader, m readerMsg) error {
	// From here on the records may legitimately come back.
	cps := t.unstage(m.id)
	var err error
	start := time.Now()
	if m.kind == msgComplete {
		err = r.NotifyCheckpointComplete(ctx, m.id)
	} else {
		err = r.NotifyCheckpointAborted(ctx, m.id)
	}
	var values []string
	for _, cp := range cps {
		values = append(values, cp.values...)
	}
	stop := err != nil && !errors.Is(err, kshare.ErrAbortable)
	switch {
	case m.kind == msgComplete && err == nil:
		if len(values) > 0 {
			t.stats.commitLatency(time.Since(start))
			t.stats.committed.Add(1)
			for _, cp := range cps {
				if start.Sub(cp.stagedAt) > t.cfg.LockDuration {
					t.stats.heldPastLock.Add(int64(len(cp.values)))
				}
			}
		}
		t.forget(values, 0)
		return nil
	case m.kind == msgComplete:
		t.stats.commitFailures.Add(1)
		if !stop {
			t.log.Warn("checkpoint commit failed; its output is dropped and its records come back", "checkpoint", m.id, "err", err)
		}
	case err != nil:
		t.stats.releaseFailures.Add(1)
		if !stop {
			t.log.Warn("releasing the records of a failed checkpoint failed; they come back when their locks run out", "checkpoint", m.id, "err", err)
		}
	}
	why := ArchivedByFailure
	if m.onPurpose {
		why = ArchivedOnPurpose
	}
	t.forget(values, why)
	if stop {
		if m.kind == msgComplete {
			return fmt.Errorf("NotifyCheckpointComplete(%d): %w", m.id, err)
		}
		return fmt.Errorf("NotifyCheckpointAborted(%d): %w", m.id, err)
	}
	return nil
}

// unstage takes every staged checkpoint up to id out of the staged state.
func (t *readerTask) unstage(id int64) []*stagedCheckpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*stagedCheckpoint
	for cid, cp := range t.staged {
		if cid <= id {
			out = append(out, cp)
			delete(t.staged, cid)
			for _, v := range cp.values {
				t.stats.staged.Delete(v)
			}
		}
	}
	return out
}

// forget drops values from the at-limit set, noting those at the limit as
// archived for why (0: they committed).
func (t *readerTask) forget(values []string, why Archive) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, v := range values {
		if t.atLimit[v] && why != 0 {
			t.stats.noteArchived(v, why)
		}
		delete(t.atLimit, v)
	}
}

func (t *readerTask) polled(records []*kgo.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open = append(t.open, records...)
	for i, atLimit := range deliveries(t.cons, records, &t.stats.runStats, t.cfg.DeliveryLimit) {
		v := string(records[i].Value)
		if atLimit {
			t.atLimit[v] = true
		}
		if owner, staged := t.stats.staged.Load(v); staged {
			// Its lock should have been renewed until its checkpoint
			// ended. The first few are logged; the summary counts all.
			if t.stats.stagedRedelivered.Add(1) <= loggedStagedRedeliveries {
				t.log.Warn("a staged record was delivered again", "value", v, "staged_by", owner)
			}
		}
	}
}

func (t *readerTask) snapshotted(id int64, records []*kgo.Record, err error) {
	values := make([]string, len(records))
	for i, r := range records {
		values[i] = string(r.Value)
	}
	t.mu.Lock()
	t.open = nil
	if err == nil {
		t.staged[id] = &stagedCheckpoint{values: values, stagedAt: time.Now()}
		for _, v := range values {
			t.stats.staged.Store(v, t.index)
		}
	}
	t.mu.Unlock()
	if err != nil {
		t.forget(values, ArchivedByFailure)
	}
}
