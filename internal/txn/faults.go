package txn

import (
	"context"
	"sync/atomic"
)

// FaultHooks act at the moments of a ledger transaction that no public
// call reaches, for fault injection (internal/eos) only. Each gets the
// context of the call it runs in (SendShareAcksToTransaction's, or
// CommitTransaction's), which carries the caller's values: that is how a
// harness tells its workers apart. Any may be nil.
type FaultHooks struct {
	// BeforeClaims runs once SendShareAcksToTransaction has staged the
	// records with their consumer and before it writes their claims: a
	// worker that stalls here past its locks leaves the records to
	// another member that finds no claim for them.
	BeforeClaims func(ctx context.Context)
	// BeforeRenew runs once the claims are durable (the flush is done)
	// and before their records' locks are renewed: a worker that stalls
	// here past its locks is the old holder of the ledger's race.
	BeforeRenew func(ctx context.Context)
	// Committed runs once EndTxn(COMMIT) was answered, before the
	// consumers learn the outcome and send their acknowledgements: a
	// worker that dies here has committed and acknowledged nothing.
	Committed func(ctx context.Context)
}

var faultHooks atomic.Pointer[FaultHooks]

// SetFaultHooks makes every ledger transaction of the process run h (nil:
// none).
func SetFaultHooks(h *FaultHooks) { faultHooks.Store(h) }
