// Package producer is kshare's transactional producer: records and
// share-group acknowledgements committed in one Kafka transaction.
//
// It uses kgo as the transport (connections, TLS/SASL, version negotiation,
// metadata, compression codecs, partitioners, kgo.Record) and owns the
// produce path and the transaction: it batches records per partition into
// idempotent, transactional RecordBatch v2 batches (linger, batch size, a
// few requests in flight per broker, one batch in flight per partition so
// that sequence numbers stay ordered across retries), and drives a
// txnclient.Manager for the transaction. See package txnclient for why kgo's
// own transactional producer cannot be used, and for the error taxonomy:
// every error matches txnclient.ErrAbortable (abort and redo),
// txnclient.ErrInDoubt (a commit's answer was lost: abort, which learns the
// outcome), txnclient.ErrCommitted (that abort found it had committed),
// txnclient.ErrFatal (close) or txnclient.ErrUsage (fix the code, or the
// producer is closed).
//
// A consume-transform-produce loop with a share consumer:
//
//	p.BeginTransaction()
//	for _, r := range polled {
//		p.Produce(ctx, transform(r), nil)
//	}
//	p.SendShareAcksToTransaction(ctx, acks, consumer.GroupMetadata())
//	err := p.CommitTransaction(ctx)   // flush, acks, EndTxn
//	switch {
//	case errors.Is(err, txnclient.ErrFatal):
//		return err                     // fenced: close
//	case err != nil:                   // ErrAbortable or ErrInDoubt
//		p.AbortTransaction(ctx)        // outputs discarded, inputs redelivered;
//	}                                  // ErrCommitted if the lost commit had committed
//
// A transaction that carries only acknowledgements commits too: a filter
// that drops a whole batch must still acknowledge it. Commit fails with
// ErrAbortable if any record of the transaction failed, if a partition
// leader refused an acknowledgement (INVALID_RECORD_STATE: the lock expired
// or the record is not held by this member), or if a retriable error
// outlasted the context or the transaction timeout.
//
// Lifecycle: the transaction calls run one at a time; Close waits for the
// one in progress within its context and never lets part of a transaction
// commit; a lost answer is retried until the broker answers; a commit
// whose answer never came is in doubt until the next call learns its
// outcome; InitTransactions after an error aborts first and then bumps the
// epoch. The full rules are in docs/design.md ("Lifecycle").
package producer
