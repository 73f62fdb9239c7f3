// Package acknowledger is the TransactionalShareAcknowledger of KIP-1289:
// it commits share-group acknowledgements in Kafka transactions of its own,
// for pipelines that write their outputs elsewhere (stream processors with
// checkpoints, sinks to other systems) and so have no producer transaction
// to put the acknowledgements in.
//
// It is built on package producer: each commit is the standard two-phase
// protocol run by a transactional producer that produces nothing (begin,
// TxnShareAcknowledge to each partition leader, which adds the share state
// partition to the transaction, then EndTxn). It is not a new RPC. The acknowledger has
// its own transactional id; a newer acknowledger with the same id fences
// it.
//
// # Direct commits
//
// CommitAcknowledgements(ctx, acks, meta) commits the acknowledgements of
// records that the share-group member meta holds (the consumer's
// GroupMetadata), built with shareconsumer.Consumer.Acks. On failure it
// aborts before returning; AbortAcknowledgements ends a transaction whose
// abort failed too.
//
// # Checkpoints
//
// A stream processor acknowledges what a checkpoint covers once the
// checkpoint is durable:
//
//	a.Stage(checkpointID, consumer.Acks(records, kshare.AckAccept), consumer.GroupMetadata())
//	...                                  // the checkpoint completes
//	a.CommitCheckpoint(ctx, checkpointID) // everything staged up to it, one transaction
//
// Staging sends nothing, but it tells the consumer, which checks the locks
// at once and renews them until the checkpoint commits or fails: a
// checkpoint interval longer than the lock duration redelivers nothing.
// Stage each ShareAcks once: acknowledgements already staged (in a
// checkpoint, or a transaction that has not ended) are refused with
// kshare.ErrUsage.
//
// What happens to staged acknowledgements when a checkpoint fails: they
// take effect nowhere, and their records come back to the group at once,
// with one mechanism for every case: the consumer that built them learns
// that they will never commit and releases the records it still holds
// (ShareAcknowledge RELEASE; the delivery count is not raised by the
// release). Records whose acknowledgement had already reached their leader
// are made available by the transaction's abort instead.
//
//   - AbortCheckpoint(id) (the checkpoint failed before commit) drops
//     everything staged up to id; it sends nothing itself. While a
//     CommitCheckpoint is committing a checkpoint up to id, it drops
//     nothing and fails with kshare.ErrUsage: that commit decides.
//   - A CommitCheckpoint that fails aborts its transaction and drops the
//     checkpoint. The checkpoint's work must be redone with the
//     redelivered records.
//   - Close drops every staged checkpoint.
//
// Every redelivery raises a record's delivery count, so a record whose
// checkpoints keep failing reaches the group's share.delivery.count.limit
// and is archived.
//
// # Errors
//
// Every error matches exactly one class of package kshare:
// kshare.ErrAbortable (nothing committed; the records come back; redo the
// work), kshare.ErrInDoubt (a commit's answer was lost and its abort could
// not learn the outcome either; AbortAcknowledgements, InitTransactions or
// Close learns it), kshare.ErrCommitted (AbortAcknowledgements found that
// such a commit had committed: not a failure), kshare.ErrFatal (fenced or
// unauthorized: close the acknowledger), kshare.ErrUnsupported (a broker
// lacks KIP-1289; the message names it; InitTransactions checks the
// transaction coordinator at once), kshare.ErrUsage (fix the call)
// and kshare.ErrClosed (after Close). A lock that ran out surfaces as
// kshare.ErrAbortable wrapping shareconsumer.ErrLockExpired.
//
// # Lifecycle
//
// The transaction calls run one at a time; Close drops the staged
// checkpoints and closes the producer without waiting past its context for
// a call in progress, and every staged acknowledgement is resolved exactly
// once (docs/design.md, "Lifecycle").
package acknowledger
