package acknowledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

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
// Its calls are serialized; it may be shared by goroutines. Every error
// matches txnclient.ErrAbortable (the acknowledgements did not commit; the
// records come back to the group, see the package documentation),
// txnclient.ErrFatal (fenced, unauthorized, or the cluster lacks KIP-1289:
// close the acknowledger) or txnclient.ErrUsage (fix the call).
type Acknowledger struct {
	p      *producer.Producer
	logger *slog.Logger

	mu        sync.Mutex
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
	return &Acknowledger{p: p, logger: cfg.logger}, nil
}

// Producer returns the producer that runs the transactions, for its
// metrics and transaction state. Do not begin or end transactions on it.
func (a *Acknowledger) Producer() *producer.Producer { return a.p }

// InitTransactions gets the acknowledger's producer id and epoch, fencing
// an older acknowledger with the same transactional id. Call it once before
// anything else, and again after an error left a transaction that
// AbortAcknowledgements could not end.
func (a *Acknowledger) InitTransactions(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errClosed("init transactions")
	}
	return a.p.InitTransactions(ctx)
}

// CommitAcknowledgements commits acks, the acknowledgements of records
// that the member meta (the consumer's GroupMetadata) holds, in one
// transaction: begin, send them, commit. When it fails, it aborts the
// transaction before returning, so the acknowledgements take effect
// nowhere: records whose acknowledgement reached their leader are
// available to the group again at once, the others when their locks run
// out. Empty acks commit nothing and return nil.
func (a *Acknowledger) CommitAcknowledgements(ctx context.Context, acks *wire.ShareAcks, meta wire.ShareGroupMetadata) error {
	const op = "commit acknowledgements"
	if acks == nil {
		return txnclient.Usage(op, errors.New("nil acknowledgements"))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errClosed(op)
	}
	if acks.Len() == 0 {
		return nil
	}
	return a.runTxn(ctx, op, []sendItem{{acks: acks, meta: meta}})
}

// AbortAcknowledgements aborts a transaction that a failed call left open
// (CommitAcknowledgements and CommitCheckpoint abort on failure, but the
// abort itself can fail, for example when ctx ends). With no transaction in
// progress it does nothing.
func (a *Acknowledger) AbortAcknowledgements(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errClosed("abort acknowledgements")
	}
	switch a.p.Transactions().State() {
	case txnclient.StateInTransaction, txnclient.StateAbortableError:
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
// aborts (unless the producer is fatally broken) and tells the trackers of
// items that never joined the transaction that they will not be sent; the
// producer tells the others when the abort completes.
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
	if err == nil {
		return nil
	}
	if a.p.Transactions().State() != txnclient.StateFatalError {
		if aerr := a.p.AbortTransaction(ctx); aerr != nil {
			a.logger.Warn("abort after a failed transactional acknowledgement failed; call AbortAcknowledgements",
				"op", op, "err", aerr)
			return fmt.Errorf("%w (abort failed too: %w)", err, aerr)
		}
	}
	return err
}

func resolveAll(items []sendItem, committed bool) {
	for _, it := range items {
		if it.acks.Tracker != nil {
			it.acks.Tracker.Resolve(it.acks, committed)
		}
	}
}

// Close drops every staged checkpoint (their records come back to the
// group when their locks run out), aborts a transaction in progress and
// closes the producer, within ctx. Calling it again does nothing.
func (a *Acknowledger) Close(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	for _, cp := range a.staged {
		if cp.acks.Tracker != nil {
			cp.acks.Tracker.Resolve(cp.acks, false)
		}
	}
	a.staged = nil
	return a.p.Close(ctx)
}

func errClosed(op string) error { return txnclient.Usage(op, errors.New("acknowledger is closed")) }

// groupByMember merges checkpoints per share-group member: one
// SendShareAcksToTransaction each. The merged acknowledgements' tracker
// fans out to the trackers of the checkpoints it merged.
func groupByMember(cps []checkpoint, typ func(wire.AckType) wire.AckType) []sendItem {
	byMeta := make(map[wire.ShareGroupMetadata]*sendItem)
	var order []wire.ShareGroupMetadata
	trackers := make(map[wire.ShareGroupMetadata]fanout)
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
		if f := trackers[m]; len(f) > 0 {
			it.acks.Tracker = f
		}
		out = append(out, *it)
	}
	return out
}

// fanout is the tracker of merged acknowledgements: it passes each event
// on to the tracker of every part.
type fanout []*wire.ShareAcks

// Stage checks every part again with its own tracker (the consumer renews
// staged locks, but one may still have been lost).
func (f fanout) Stage(*wire.ShareAcks) error {
	for _, part := range f {
		if err := part.Tracker.Stage(part); err != nil {
			return err
		}
	}
	return nil
}

// Resolve tells every part's tracker the outcome.
func (f fanout) Resolve(_ *wire.ShareAcks, committed bool) {
	for _, part := range f {
		part.Tracker.Resolve(part, committed)
	}
}
