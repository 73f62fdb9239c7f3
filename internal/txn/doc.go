// Package txn is kshare's client transaction manager: coordinator
// discovery, the transaction state machine, and the share
// acknowledgements a transaction carries. Package producer drives a
// Manager (and the acknowledger does through a producer); nothing else
// uses it, and it is internal so that the produce path and the
// transaction can change without changing kshare's API.
//
// kgo's own transactional producer cannot be used for transactional share
// acknowledgements: it keeps the producer epoch private, skips EndTxn for a
// transaction in which it produced nothing (an acknowledgement-only
// transaction could never commit), and treats INVALID_TXN_STATE from EndTxn
// as fatal even when it comes from a coordinator that has just lost its
// partition (KAFKA-21181). So kshare uses kgo only as the transport (a
// kgo.Client for connections, version negotiation and metadata) and this
// package owns the transaction.
//
// # What it does
//
//   - Coordinators: FindCoordinator for key types 0 (group), 1
//     (transaction) and 2 (share), cached, dropped on NOT_COORDINATOR,
//     COORDINATOR_NOT_AVAILABLE or a connection error.
//   - Manager: InitProducerId (with recovery: the open transaction is
//     aborted first, then the current id and epoch are passed to bump the
//     epoch), Begin, Commit, Abort, Close, the states Ready,
//     InTransaction, Committing, Aborting, AbortableError, InDoubt,
//     FatalError and Closed. On brokers with finalized
//     transaction.version >= 2 (TV2) EndTxn v5 returns the bumped epoch
//     and the client never sends AddPartitionsToTxn; otherwise it falls
//     back to TV1 (client AddPartitionsToTxn v3 and AddOffsetsToTxn).
//   - Lifecycle: the state-changing operations run one at a time, each
//     waiting within its context; Close waits for the one in progress
//     within its context and then cuts it short, so that no partial
//     transaction commits; a commit whose EndTxn answer was lost is
//     retried until the coordinator answers and is InDoubt
//     (kshare.ErrInDoubt) only when the context ends first; the next
//     Commit, Abort, InitProducerID or Close learns its outcome. See
//     docs/design.md, "Lifecycle".
//   - The stale-answer defense: INVALID_TXN_STATE, PRODUCER_FENCED or
//     INVALID_PRODUCER_ID_MAPPING from EndTxn (or from a request sent
//     without talking to the coordinator first) is checked with a fresh
//     FindCoordinator and the request retried at the coordinator it
//     names, moved or not; only the same answer repeated by that
//     coordinator is final.
//   - Share acknowledgements (KIP-1289) staged per transaction and sent at
//     commit, while the records are flushed and before EndTxn:
//     TxnShareAcknowledge v0 once per partition leader, in the layout of
//     KIP-1289's draft (apache/kafka PR #22357); the leader adds the share
//     state partition to the transaction, KIP-890 style. RELEASE is never
//     sent in the transaction: the tracker releases those records with a
//     plain ShareAcknowledge once the outcome is known. Without
//     TxnShareAcknowledge v0 and share.version >= 3 on every broker
//     involved, StageShareAcks returns kshare.ErrUnsupported and sends
//     nothing. The tracker of the acknowledgements (the share
//     consumer) hears Stage before they join and Resolve exactly once when
//     the outcome is known.
//
// # Errors
//
// Every error a Manager returns is classified (package internal/errs) in
// exactly one of kshare's classes. Retriable broker errors never reach the
// caller: they are retried with kshare's backoff (internal/retry) until
// the caller's context or the transaction timeout ends, and then come back
// as kshare.ErrAbortable. Broker errors after which a producer can do
// nothing more (fatalCodes) are kshare.ErrFatal. A fatal error that leaves
// a commit's outcome unknown is kshare.ErrFatal and says so in its
// message.
package txn
