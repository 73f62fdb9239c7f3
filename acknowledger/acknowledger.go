package acknowledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/txn"
	"github.com/kshare-go/kshare/producer"
)

// Acknowledger commits share-group acknowledgements in Kafka transactions
// of its own, without producing records: the TransactionalShareAcknowledger
// of KIP-1289. Each commit is the standard two-phase protocol (begin,
// TxnShareAcknowledge to each partition leader, EndTxn), run by a
// producer.Producer that produces nothing.
//
// Its calls may be shared by goroutines: the transaction calls
// (InitTransactions, CommitAcknowledgements, AbortAcknowledgements,
// CommitCheckpoint) run one at a time, each waiting for the one in
// progress within its context; Stage, Staged and AbortCheckpoint never
// wait for a transaction; Close never waits past its context. Every error
// matches one class of package kshare; see the package documentation.
// Create it with New; an Acknowledger that New did not create answers
// every call with kshare.ErrUsage.
type Acknowledger struct {
	p      *producer.Producer
	logger *slog.Logger
	ledger string // ShareLedger's topic, "" for KIP-1289
	// txnSem serializes the transaction calls; a channel, so that waiting
	// for it ends with the caller's context.
	txnSem chan struct{}
	// open is set, under txnSem, while a failed call has left a
	// transaction that its own abort could not end: AbortAcknowledgements
	// ends it.
	open bool

	mu     sync.Mutex // guards what follows; never held across a transaction
	closed bool
	staged []checkpoint // sorted by id
	// committing holds the ids of the checkpoints the CommitCheckpoint in
	// progress took, in order.
	committing []int64
	committed  int64 // highest checkpoint id committed
	anyCommit  bool
}

// checkpoint is one Stage call waiting for its checkpoint to complete.
type checkpoint struct {
	id   int64
	acks *acktrack.Set
	meta kshare.ShareGroupMetadata
}

// New creates an Acknowledger and its producer. It does not contact the
// cluster; call InitTransactions first. It fails with kshare.ErrUsage on
// missing or invalid options (SeedBrokers and TransactionalID are
// required).
func New(opts ...Opt) (*Acknowledger, error) {
	const op = "new acknowledger"
	cfg := config{logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if o == nil {
			return nil, errs.Usage(op, errors.New("nil option"))
		}
		o.apply(&cfg)
	}
	if cfg.logger == nil {
		return nil, errs.Usage(op, errors.New("nil logger"))
	}
	p, err := producer.New(cfg.producer...)
	if err != nil {
		return nil, err
	}
	return &Acknowledger{p: p, logger: cfg.logger, ledger: cfg.ledger, txnSem: make(chan struct{}, 1)}, nil
}

// Metrics returns the counters of the transactions the acknowledger ran:
// TransactionsCommitted, TransactionsAborted, ShareAcksCommitted and the
// commit latencies (it produces no records).
func (a *Acknowledger) Metrics() producer.Metrics {
	if !a.made() {
		return producer.Metrics{}
	}
	return a.p.Metrics()
}

// made reports whether a was created by New: a nil or zero Acknowledger
// answers every call with ErrUsage instead of panicking.
func (a *Acknowledger) made() bool { return a != nil && a.p != nil }

// errNotMade is what a call of op on an Acknowledger that New did not
// create gets.
func errNotMade(op string) error {
	return errs.Usage(op, errors.New("the acknowledger was not created by acknowledger.New"))
}

// enter checks that the acknowledger is open and waits, within ctx, for
// the transaction call in progress; the returned function ends this one.
func (a *Acknowledger) enter(ctx context.Context, op string) (func(), error) {
	if !a.made() {
		return nil, errNotMade(op)
	}
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return nil, errClosed(op)
	}
	if ctx == nil {
		return nil, errs.Usage(op, errors.New("nil context"))
	}
	// An ended ctx fails every time, not only when the slot happens to be
	// taken (select picks at random among ready cases).
	if err := ctx.Err(); err != nil {
		return nil, errs.Abortable(op, fmt.Errorf("context ended before the call: %w", err))
	}
	select {
	case a.txnSem <- struct{}{}:
		return func() { <-a.txnSem }, nil
	case <-ctx.Done():
		return nil, errs.Abortable(op, fmt.Errorf("waiting for the transaction call in progress: %w", ctx.Err()))
	}
}

// InitTransactions gets the acknowledger's producer id and epoch, fencing
// an older acknowledger with the same transactional id. Call it once before
// anything else, and again after an error left a transaction that
// AbortAcknowledgements could not end: it ends that transaction first (see
// producer.Producer.InitTransactions).
//
// It then checks that the transaction coordinator serves transactional
// share acknowledgements (KIP-1289), which every commit of the
// acknowledger needs unless it has a ShareLedger, and fails with
// kshare.ErrUnsupported, naming the
// broker and what it lacks, if it does not: on such a cluster the first
// commit would fail the same way, and a program learns it at once. The
// acknowledger is initialized either way. Its other errors are the
// producer's.
func (a *Acknowledger) InitTransactions(ctx context.Context) error {
	const op = "init transactions"
	leave, err := a.enter(ctx, op)
	if err != nil {
		return err
	}
	defer leave()
	if err := a.p.InitTransactions(ctx); err != nil {
		return err
	}
	a.open = false
	if a.ledger != "" {
		return nil // a claim ledger needs no KIP-1289
	}
	return a.requireShareAcks(ctx, op)
}

// requireShareAcks asks the transaction coordinator (through the
// producer's client) whether it serves KIP-1289.
func (a *Acknowledger) requireShareAcks(ctx context.Context, op string) error {
	cl := a.p.Client()
	coord, err := txn.NewCoordinators(cl, a.logger).Find(ctx, txn.TransactionCoordinator, a.p.Status().TransactionalID)
	if err == nil {
		err = txn.NewCapabilities(cl).RequireShareAcks(ctx, op, []int32{coord})
	}
	if err != nil && !errs.Is(err) {
		// The question could not be asked: the first commit asks again.
		a.logger.Debug("could not check the transaction coordinator for KIP-1289", "err", err)
		return nil
	}
	return err
}

// CommitAcknowledgements commits acks, the acknowledgements of records
// that the member meta (the consumer's GroupMetadata) holds, in one
// transaction: begin, send them, commit. When it fails, it aborts the
// transaction before returning, so the acknowledgements take effect
// nowhere: records whose acknowledgement reached their leader are
// available to the group again at once, and the consumer releases the
// others at once. Empty acks commit nothing and return nil.
//
// If the commit's answer is lost (kshare.ErrInDoubt from the producer),
// the abort learns the outcome: CommitAcknowledgements returns nil if the
// commit had been applied, and kshare.ErrAbortable if it had not. Only
// when the abort cannot learn it either (ctx ended) does the error match
// kshare.ErrInDoubt; AbortAcknowledgements, InitTransactions or Close
// then learn it.
func (a *Acknowledger) CommitAcknowledgements(ctx context.Context, acks *kshare.ShareAcks, meta kshare.ShareGroupMetadata) error {
	const op = "commit acknowledgements"
	leave, err := a.enter(ctx, op)
	if err != nil {
		if acks != nil && errors.Is(err, kshare.ErrAbortable) {
			giveBack((*acktrack.Set)(acks), meta, a.ledger)
		}
		return err
	}
	defer leave()
	if acks == nil {
		return errs.Usage(op, errors.New("nil acknowledgements"))
	}
	set := (*acktrack.Set)(acks)
	if set.Len() == 0 {
		return nil
	}
	return a.runTxn(ctx, op, []sendItem{{acks: guarded(set), meta: meta}})
}

// AbortAcknowledgements ends a transaction that a failed call left open
// (CommitAcknowledgements and CommitCheckpoint abort on failure, but the
// abort itself can fail, for example when ctx ends). With no such
// transaction it does nothing and returns nil. After an in-doubt commit
// it returns an error matching kshare.ErrCommitted if the commit turns out
// to have been applied (not a failure: the acknowledgements took effect).
func (a *Acknowledger) AbortAcknowledgements(ctx context.Context) error {
	leave, err := a.enter(ctx, "abort acknowledgements")
	if err != nil {
		return err
	}
	defer leave()
	if !a.open {
		return nil
	}
	err = a.p.AbortTransaction(ctx)
	if err == nil || errors.Is(err, kshare.ErrCommitted) {
		a.open = false
	}
	return err
}

// sendItem is one SendShareAcksToTransaction of a transaction.
type sendItem struct {
	acks *acktrack.Set
	meta kshare.ShareGroupMetadata
	// checkpoint: the acknowledgements were staged with their consumers
	// before the transaction (Stage), so they must be resolved however
	// it fails. Others (CommitAcknowledgements) are staged only by the
	// transaction, whose producer resolves what it staged.
	checkpoint bool
}

// runTxn begins a transaction, sends items and commits. On failure it
// aborts (unless the producer is fatally broken), which also learns the
// outcome of a commit whose answer was lost, and tells the trackers of
// checkpoint items that never joined the transaction that they will not be
// sent; the producer tells the others when the transaction's outcome is
// known. Every staged item's tracker is resolved once (the fanout makes a
// second call a no-op), and an item whose staging was refused is not
// resolved at all: it may be staged elsewhere. Called with txnSem held.
func (a *Acknowledger) runTxn(ctx context.Context, op string, items []sendItem) error {
	if err := a.p.BeginTransaction(); err != nil {
		dropCheckpoints(items)
		for _, it := range items {
			if !it.checkpoint {
				giveBack(it.acks, it.meta, a.ledger)
			}
		}
		return err
	}
	err := func() error {
		for i, it := range items {
			if err := a.p.SendShareAcksToTransaction(ctx, (*kshare.ShareAcks)(it.acks), it.meta); err != nil {
				dropCheckpoints(items[i:])
				return err
			}
		}
		return a.p.CommitTransaction(ctx)
	}()
	if err == nil {
		return nil
	}
	if errors.Is(err, kshare.ErrFatal) {
		a.open = true // AbortAcknowledgements says why it cannot end it
		return err
	}
	aerr := a.p.AbortTransaction(ctx)
	switch {
	case aerr == nil && errors.Is(err, kshare.ErrInDoubt):
		return errs.Abortable(op, fmt.Errorf("the commit's answer was lost and the abort found it had not been applied: %w", err))
	case aerr == nil:
		return err
	case errors.Is(aerr, kshare.ErrCommitted):
		a.logger.Info("the commit whose answer was lost had been applied", "op", op)
		return nil
	}
	a.open = true
	a.logger.Warn("abort after a failed transactional acknowledgement failed; call AbortAcknowledgements",
		"op", op, "err", aerr)
	if errors.Is(aerr, kshare.ErrInDoubt) {
		return aerr
	}
	// The outcome stays what the commit said (abortable, or in doubt),
	// unless the abort found the acknowledger unable to go on (fatal). An
	// abort refused because Close began (ErrClosed) changes nothing: the
	// commit came before Close, and Close ends the transaction itself.
	class := errs.ClassOf(err)
	if c := errs.ClassOf(aerr); c == kshare.ErrFatal || class == nil {
		class = c
	}
	return errs.New(class, op, fmt.Errorf("%w (abort failed too: %w)", err, aerr))
}

// giveBack returns the records of acks, which a failed call never sent,
// to the group at once, as the failure of a commit does. A consumer
// releases records only as the end of a transaction that did not commit,
// so they are staged and resolved as not committed; a staging the
// consumer refuses (records no longer held, or already in a transaction)
// gives nothing back, since the records are not the caller's to give.
func giveBack(acks *acktrack.Set, meta kshare.ShareGroupMetadata, ledger string) {
	t := acks.Tracker()
	if t == nil || t.Stage(acks, acktrack.Staging{Group: meta.GroupID, Member: meta.MemberID, Ledger: ledger}) != nil {
		return
	}
	t.Resolve(acks, false)
}

// dropCheckpoints tells the trackers of the checkpoint items that they
// will not be sent. The other items are left alone: their staging was
// refused (a tracker hears Resolve only for what its Stage accepted), or
// the producer resolves them.
func dropCheckpoints(items []sendItem) {
	for _, it := range items {
		if t := it.acks.Tracker(); t != nil && it.checkpoint {
			t.Resolve(it.acks, false)
		}
	}
}

// Close drops every staged checkpoint (the consumers release their
// records at once), then closes the producer within ctx, which ends a
// transaction in progress the way producer.Producer.Close does: a
// transaction call running in another goroutine is waited for within ctx
// and cut short after, and a transaction left open is aborted. It returns
// the producer's error: nil, an error matching kshare.ErrCommitted (not a
// failure: it learned that an in-doubt commit had committed), or why a
// transaction could not be ended.
// Every staged acknowledgement has been resolved once when it returns, and
// calls after it fail with kshare.ErrClosed. Calling it again waits for
// the first Close within ctx and returns nil.
func (a *Acknowledger) Close(ctx context.Context) error {
	if !a.made() {
		return errNotMade("close")
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return a.p.Close(ctx)
	}
	a.closed = true
	staged := a.staged
	a.staged = nil
	a.mu.Unlock()
	dropAll(staged)
	return a.p.Close(ctx)
}

// dropAll tells the tracker of every checkpoint that its acknowledgements
// will never be sent: the consumer releases the records at once.
func dropAll(cps []checkpoint) {
	for _, cp := range cps {
		if t := cp.acks.Tracker(); t != nil {
			t.Resolve(cp.acks, false)
		}
	}
}

func errClosed(op string) error { return errs.Closed(op, errors.New("acknowledger is closed")) }

// groupByMember merges checkpoints per share-group member: one
// SendShareAcksToTransaction each. The merged acknowledgements' tracker
// fans out to the trackers of the checkpoints it merged.
func groupByMember(cps []checkpoint) []sendItem {
	byMeta := make(map[kshare.ShareGroupMetadata]*acktrack.Set)
	var order []kshare.ShareGroupMetadata
	parts := make(map[kshare.ShareGroupMetadata][]*acktrack.Set)
	for _, cp := range cps {
		if _, ok := byMeta[cp.meta]; !ok {
			order = append(order, cp.meta)
		}
		byMeta[cp.meta] = byMeta[cp.meta].Merge(cp.acks)
		if cp.acks.Tracker() != nil {
			parts[cp.meta] = append(parts[cp.meta], cp.acks)
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
		var t acktrack.Tracker
		if ps := parts[m]; len(ps) > 0 {
			t = &fanout{parts: ps, again: true}
		}
		out = append(out, sendItem{acks: byMeta[m].Retyped(t, func(typ int8) int8 { return typ }), meta: m, checkpoint: true})
	}
	return out
}

// guarded returns a copy of acks whose tracker passes every event on to
// acks' own tracker, and resolves it once however often it is told.
func guarded(acks *acktrack.Set) *acktrack.Set {
	if acks.Tracker() == nil {
		return acks
	}
	return acks.Retyped(&fanout{parts: []*acktrack.Set{acks}}, func(typ int8) int8 { return typ })
}

// fanout is the tracker of merged (or guarded) acknowledgements: it
// passes each event on to the tracker of every part, and the outcome only
// once, since both the producer (once a transaction ends) and the
// acknowledger (for acknowledgements that never joined one) may report it.
type fanout struct {
	parts []*acktrack.Set
	// again: the parts are staged checkpoints, which the acknowledger
	// owns; joining the commit transaction checks them again. Otherwise
	// (CommitAcknowledgements) this is their first staging.
	again    bool
	resolved atomic.Bool
}

// Stage stages every part with its own tracker, for the transaction st
// describes; for staged checkpoints it checks them again (the consumer
// renews staged locks, but one may still have been lost) and hands on the
// transaction's deadline.
func (f *fanout) Stage(_ *acktrack.Set, st acktrack.Staging) error {
	st.Again = f.again
	for i, part := range f.parts {
		if err := part.Tracker().Stage(part, st); err != nil {
			if !f.again {
				// Nothing changes on a refusal: the parts staged by
				// this call are let go.
				for _, done := range f.parts[:i] {
					done.Tracker().Resolve(done, false)
				}
			}
			return err
		}
	}
	return nil
}

// Renew implements acktrack.Renewer for a ledger commit: it renews every
// part with its own tracker and returns every part's failures; a part
// whose tracker cannot renew fails as a whole.
func (f *fanout) Renew(ctx context.Context, _ *acktrack.Set) []acktrack.RenewFailure {
	var failed []acktrack.RenewFailure
	for _, part := range f.parts {
		r, ok := part.Tracker().(acktrack.Renewer)
		if !ok {
			for _, tp := range part.Partitions() {
				for _, rec := range part.Records(tp) {
					failed = append(failed, acktrack.RenewFailure{TopicPartition: tp, Offset: rec.Offset, Err: errors.New("its consumer cannot renew locks")})
				}
			}
			continue
		}
		failed = append(failed, r.Renew(ctx, part)...)
	}
	return failed
}

// Resolve tells every part's tracker the outcome, the first time only.
func (f *fanout) Resolve(_ *acktrack.Set, committed bool) {
	if f.resolved.Swap(true) {
		return
	}
	for _, part := range f.parts {
		part.Tracker().Resolve(part, committed)
	}
}

// CurrentMemberEpoch asks the parts' trackers for the member's current
// epoch (txn.MemberEpochSource): the first that knows it answers.
func (f *fanout) CurrentMemberEpoch(group, member string) (int32, bool) {
	for _, part := range f.parts {
		if src, ok := part.Tracker().(txn.MemberEpochSource); ok {
			if e, ok := src.CurrentMemberEpoch(group, member); ok {
				return e, true
			}
		}
	}
	return 0, false
}
