// Package acknowledger is the TransactionalShareAcknowledger of KIP-1289:
// it commits share-group acknowledgements in Kafka transactions of its own,
// for pipelines that write their outputs elsewhere (stream processors with
// checkpoints, sinks to other systems) and so have no producer transaction
// to put the acknowledgements in.
//
// It is built on package producer: each commit is the standard two-phase
// protocol run by a transactional producer that produces nothing (begin,
// AddShareAcksToTxn to the transaction coordinator, TxnShareAcknowledge to
// each partition leader, EndTxn). It is not a new RPC. The acknowledger has
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
//	a.Stage(checkpointID, consumer.Acks(records, wire.AckAccept), consumer.GroupMetadata())
//	...                                  // the checkpoint completes
//	a.CommitCheckpoint(ctx, checkpointID) // everything staged up to it, one transaction
//
// Staging sends nothing, but it tells the consumer, which checks the locks
// at once and renews them until the checkpoint commits or fails: a
// checkpoint interval longer than the lock duration redelivers nothing.
//
// What happens to staged acknowledgements when a checkpoint fails:
//
//   - AbortCheckpoint(ctx, id) (the checkpoint failed before commit) drops
//     everything staged up to id and releases the records in a transaction
//     of RELEASE acknowledgements: the group gets them again at once, with
//     their delivery count unchanged by the release.
//   - A CommitCheckpoint that fails aborts its transaction and drops the
//     checkpoint: its acknowledgements take effect nowhere. Records whose
//     acknowledgement had reached their leader are available again at once;
//     the consumer releases the others it still holds. Either way they are
//     delivered again and the checkpoint's work must be redone.
//   - Close drops every staged checkpoint the same way.
//
// Every redelivery raises a record's delivery count, so a record whose
// checkpoints keep failing reaches the group's share.delivery.count.limit
// and is archived.
//
// # Errors
//
// Every error matches one of txnclient.ErrAbortable (nothing committed; the
// records come back; redo the work), txnclient.ErrInDoubt (a commit's
// answer was lost and its abort could not learn the outcome either;
// AbortAcknowledgements, InitTransactions or Close learns it),
// txnclient.ErrCommitted (AbortAcknowledgements found that such a commit
// had committed), txnclient.ErrFatal (fenced, unauthorized, or a broker
// lacks KIP-1289: txnclient.ErrShareAcksUnsupported names it; close the
// acknowledger) and txnclient.ErrUsage (fix the call, or the acknowledger
// is closed). A lock that ran out surfaces as ErrAbortable wrapping
// shareconsumer.ErrLockExpired.
//
// # Lifecycle
//
// The transaction calls run one at a time; Close drops the staged
// checkpoints and closes the producer without waiting past its context for
// a call in progress, and every staged acknowledgement is resolved exactly
// once (docs/design.md, "Lifecycle").
package acknowledger
