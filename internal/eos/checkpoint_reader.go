package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/txnclient"
	"github.com/kshare-go/kshare/wire"
)

// checkpointReader is one source reader of the simulated stream processor:
// a share consumer in transactional mode and an acknowledger with its own
// transactional id. Its operator state is the output of the records it
// processed: open (since the last snapshot) and per staged checkpoint.
// Output enters the committed sink only when the checkpoint's
// acknowledgements commit.
type checkpointReader struct {
	index   int
	cfg     CheckpointConfig
	stats   *checkpointStats
	sink    *committedSink
	box     *mailbox
	results chan<- snapshotResult
	log     *slog.Logger

	cons    *shareconsumer.Consumer
	ack     *acknowledger.Acknowledger
	open    map[recordKey]openRecord
	pending map[int64]*stagedCheckpoint
}

// loggedStagedRedeliveries is how many staged records delivered again a
// run logs.
const loggedStagedRedeliveries = 10

// recordKey names a record by its place in the log: a record delivered
// again replaces its earlier delivery in the open state.
type recordKey struct {
	tp     wire.TopicPartition
	offset int64
}

// openRecord is a processed record not yet in a snapshot.
type openRecord struct {
	rec     *kgo.Record
	atLimit bool // delivered as often as the group's delivery limit allows
}

// stagedCheckpoint is the reader's state of a snapshotted checkpoint.
type stagedCheckpoint struct {
	ids      []string // the output: one per input record
	atLimit  []string // ids the broker archives if the checkpoint fails
	stagedAt time.Time
}

func newCheckpointReader(index int, cfg CheckpointConfig, stats *checkpointStats, sink *committedSink, results chan<- snapshotResult) *checkpointReader {
	return &checkpointReader{
		index:   index,
		cfg:     cfg,
		stats:   stats,
		sink:    sink,
		box:     newMailbox(),
		results: results,
		log:     cfg.Logger.With("reader", index),
		open:    make(map[recordKey]openRecord),
		pending: make(map[int64]*stagedCheckpoint),
	}
}

// run reads, processes and checkpoints until ctx ends. It returns an error
// only when the reader cannot go on: a client could not be created, the
// acknowledger is fenced or cannot end a transaction.
func (r *checkpointReader) run(ctx context.Context) error {
	cons, err := shareconsumer.New(
		shareconsumer.SeedBrokers(r.cfg.Seeds...),
		shareconsumer.Group(r.cfg.Group),
		shareconsumer.Topics(r.cfg.Input),
		shareconsumer.Mode(shareconsumer.Transactional),
		shareconsumer.MaxWait(250*time.Millisecond),
		shareconsumer.Logger(r.log),
	)
	if err != nil {
		return fmt.Errorf("share consumer: %w", err)
	}
	ack, err := acknowledger.New(
		acknowledger.SeedBrokers(r.cfg.Seeds...),
		acknowledger.TransactionalID(fmt.Sprintf("%s-reader-%d", r.cfg.Group, r.index)),
		acknowledger.TransactionTimeout(r.cfg.TxnTimeout),
		acknowledger.Logger(r.log),
	)
	if err != nil {
		cons.Close(context.Background())
		return fmt.Errorf("acknowledger: %w", err)
	}
	r.cons, r.ack = cons, ack
	defer func() {
		// The acknowledger first: the consumer leaves staged records
		// alone, so their checkpoints must be dropped before it closes.
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ack.Close(closeCtx)
		cons.Close(closeCtx)
	}()
	if err := ack.InitTransactions(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("init transactions: %w", err)
	}
	for {
		for _, m := range r.box.drain() {
			if ctx.Err() != nil {
				return nil
			}
			if err := r.handle(ctx, m); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		recs, err := r.poll(ctx)
		if err != nil {
			return err
		}
		r.process(recs)
	}
}

// poll waits for records until ctx ends or the coordinator sends a
// message. It returns an error only when the consumer is closed.
func (r *checkpointReader) poll(ctx context.Context) ([]*kgo.Record, error) {
	pollCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop, woken := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(woken)
		select {
		case <-r.box.signal:
			cancel()
		case <-stop:
		}
	}()
	recs, err := r.cons.Poll(pollCtx)
	close(stop)
	<-woken
	switch {
	case err == nil:
		return recs, nil
	case errors.Is(err, shareconsumer.ErrClosed):
		return nil, fmt.Errorf("poll: %w", err)
	case pollCtx.Err() == nil:
		// The consumer keeps running after a background error.
		r.log.Warn("poll", "err", err)
	}
	return nil, nil
}

// process turns records into output in the open state. The transform is
// the identity: a record's output is its id.
func (r *checkpointReader) process(recs []*kgo.Record) {
	for _, rec := range recs {
		n, ok := r.cons.DeliveryCount(rec)
		if ok && n > 1 {
			r.stats.redelivered.Add(1)
		}
		id := string(rec.Value)
		if owner, staged := r.stats.staged.Load(id); staged {
			// Its lock should have been renewed until its checkpoint
			// ended. The first few are logged; the summary counts all.
			if r.stats.stagedRedelivered.Add(1) <= loggedStagedRedeliveries {
				r.log.Warn("a staged record was delivered again", "id", id, "staged_by", owner, "delivery", n)
			}
		}
		key := recordKey{wire.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}, rec.Offset}
		r.open[key] = openRecord{rec: rec, atLimit: ok && int(n) >= r.cfg.DeliveryLimit}
	}
}

// handle carries out one message of the coordinator.
func (r *checkpointReader) handle(ctx context.Context, m readerMsg) error {
	switch m.kind {
	case msgBarrier:
		return r.snapshot(ctx, m)
	case msgComplete:
		return r.commit(ctx, m.id)
	case msgAbort:
		return r.abort(ctx, m.id)
	}
	return fmt.Errorf("unknown coordinator message %d", m.kind)
}

// snapshot moves the open state into checkpoint m.id and stages the
// acknowledgements of its records; from then on the consumer renews their
// locks. If staging fails (a lock ran out) the reader declines: the
// output is dropped and the records come back.
func (r *checkpointReader) snapshot(ctx context.Context, m readerMsg) error {
	res := snapshotResult{reader: r.index, id: m.id, records: len(r.open), stallAsked: m.stall}
	if m.stall && len(r.open) > 0 {
		res.stalled = true
		r.stats.fault("slow_snapshot")
		r.log.Info("fault: stalling past the locks before a snapshot", "checkpoint", m.id)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.cfg.LockDuration * 5 / 4):
		}
	}
	recs := make([]*kgo.Record, 0, len(r.open))
	cp := &stagedCheckpoint{ids: make([]string, 0, len(r.open))}
	for _, o := range r.open {
		recs = append(recs, o.rec)
		id := string(o.rec.Value)
		cp.ids = append(cp.ids, id)
		if o.atLimit {
			cp.atLimit = append(cp.atLimit, id)
		}
	}
	clear(r.open)
	err := r.ack.Stage(m.id, r.cons.Acks(recs, wire.AckAccept), r.cons.GroupMetadata())
	switch {
	case err == nil:
		cp.stagedAt = time.Now()
		r.pending[m.id] = cp
		for _, id := range cp.ids {
			r.stats.staged.Store(id, r.index)
		}
	case errors.Is(err, txnclient.ErrAbortable):
		r.log.Info("declining checkpoint", "checkpoint", m.id, "records", len(recs), "err", err)
		r.noteArchived(cp.atLimit)
		res.declined = err
	default:
		return fmt.Errorf("stage checkpoint %d: %w", m.id, err)
	}
	select {
	case r.results <- res:
	case <-ctx.Done():
	}
	return nil
}

// unstage takes checkpoint id out of the pending state before it is
// resolved: from here on its records may legitimately come back.
func (r *checkpointReader) unstage(id int64) *stagedCheckpoint {
	cp := r.pending[id]
	delete(r.pending, id)
	if cp == nil {
		return &stagedCheckpoint{}
	}
	for _, rid := range cp.ids {
		r.stats.staged.Delete(rid)
	}
	return cp
}

// commit is notifyCheckpointComplete: it commits the checkpoint's
// acknowledgements and, only if that succeeds, adds its output to the
// committed sink. A failed commit drops the output; the records come
// back.
func (r *checkpointReader) commit(ctx context.Context, id int64) error {
	cp := r.unstage(id)
	opCtx, cancel := r.opContext(ctx)
	defer cancel()
	start := time.Now()
	err := r.ack.CommitCheckpoint(opCtx, id)
	if err == nil {
		if len(cp.ids) > 0 {
			r.stats.commitLatency(time.Since(start))
			r.stats.readerCommits.Add(1)
			if start.Sub(cp.stagedAt) > r.cfg.LockDuration {
				r.stats.heldPastLock.Add(int64(len(cp.ids)))
			}
			r.sink.commit(cp.ids)
		}
		return nil
	}
	r.stats.commitFailures.Add(1)
	r.noteArchived(cp.atLimit)
	r.log.Warn("checkpoint commit failed; its output is dropped and its records come back", "checkpoint", id, "err", err)
	return r.recover(opCtx, err)
}

// abort drops a failed checkpoint: its output is dropped and its records
// are released to the group.
func (r *checkpointReader) abort(ctx context.Context, id int64) error {
	cp := r.unstage(id)
	opCtx, cancel := r.opContext(ctx)
	defer cancel()
	r.noteArchived(cp.atLimit)
	err := r.ack.AbortCheckpoint(opCtx, id)
	if err == nil {
		return nil
	}
	r.stats.releaseFailures.Add(1)
	r.log.Warn("releasing the records of a failed checkpoint failed; they come back when their locks run out", "checkpoint", id, "err", err)
	return r.recover(opCtx, err)
}

// recover ends a transaction that a failed commit or abort may have left
// open. It returns an error when the acknowledger cannot go on.
func (r *checkpointReader) recover(ctx context.Context, cause error) error {
	if errors.Is(cause, txnclient.ErrFatal) {
		return cause
	}
	if err := r.ack.AbortAcknowledgements(ctx); err != nil {
		return fmt.Errorf("ending the transaction after %w: %w", cause, err)
	}
	return nil
}

// opContext bounds a commit or abort by the transaction timeout, but lets
// it finish when the run ends: a commit cut short might have committed
// without the reader knowing, and its output would then be missing.
func (r *checkpointReader) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.cfg.TxnTimeout)
}

// noteArchived records ids whose failed delivery was the group's last.
func (r *checkpointReader) noteArchived(ids []string) {
	for _, id := range ids {
		r.stats.archived.Store(id, struct{}{})
	}
}
