package producer

import (
	"context"
	"errors"
	"sync"
)

// errAbandoned ends the wait of a Produce call whose transaction is being
// aborted, or whose producer is closing.
var errAbandoned = errors.New("the record's transaction was abandoned while it waited")

// waits ends the waits of Produce calls that have not buffered their
// record yet (for a buffer slot, for a topic's metadata) once the record
// can no longer join its transaction: the transaction is being aborted
// (drain) or the producer is closing. Without it such a call would hold
// AbortTransaction, or Close, until its own context or the transaction
// timeout ended, and outlive Close. The zero value is ready to use.
//
// Only a Produce that has to wait asks for the context, so the path of a
// record that finds a slot and a known topic never touches it.
type waits struct {
	mu        sync.Mutex
	abandoned uint64 // every transaction up to this number is abandoned
	txn       uint64 // the transaction ctx belongs to
	ctx       context.Context
	cancel    context.CancelFunc
}

// of returns a context that ends once transaction txnNum is abandoned.
func (w *waits) of(txnNum uint64) context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	if txnNum <= w.abandoned {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}
	if w.ctx == nil || w.txn != txnNum {
		if w.cancel != nil {
			// An older transaction's: it ended, so nothing of it waits.
			w.cancel()
		}
		w.ctx, w.cancel = context.WithCancel(context.Background())
		w.txn = txnNum
	}
	return w.ctx
}

// abandon ends the waits of every transaction up to txnNum.
func (w *waits) abandon(txnNum uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.abandoned = max(w.abandoned, txnNum)
	if w.ctx != nil && w.txn <= w.abandoned {
		w.cancel()
		w.ctx, w.cancel = nil, nil
	}
}
