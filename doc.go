// Package kshare is a Go SDK for exactly-once share-group pipelines on
// Kafka: a share-group consumer (KIP-932, "queues for Kafka") reads
// records, and the application writes its output records and the
// acknowledgements of the input records in one Kafka transaction, so that
// both commit or neither does (KIP-1289).
//
// This package is the vocabulary the others share: the error classes every
// kshare error belongs to, and the acknowledgement types. The clients are
// in its subpackages:
//
//   - producer: a transactional producer whose transactions carry share
//     acknowledgements (SendShareAcksToTransaction) next to records and
//     consumer-group offsets.
//   - shareconsumer: a share-group consumer with implicit, explicit and
//     transactional acknowledgement, and the share group's configuration
//     (SetGroupConfig, AlterGroupConfig).
//   - acknowledger: KIP-1289's TransactionalShareAcknowledger, for
//     pipelines that write their output elsewhere (stream processors with
//     checkpoints): acknowledgements committed in transactions of its own.
//   - broker: a bundled Kafka-compatible cluster that runs in the process
//     (or as cmd/kshare-broker), with the KIP-1289 APIs, for tests and
//     development.
//   - wire: the KIP-1289 wire format, for kgo users who send the two new
//     requests themselves.
//
// # The loop
//
// A worker polls with a consumer in shareconsumer.Transactional mode, which
// never acknowledges by itself, and runs a transaction per batch:
//
//	records, err := cons.Poll(ctx)
//	...
//	prod.BeginTransaction()
//	for _, r := range records {
//		prod.Produce(ctx, transform(r), nil)
//	}
//	acks := cons.Acks(records, kshare.AckAccept)
//	err = prod.SendShareAcksToTransaction(ctx, acks, cons.GroupMetadata())
//	if err == nil {
//		err = prod.CommitTransaction(ctx)
//	}
//
// If the transaction commits, the outputs become visible and the inputs
// are acknowledged; if it aborts, the outputs are discarded and the inputs
// come back to the group at once, to be processed again. The consumer
// follows the acknowledgements it built (ShareAcks) through the
// transaction: it refuses records whose lock expired, renews the locks of
// records while their transaction is open, and releases the records of an
// aborted one. The complete loop, with shutdown and every error handled,
// is examples/ctp/worker.go (the README shows it); the Example below runs
// one transaction against a bundled cluster.
//
// # Errors
//
// Every error a kshare call returns matches exactly one class with
// errors.Is, and the class says what to do:
//
//   - ErrAbortable: the work did not take effect; abort the transaction,
//     and redo the work with the records that come back.
//   - ErrInDoubt: a commit's answer was lost; AbortTransaction learns the
//     outcome (nil: it had not committed; ErrCommitted: it had).
//   - ErrCommitted: not a failure; the in-doubt transaction had committed
//     (AbortTransaction, AbortAcknowledgements, Close).
//   - ErrFatal: fenced by a newer instance, not authorized, refused
//     configuration: close the client.
//   - ErrUnsupported: the cluster lacks what the call needs (KIP-1289,
//     share groups); nothing was sent.
//   - ErrUsage: invalid arguments or a call in the wrong state; fix the
//     code.
//   - ErrClosed: the client was closed.
//
// Package sentinels refine a class (shareconsumer.ErrLockExpired is
// abortable, shareconsumer.ErrNotHeld a usage error), and the cause stays
// reachable: errors.As finds the Kafka error (*kerr.Error) or the context
// error behind a kshare error.
//
// The lifecycle rules (Close, cancellation, lost answers, in-doubt
// commits) are in each client's documentation and in docs/design.md; the
// whole public surface, with what every call can return, is in
// docs/api.md.
package kshare
