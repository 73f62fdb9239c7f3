package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/eos"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// This file is the pipeline: a worker of an exactly-once
// consume-transform-produce job in plain SDK calls. Copy it; the w.Hooks
// lines are where the harness injects faults and counts outcomes, and do
// nothing without it (nil hooks).

// closeTimeout bounds the Close calls of a worker that stops.
const closeTimeout = 10 * time.Second

// runWorker runs one worker: a share consumer in transactional mode and a
// transactional producer that copy every input record to the output in
// transactions that also carry the input's acknowledgements, so that the
// output and the acknowledgements commit together or not at all.
//
// It returns nil once ctx ends, after finishing the transaction in
// progress. It returns an error when it cannot go on: the producer is
// fenced by a newer instance with the same transactional id
// (kshare.ErrFatal), the cluster lacks KIP-1289 (kshare.ErrUnsupported),
// or any error that is neither kshare.ErrAbortable nor kshare.ErrInDoubt,
// which it does not know how to handle.
func runWorker(ctx context.Context, w eos.Worker) error {
	cons, err := shareconsumer.New(
		shareconsumer.SeedBrokers(w.Seeds...),
		shareconsumer.Group(w.Group),
		shareconsumer.Topics(w.Input),
		shareconsumer.Mode(shareconsumer.Transactional), // never acknowledges by itself
		shareconsumer.MaxPollRecords(int32(w.TxnSize)),
		shareconsumer.MaxWait(250*time.Millisecond),
		shareconsumer.Logger(w.Logger),
		shareconsumer.ShareLedger(w.Ledger), // "": KIP-1289; a topic: the claim ledger
	)
	if err != nil {
		return fmt.Errorf("share consumer: %w", err)
	}
	prod, err := producer.New(
		producer.SeedBrokers(w.Seeds...),
		producer.TransactionalID(w.TransactionalID),
		producer.TransactionTimeout(w.TxnTimeout),
		producer.Logger(w.Logger),
		producer.ShareLedger(w.Ledger),
	)
	if err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		cons.Close(closeCtx)
		return fmt.Errorf("producer: %w", err)
	}
	defer func() {
		// The producer first: it aborts a transaction left open, and the
		// consumer leaves records staged in a transaction alone. Then the
		// consumer releases what it still holds and leaves the group.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		switch err := prod.Close(closeCtx); {
		case errors.Is(err, kshare.ErrCommitted):
			w.Logger.Info("closing learned that the in-doubt commit had committed")
		case err != nil:
			w.Logger.Warn("closing the producer left its transaction to the coordinator", "err", err)
		}
		cons.Close(closeCtx)
	}()
	w.Hooks.Started(cons, prod)

	// InitTransactions fences any older instance with the same
	// transactional id and aborts the transaction it left open. It gives
	// up after the transaction timeout with kshare.ErrAbortable when the
	// coordinator cannot be reached (its broker restarting, say): try
	// again.
	for {
		err := prod.InitTransactions(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, kshare.ErrAbortable) {
			return fmt.Errorf("init transactions: %w", err)
		}
		w.Logger.Warn("init transactions: trying again", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	for {
		records, err := cons.Poll(ctx)
		switch {
		case ctx.Err() != nil:
			return nil // shutting down: Close releases what was polled
		case err != nil:
			// What the consumer cannot fix by itself: a topic that does
			// not exist, authorization, a cluster without share groups.
			return fmt.Errorf("poll: %w", err)
		}
		w.Hooks.Polled(records)
		// A poll returns at most TxnSize records: one transaction.
		if err := transaction(ctx, w, cons, prod, records); err != nil {
			return err
		}
	}
}

// transaction processes records in one transaction: their output and their
// acknowledgements commit together or not at all. It returns nil when the
// transaction committed, or aborted (its records then come back to the
// group at once and are processed again); an error means the worker must
// stop.
func transaction(ctx context.Context, w eos.Worker, cons *shareconsumer.Consumer, prod *producer.Producer, records []*kgo.Record) error {
	// A transaction that has begun is finished even when ctx ends, within
	// the transaction timeout (past it, it can no longer commit): a commit
	// cut short might have committed without the worker knowing.
	txnCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.TxnTimeout)
	defer cancel()
	// Ending a failed transaction gets time of its own: txnCtx may be what
	// ran out. A coordinator that cannot be reached (its broker
	// restarting) is waited for, one transaction timeout at a time, until
	// ctx ends: the producer stays as it was, and the abort may be tried
	// again.
	abort := func() error {
		for {
			abortCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.TxnTimeout)
			err := prod.AbortTransaction(abortCtx)
			cancel()
			if ctx.Err() != nil || !errors.Is(err, kshare.ErrAbortable) && !errors.Is(err, kshare.ErrInDoubt) {
				return err
			}
			w.Logger.Warn("abort transaction: trying again", "err", err)
			select { // an answer that comes at once must not make a busy loop
			case <-ctx.Done():
				return err
			case <-time.After(time.Second):
			}
		}
	}
	if err := prod.BeginTransaction(); err != nil {
		return fmt.Errorf("begin transaction: %w", err) // fenced, fatal or closed
	}
	var accepted, rejected []*kgo.Record
	for _, r := range records {
		out, err := transform(r, w.Output)
		if err != nil {
			rejected = append(rejected, r)
			if w.DeadLetter != "" {
				// Its dead-letter copy commits with its REJECT, or
				// neither does.
				dead, derr := cons.DeadLetter(r, w.DeadLetter, err)
				if derr != nil {
					return derr // not held: a record Poll did not return
				}
				prod.Produce(txnCtx, dead, nil)
			}
			continue
		}
		accepted = append(accepted, r)
		// A record that fails to be written fails the commit
		// (ErrAbortable): no promise is needed.
		prod.Produce(txnCtx, out, nil)
	}
	// A rejected record is archived when the transaction commits: it is
	// never delivered again, and has no output.
	acks := cons.Acks(accepted, kshare.AckAccept).Merge(cons.Acks(rejected, kshare.AckReject))

	err := w.Hooks.BeforeCommit(ctx) // faults: a slow worker, a deliberate abort, a kill
	if err == nil {
		err = prod.SendShareAcksToTransaction(txnCtx, acks, cons.GroupMetadata())
	}
	if err == nil {
		err = prod.CommitTransaction(txnCtx) // the output and the acknowledgements, atomically
	}
	switch {
	case err == nil:
		w.Hooks.Ended(records, len(accepted), nil)
		return nil
	case errors.Is(err, kshare.ErrAbortable):
		// The output is discarded and the records come back at once: those
		// whose acknowledgements were staged with the abort, the others
		// with Release. An abort that fails leaves the producer unable to
		// go on.
		if aerr := abort(); aerr != nil {
			return fmt.Errorf("abort after %v: %w", err, aerr)
		}
		if _, rerr := cons.Release(records); rerr != nil {
			return rerr
		}
		w.Logger.Info("transaction aborted; its records come back to the group", "records", len(records), "err", err)
		w.Hooks.Ended(records, 0, err)
		return nil
	case errors.Is(err, kshare.ErrInDoubt):
		// The commit was sent and its answer lost: it committed entirely
		// or not at all. The abort learns which.
		switch aerr := abort(); {
		case errors.Is(aerr, kshare.ErrCommitted):
			w.Hooks.Ended(records, len(accepted), nil)
			return nil
		case aerr == nil:
			w.Logger.Info("in-doubt transaction had not committed; its records come back to the group", "records", len(records), "err", err)
			w.Hooks.Ended(records, 0, err)
			return nil
		default:
			return fmt.Errorf("learning the outcome of %v: %w", err, aerr)
		}
	default:
		// kshare.ErrFatal: fenced by a newer instance.
		// kshare.ErrUnsupported: a cluster without KIP-1289. Anything
		// else (kshare.ErrUsage, kshare.ErrClosed) is an error this loop
		// does not know how to handle: stop rather than guess. Close
		// aborts the open transaction if it can.
		return err
	}
}

// transform turns an input record into its output: here a copy of its
// value, which must be an id ("id-..."). A value that is not one cannot be
// processed: the error makes the worker reject the record.
func transform(r *kgo.Record, output string) (*kgo.Record, error) {
	if !bytes.HasPrefix(r.Value, []byte("id-")) {
		return nil, fmt.Errorf("value %q is not an id", r.Value)
	}
	return &kgo.Record{Topic: output, Key: r.Key, Value: r.Value}, nil
}
