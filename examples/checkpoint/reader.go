package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/internal/eos"
	"github.com/kshare-go/kshare/shareconsumer"
)

// This file is the pipeline: a source reader of a stream processor that
// acknowledges its share-group input through kshare's acknowledger when a
// checkpoint completes, in plain SDK calls. The stream processor around it
// (checkpoint coordinator, sink) is simulated by the harness; the r.hooks
// lines let the harness follow the records, and do nothing without it.

// reader is one source reader: a share consumer in transactional mode and
// an acknowledger with its own transactional id. Its state is the output
// of the records it processed, those since the last snapshot (open) and
// those of each snapshotted checkpoint not yet committed (pending).
type reader struct {
	cons  *shareconsumer.Consumer
	ack   *acknowledger.Acknowledger
	sink  *eos.Sink
	hooks *eos.ReaderHooks

	open    map[recordKey]processed
	pending map[int64][]string // outputs per staged checkpoint
	// txnTimeout bounds the recovery of a failed commit.
	txnTimeout time.Duration
}

// recordKey names a record by its place in the log: a record delivered
// again replaces its earlier delivery in the open state.
type recordKey struct {
	tp     kshare.TopicPartition
	offset int64
}

// processed is a record and the reader's decision about it.
type processed struct {
	rec    *kgo.Record
	output string // "" for a record the transform refused: it is rejected
}

// newReader creates and starts source reader r: its consumer and its
// acknowledger, whose InitTransactions fences any older reader with the
// same transactional id.
func newReader(ctx context.Context, r eos.Reader) (eos.SourceReader, error) {
	cons, err := shareconsumer.New(
		shareconsumer.SeedBrokers(r.Seeds...),
		shareconsumer.Group(r.Group),
		shareconsumer.Topics(r.Input),
		shareconsumer.Mode(shareconsumer.Transactional), // never acknowledges by itself
		shareconsumer.MaxWait(250*time.Millisecond),
		shareconsumer.Logger(r.Logger),
		shareconsumer.ShareLedger(r.Ledger),
	)
	if err != nil {
		return nil, fmt.Errorf("share consumer: %w", err)
	}
	ack, err := acknowledger.New(
		acknowledger.SeedBrokers(r.Seeds...),
		acknowledger.TransactionalID(r.TransactionalID),
		acknowledger.TransactionTimeout(r.TxnTimeout),
		acknowledger.Logger(r.Logger),
		acknowledger.ShareLedger(r.Ledger),
	)
	if err != nil {
		cons.Close(ctx)
		return nil, fmt.Errorf("acknowledger: %w", err)
	}
	rd := &reader{cons: cons, ack: ack, sink: r.Sink, hooks: r.Hooks, open: map[recordKey]processed{}, pending: map[int64][]string{}, txnTimeout: r.TxnTimeout}
	rd.hooks.Started(cons)
	// InitTransactions gives up after the transaction timeout with
	// kshare.ErrAbortable when the coordinator cannot be reached (its
	// broker restarting, say): try again while ctx lasts.
	for {
		err := ack.InitTransactions(ctx)
		if err == nil {
			return rd, nil
		}
		if !errors.Is(err, kshare.ErrAbortable) || ctx.Err() != nil {
			rd.Close(ctx)
			return nil, fmt.Errorf("init transactions: %w", err)
		}
		r.Logger.Warn("init transactions: trying again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// Poll reads the records available and processes them into the open
// state. It returns ctx's error when ctx ends first, and any other error
// the consumer met in the background and cannot fix by itself.
func (r *reader) Poll(ctx context.Context) error {
	records, err := r.cons.Poll(ctx)
	if err != nil {
		return err
	}
	r.hooks.Polled(records)
	for _, rec := range records {
		key := recordKey{kshare.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}, rec.Offset}
		r.open[key] = processed{rec: rec, output: transform(rec)}
	}
	return nil
}

// transform turns an input record into its output: here its value, which
// must be an id ("id-..."). A value that is not one cannot be processed:
// "" makes the reader reject the record.
func transform(rec *kgo.Record) string {
	if !bytes.HasPrefix(rec.Value, []byte("id-")) {
		return ""
	}
	return string(rec.Value)
}

// SnapshotState moves the open state into checkpoint id and stages the
// acknowledgements of its records: ACCEPT for those with an output, REJECT
// for the others. From then on the consumer renews their locks until the
// checkpoint commits or fails. If staging fails (a lock already ran out:
// ErrAbortable) the output is dropped, the records come back to the
// group, and the error declines the checkpoint.
func (r *reader) SnapshotState(_ context.Context, id int64) error {
	var accepted, rejected, all []*kgo.Record
	var outputs []string
	for _, p := range r.open {
		all = append(all, p.rec)
		if p.output == "" {
			rejected = append(rejected, p.rec)
			continue
		}
		accepted = append(accepted, p.rec)
		outputs = append(outputs, p.output)
	}
	clear(r.open)
	acks := r.cons.Acks(accepted, kshare.AckAccept).Merge(r.cons.Acks(rejected, kshare.AckReject))
	err := r.ack.Stage(id, acks, r.cons.GroupMetadata())
	r.hooks.Snapshotted(id, all, err)
	if err != nil {
		// Nothing was staged, so no checkpoint outcome gives the records
		// back: release them.
		if _, rerr := r.cons.Release(all); rerr != nil {
			return errors.Join(fmt.Errorf("stage checkpoint %d: %w", id, err), rerr)
		}
		return fmt.Errorf("stage checkpoint %d: %w", id, err)
	}
	r.pending[id] = outputs
	return nil
}

// NotifyCheckpointComplete commits the acknowledgements of every staged
// checkpoint up to id in one transaction and, only if that succeeds, hands
// their output to the sink. A commit that fails drops those checkpoints:
// the output is discarded and the records come back to the group, to be
// processed again. A commit whose outcome is in doubt is learned first:
// if it had committed, the output goes to the sink after all.
func (r *reader) NotifyCheckpointComplete(ctx context.Context, id int64) error {
	outputs := r.take(id)
	err := r.ack.CommitCheckpoint(ctx, id)
	if errors.Is(err, kshare.ErrInDoubt) {
		// The commit's answer was lost and the abort inside
		// CommitCheckpoint could not learn the outcome either.
		switch aerr := r.abort(ctx); {
		case errors.Is(aerr, kshare.ErrCommitted):
			err = nil
		case aerr == nil:
			err = fmt.Errorf("checkpoint %d had not committed: %w", id, kshare.ErrAbortable)
		default:
			return fmt.Errorf("learning the outcome of %v: %w", err, aerr)
		}
	}
	if err != nil {
		return r.ended(ctx, err)
	}
	r.sink.Commit(outputs)
	return nil
}

// NotifyCheckpointAborted drops every staged checkpoint up to id: their
// output is discarded and the consumer releases their records to the
// group at once.
func (r *reader) NotifyCheckpointAborted(_ context.Context, id int64) error {
	r.take(id)
	return r.ack.AbortCheckpoint(id)
}

// take removes the staged checkpoints up to id and returns their output.
func (r *reader) take(id int64) []string {
	var outputs []string
	for cid, out := range r.pending {
		if cid <= id {
			outputs = append(outputs, out...)
			delete(r.pending, cid)
		}
	}
	return outputs
}

// ended makes sure that a commit that failed with err leaves no
// transaction open, and returns err, joined with the error of that
// clean-up if it failed. A kshare.ErrAbortable err is a checkpoint
// dropped; anything else (kshare.ErrFatal: fenced; kshare.ErrUnsupported:
// a cluster without KIP-1289; an error this reader does not know) stops
// the run.
func (r *reader) ended(ctx context.Context, err error) error {
	if !errors.Is(err, kshare.ErrAbortable) {
		return err
	}
	if aerr := r.abort(ctx); aerr != nil {
		return fmt.Errorf("%v; ending its transaction: %w", err, aerr)
	}
	return err
}

// abort ends the acknowledger's transaction (learning an in-doubt
// outcome) in a context of its own: ctx may be what made the commit fail.
func (r *reader) abort(ctx context.Context) error {
	abortCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.txnTimeout)
	defer cancel()
	return r.ack.AbortAcknowledgements(abortCtx)
}

// Close drops the staged checkpoints (the acknowledger first: the
// consumer leaves staged records alone) and releases what the consumer
// still holds. An acknowledger Close that learned that an in-doubt
// commit had committed (kshare.ErrCommitted) is no failure.
func (r *reader) Close(ctx context.Context) error {
	aerr := r.ack.Close(ctx)
	if errors.Is(aerr, kshare.ErrCommitted) {
		aerr = nil
	}
	return errors.Join(aerr, r.cons.Close(ctx))
}
