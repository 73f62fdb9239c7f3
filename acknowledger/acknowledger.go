package acknowledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/txnclient"
	"github.com/kshare-go/kshare/wire"
)

// Acknowledger commits share-group acknowledgements in Kafka transactions
// of its own, without producing records: the TransactionalShareAcknowledger
// of KIP-1289. Each commit is the standard two-phase protocol (begin,
// AddShareAcksToTxn and TxnShareAcknowledge, EndTxn), run by a
// producer.Producer that produces nothing.
//
// Its calls may be shared by goroutines: the transaction calls
// (InitTransactions, CommitAcknowledgements, AbortAcknowledgements,
// CommitCheckpoint, AbortCheckpoint) run one at a time, each waiting for
// the one in progress within its context; Stage and Staged never wait for
// a transaction; Close never waits past its context. Every error matches
// txnclient.ErrAbortable (the acknowledgements did not commit; the records
// come back to the group, see the package documentation),
// txnclient.ErrInDoubt (a commit's outcome could not be learned, see
// CommitAcknowledgements), txnclient.ErrFatal (fenced, unauthorized, or the
// cluster lacks KIP-1289: close the acknowledger) or txnclient.ErrUsage
// (fix the call, or the acknowledger is closed).
type Acknowledger struct {
	p      *producer.Producer
	logger *slog.Logger
	// txnSem serializes the transaction calls; a channel, so that waiting
	// for it ends with the caller's context.
	txnSem chan struct{}

	mu        sync.Mutex // guards what follows; never held across a transaction
	closed    bool
	staged    []checkpoint // sorted by id
	committed int64        // highest checkpoint id committed
	anyCommit bool
}

// checkpoint is one Stage call waiting for its checkpoint to complete.
type checkpoint struct {
	id   int64
	acks *wire.ShareAcks
	meta wire.ShareGroupMetadata
}

// New creates an Acknowledger and its producer. It does not contact the
// cluster; call InitTransactions first. It fails with txnclient.ErrUsage
// on missing or invalid options (SeedBrokers and TransactionalID are
// required).
func New(opts ...Opt) (*Acknowledger, error) {
	cfg := config{logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if o == nil {
			return nil, txnclient.Usage("new acknowledger", errors.New("nil option"))
		}
		o.apply(&cfg)
	}
	if cfg.logger == nil {
		return nil, txnclient.Usage("new acknowledger", errors.New("nil logger"))
	}
	p, err := producer.New(cfg.producer...)
	if err != nil {
		return nil, err
	}
	return &Acknowledger{p: p, logger: cfg.logger, txnSem: make(chan struct{}, 1)}, nil
}

// Producer returns the producer that runs the transactions, for its
// metrics and transaction state. Do not begin or end transactions on it.
func (a *Acknowledger) Producer() *producer.Producer { return a.p }

// enter checks that the acknowledger is open and waits, within ctx, for
// the transaction call in progress; the returned function ends this one.
func (a *Acknowledger) enter(ctx context.Context, op string) (func(), error) {
	if ctx == nil {
		return nil, txnclient.Usage(op, errors.New("nil context"))
	}
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return nil, errClosed(op)
	}
	select {
	case a.txnSem <- struct{}{}:
		return func() { <-a.txnSem }, nil
	case <-ctx.Done():
		return nil, txnclient.Abortable(op, fmt.Errorf("waiting for the transaction call in progress: %w", ctx.Err()))
	}
}

// InitTransactions gets the acknowledger's producer id and epoch, fencing
// an older acknowledger with the same transactional id. Call it once before
// anything else, and again after an error left a transaction that
// AbortAcknowledgements could not end: it ends that transaction first (see
// producer.Producer.InitTransactions).
func (a *Acknowledger) InitTransactions(ctx context.Context) error {
	leave, err := a.enter(ctx, "init transactions")
	if err != nil {
		return err
	}
	defer leave()
	return a.p.InitTransactions(ctx)
}

// CommitAcknowledgements commits acks, the acknowledgements of records
// that the member meta (the consumer's GroupMetadata) holds, in one
// transaction: begin, send them, commit. When it fails, it aborts the
// transaction before returning, so the acknowledgements take effect
// nowhere: records whose acknowledgement reached their leader are
// available to the group again at once, the others when their locks run
// out. Empty acks commit nothing and return nil.
//
// If the commit's answer is lost (txnclient.ErrInDoubt from the producer),
// the abort learns the outcome: CommitAcknowledgements returns nil if the
// commit had been applied, and ErrAbortable if it had not. Only when the
// abort cannot learn it either (ctx ended) does the error match
// txnclient.ErrInDoubt; AbortAcknowledgements, InitTransactions or Close
// then learn it.
func (a *Acknowledger) CommitAcknowledgements(ctx context.Context, acks *wire.ShareAcks, meta wire.ShareGroupMetadata) error {
	const op = "commit acknowledgements"
	if acks == nil {
		return txnclient.Usage(op, errors.New("nil acknowledgements"))
	}
	leave, err := a.enter(ctx, op)
	if err != nil {
		return err
	}
	defer leave()
	if acks.Len() == 0 {
		return nil
	}
	return a.runTxn(ctx, op, []sendItem{{acks: guarded(acks), meta: meta}})
}

// AbortAcknowledgements aborts a transaction that a failed call left open
// (CommitAcknowledgements and CommitCheckpoint abort on failure, but the
// abort itself can fail, for example when ctx ends). With no transaction in
// progress it does nothing. After an in-doubt commit it returns an error
// matching txnclient.ErrCommitted if the commit turns out to have been
// applied.
func (a *Acknowledger) AbortAcknowledgements(ctx context.Context) error {
	leave, err := a.enter(ctx, "abort acknowledgements")
	if err != nil {
		return err
	}
	defer leave()
	switch a.p.Transactions().State() {
	case txnclient.StateInTransaction, txnclient.StateAbortableError, txnclient.StateInDoubt:
		return a.p.AbortTransaction(ctx)
	}
	return nil
}

// sendItem is one SendShareAcksToTransaction of a transaction.
type sendItem struct {
	acks *wire.ShareAcks
	meta wire.ShareGroupMetadata
}

// runTxn begins a transaction, sends items and commits. On failure it
// aborts (unless the producer is fatally broken), which also learns the
// outcome of a commit whose answer was lost, and tells the trackers of
// items that never joined the transaction that they will not be sent; the
// producer tells the others when the transaction's outcome is known. Every
// item's tracker is resolved once (guarded makes a second call a no-op).
func (a *Acknowledger) runTxn(ctx context.Context, op string, items []sendItem) error {
	if err := a.p.BeginTransaction(); err != nil {
		resolveAll(items, false)
		return err
	}
	err := func() error {
		for i, it := range items {
			if err := a.p.SendShareAcksToTransaction(ctx, it.acks, it.meta); err != nil {
				resolveAll(items[i:], false)
				return err
			}
		}
		return a.p.CommitTransaction(ctx)
	}()
	if err == nil || errors.Is(err, txnclient.ErrFatal) {
		return err
	}
	aerr := a.p.AbortTransaction(ctx)
	switch {
	case aerr == nil && errors.Is(err, txnclient.ErrInDoubt):
		var te *txnclient.Error
		cause := err
		if errors.As(err, &te) && te.Err != nil {
			cause = te.Err
		}
		return txnclient.Abortable(op, fmt.Errorf("the commit's answer was lost and the abort found it had not been applied: %w", cause))
	case aerr == nil:
		return err
	case errors.Is(aerr, txnclient.ErrCommitted):
		a.logger.Info("the commit whose answer was lost had been applied", "op", op)
		return nil
	}
	a.logger.Warn("abort after a failed transactional acknowledgement failed; call AbortAcknowledgements",
		"op", op, "err", aerr)
	if errors.Is(aerr, txnclient.ErrInDoubt) {
		return aerr
	}
	return fmt.Errorf("%w (abort failed too: %w)", err, aerr)
}

func resolveAll(items []sendItem, committed bool) {
	for _, it := range items {
		if it.acks.Tracker != nil {
			it.acks.Tracker.Resolve(it.acks, committed)
		}
	}
}

// Close drops every staged checkpoint (their records come back to the
// group when their locks run out), then closes the producer within ctx,
// which ends a transaction in progress the way producer.Producer.Close
// does: a transaction call running in another goroutine is waited for
// within ctx and cut short after, and a transaction left open is aborted.
// It returns the producer's error: nil, or why a transaction could not be
// ended. Every staged acknowledgement has been resolved once when it
// returns, and calls after it fail with ErrUsage. Calling it again waits
// for the first Close within ctx and returns nil.
func (a *Acknowledger) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return a.p.Close(ctx)
	}
	a.closed = true
	staged := a.staged
	a.staged = nil
	a.mu.Unlock()
	for _, cp := range staged {
		if cp.acks.Tracker != nil {
			cp.acks.Tracker.Resolve(cp.acks, false)
		}
	}
	return a.p.Close(ctx)
}

func errClosed(op string) error { return txnclient.Usage(op, errors.New("acknowledger is closed")) }

// groupByMember merges checkpoints per share-group member: one
// SendShareAcksToTransaction each. The merged acknowledgements' tracker
// fans out to the trackers of the checkpoints it merged.
func groupByMember(cps []checkpoint, typ func(wire.AckType) wire.AckType) []sendItem {
	byMeta := make(map[wire.ShareGroupMetadata]*sendItem)
	var order []wire.ShareGroupMetadata
	trackers := make(map[wire.ShareGroupMetadata][]*wire.ShareAcks)
	for _, cp := range cps {
		it := byMeta[cp.meta]
		if it == nil {
			it = &sendItem{acks: new(wire.ShareAcks), meta: cp.meta}
			byMeta[cp.meta] = it
			order = append(order, cp.meta)
		}
		for _, tp := range cp.acks.Partitions() {
			id, _ := cp.acks.TopicID(tp.Topic)
			for _, r := range cp.acks.Records(tp) {
				r.Type = typ(r.Type)
				it.acks.Add(tp.Topic, id, tp.Partition, r)
			}
		}
		if cp.acks.Tracker != nil {
			trackers[cp.meta] = append(trackers[cp.meta], cp.acks)
		}
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].GroupID != order[j].GroupID {
			return order[i].GroupID < order[j].GroupID
		}
		return order[i].MemberID < order[j].MemberID
	})
	out := make([]sendItem, 0, len(order))
	for _, m := range order {
		it := byMeta[m]
		if parts := trackers[m]; len(parts) > 0 {
			it.acks.Tracker = &fanout{parts: parts}
		}
		out = append(out, *it)
	}
	return out
}

// guarded returns a copy of acks whose tracker passes every event on to
// acks' own tracker, and resolves it once however often it is told.
func guarded(acks *wire.ShareAcks) *wire.ShareAcks {
	if acks.Tracker == nil {
		return acks
	}
	g := new(wire.ShareAcks)
	g.Merge(acks)
	g.Tracker = &fanout{parts: []*wire.ShareAcks{acks}}
	return g
}

// fanout is the tracker of merged (or guarded) acknowledgements: it
// passes each event on to the tracker of every part, and the outcome only
// once, since both the producer (once a transaction ends) and the
// acknowledger (for acknowledgements that never joined one) may report it.
type fanout struct {
	parts    []*wire.ShareAcks
	resolved atomic.Bool
}

// Stage checks every part again with its own tracker (the consumer renews
// staged locks, but one may still have been lost).
func (f *fanout) Stage(*wire.ShareAcks) error {
	for _, part := range f.parts {
		if err := part.Tracker.Stage(part); err != nil {
			return err
		}
	}
	return nil
}

// Resolve tells every part's tracker the outcome, the first time only.
func (f *fanout) Resolve(_ *wire.ShareAcks, committed bool) {
	if f.resolved.Swap(true) {
		return
	}
	for _, part := range f.parts {
		part.Tracker.Resolve(part, committed)
	}
}
