// Package producer is kshare's transactional producer: records,
// consumer-group offsets and share-group acknowledgements committed in one
// Kafka transaction.
//
// It uses kgo as the transport (connections, TLS/SASL, version negotiation,
// metadata, compression codecs, partitioners, kgo.Record) and owns the
// produce path and the transaction: it batches records per partition into
// idempotent, transactional RecordBatch v2 batches (linger, batch size, a
// few requests in flight per broker, one batch in flight per partition so
// that sequence numbers stay ordered across retries) and runs the
// transaction protocol itself. kgo's own transactional producer cannot
// carry share acknowledgements: it keeps the producer epoch private, skips
// EndTxn for a transaction in which it produced nothing (an
// acknowledgement-only transaction could never commit), and treats
// INVALID_TXN_STATE from a coordinator that has just lost its partition
// as fatal (KAFKA-21181); this producer finds the coordinator again and
// retries such answers instead.
//
// A consume-transform-produce transaction with a share consumer:
//
//	p.BeginTransaction()
//	for _, r := range polled {
//		p.Produce(ctx, transform(r), nil)
//	}
//	err := p.SendShareAcksToTransaction(ctx, cons.Acks(polled, kshare.AckAccept), cons.GroupMetadata())
//	if err == nil {
//		err = p.CommitTransaction(ctx) // flush, acknowledgements, EndTxn
//	}
//	switch {
//	case errors.Is(err, kshare.ErrAbortable):
//		p.AbortTransaction(ctx)        // outputs discarded, inputs redelivered
//	case errors.Is(err, kshare.ErrInDoubt):
//		p.AbortTransaction(ctx)        // learns the outcome: kshare.ErrCommitted if it had
//	case err != nil:
//		return err                     // kshare.ErrFatal (fenced), ErrUnsupported, ...
//	}
//
// A transaction that carries only acknowledgements commits too: a filter
// that drops a whole batch must still acknowledge it. Commit fails with
// ErrAbortable if any record of the transaction failed or was refused
// (a record without a topic dooms its transaction, as the loop above,
// which passes no promise, would otherwise commit the input's
// acknowledgement without its output), if a partition leader refused an
// acknowledgement (INVALID_RECORD_STATE: the lock expired
// or the record is not held by this member), or if a retriable error
// outlasted the context or the transaction timeout.
//
// # Errors
//
// Every error matches exactly one class of package kshare (see its
// documentation): ErrAbortable (abort and redo), ErrInDoubt (a commit's
// answer was lost: abort, which learns the outcome), ErrCommitted (that
// abort found it had committed), ErrFatal (close: fenced, unauthorized,
// refused configuration), ErrUnsupported (the cluster lacks KIP-1289;
// nothing was sent), ErrUsage (fix the code) and ErrClosed (after Close).
// Retriable broker errors never reach the caller: they are retried with
// kshare's one backoff policy until the caller's context or the
// transaction timeout ends. The Kafka error stays reachable with
// errors.As (*kerr.Error).
//
// # Lifecycle
//
// The transaction calls run one at a time; Close waits for the one in
// progress within its context and never lets part of a transaction
// commit; a lost answer is retried until the broker answers; a commit
// whose answer never came is in doubt until the next call learns its
// outcome; InitTransactions after an error aborts first and then bumps the
// epoch. The full rules are in docs/design.md ("Lifecycle").
package producer
