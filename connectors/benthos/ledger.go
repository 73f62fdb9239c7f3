package benthos

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/shareconsumer"
)

// state is where a delivered record's acknowledgement stands.
type state int8

const (
	// pending: delivered and held, and nobody has decided about it yet.
	pending state = iota
	// claimed: in a transaction (of an output, or of the input's own
	// acknowledger) that has not ended. Only its owner moves it on.
	claimed
	// committed: its acceptance or rejection committed, in the owner's
	// transaction. Final.
	committed
	// released: this delivery ended without an acknowledgement of ours:
	// the transaction that carried it aborted, a redelivery superseded
	// it, the input closed, or the acker gave it back (a nack's RELEASE). The group delivers the record again, so
	// nothing of this delivery may be written any more. Final.
	released
	// inDoubt: the commit of the transaction that carried it was sent and
	// its outcome is not known yet. Its owner learns it.
	inDoubt
)

func (s state) String() string {
	switch s {
	case pending:
		return "pending"
	case claimed:
		return "claimed"
	case committed:
		return "committed"
	case released:
		return "released"
	case inDoubt:
		return "in doubt"
	}
	return fmt.Sprintf("state(%d)", int8(s))
}

// pendingAck is the handle a kshare_share message carries in its context:
// one delivery of one record, and the acknowledgement it still owes. The
// output that writes the message claims it and commits the
// acknowledgement in the transaction that carries the message's output;
// whatever no output claimed, the input's AckFunc resolves. The ledger's
// lock guards st, owner and so that exactly one of them commits it.
type pendingAck struct {
	ledger   *ledger
	rec      *kgo.Record
	delivery int16

	st    state
	owner any // the output or acker that claimed it
}

// ackKey is how the context of a message carries its *pendingAck.
type ackKey struct{}

// withAck returns ctx carrying h.
func withAck(ctx context.Context, h *pendingAck) context.Context {
	return context.WithValue(ctx, ackKey{}, h)
}

// ackFrom returns the handle ctx carries, or nil.
func ackFrom(ctx context.Context) *pendingAck {
	h, _ := ctx.Value(ackKey{}).(*pendingAck)
	return h
}

// recordKey names a record by where it is stored.
type recordKey struct {
	topic     string
	partition int32
	offset    int64
}

// ledger holds the handles of one input's consumer that have not reached
// a final state. It is what makes "committed exactly once, by one of the
// two" hold: every move out of pending is a compare-and-set under its
// lock, and a redelivery of a record supersedes the handle of the older
// delivery, so that nothing written from the older delivery can reach an
// acknowledgement of the newer one.
//
// It is also how the input learns that no output can commit its messages
// any more: every kshare_txn output that writes them registers here
// (writtenBy), and says so when it can write nothing more (writerStopped).
type ledger struct {
	cons *shareconsumer.Consumer
	// stuck, if set (before the first delivery), is called once and
	// outside the lock when every output that has written this ledger's
	// messages has stopped.
	stuck func(cause error)

	mu     sync.Mutex
	live   map[recordKey]*pendingAck
	closed bool
	// writers are the outputs that took messages of this ledger's
	// deliveries: true once the output can write nothing more.
	writers map[any]bool
	// allStopped is set once every writer has stopped.
	allStopped bool
}

func newLedger(cons *shareconsumer.Consumer) *ledger {
	return &ledger{cons: cons, live: make(map[recordKey]*pendingAck), writers: make(map[any]bool)}
}

// writtenBy registers out as an output that writes this ledger's
// messages.
func (l *ledger) writtenBy(out any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.writers[out]; !ok {
		l.writers[out] = false
	}
}

// writerStopped records that out, which writes this ledger's messages,
// can write nothing more, because of cause. When that leaves no output
// that can, the ledger's stuck function is called with cause: the input
// can commit nothing of what it delivers through an output, so it has no
// reason to take more records from the group.
func (l *ledger) writerStopped(out any, cause error) {
	l.mu.Lock()
	l.writers[out] = true
	all := !l.allStopped
	for _, stopped := range l.writers {
		all = all && stopped
	}
	if all {
		l.allStopped = true
	}
	l.mu.Unlock()
	if all && l.stuck != nil {
		l.stuck(cause)
	}
}

// consumer returns the consumer whose deliveries the ledger holds: the one
// that builds and sends their acknowledgements.
func (l *ledger) consumer() *shareconsumer.Consumer { return l.cons }

// deliver registers a delivery of rec and returns its handle. A handle of
// an earlier delivery of the same record that nobody claimed is released:
// the group gave the record out again (its lock ran out, or the member
// lost its session), so that delivery is over.
func (l *ledger) deliver(rec *kgo.Record, delivery int16) *pendingAck {
	h := &pendingAck{ledger: l, rec: rec, delivery: delivery}
	k := recordKey{rec.Topic, rec.Partition, rec.Offset}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		h.st = released
		return h
	}
	if old := l.live[k]; old != nil && old.st == pending {
		old.st = released
	}
	l.live[k] = h
	return h
}

// claim moves the pending handles of hs to claimed by owner and returns
// them; the others are returned apart, with the state they were in.
func (l *ledger) claim(hs []*pendingAck, owner any) (got []*pendingAck, not map[*pendingAck]state) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range hs {
		if h.st == pending {
			h.st, h.owner = claimed, owner
			got = append(got, h)
			continue
		}
		if not == nil {
			not = make(map[*pendingAck]state)
		}
		not[h] = h.st
	}
	return got, not
}

// settle moves the handles that owner claimed (or left in doubt) to st. A
// final state forgets them.
func (l *ledger) settle(hs []*pendingAck, owner any, st state) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range hs {
		if h.owner != owner || (h.st != claimed && h.st != inDoubt) {
			continue
		}
		h.st = st
		if st == committed || st == released {
			h.owner = nil
			k := recordKey{h.rec.Topic, h.rec.Partition, h.rec.Offset}
			if l.live[k] == h {
				delete(l.live, k)
			}
		}
	}
}

// state returns where h stands.
func (l *ledger) state(h *pendingAck) state {
	l.mu.Lock()
	defer l.mu.Unlock()
	return h.st
}

// close releases every pending handle (the consumer is closing and gives
// their records back) and makes later deliveries born released. Claimed
// and in-doubt handles stay with their owners, whose transactions end as
// the brokers decide.
func (l *ledger) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for k, h := range l.live {
		if h.st == pending {
			h.st = released
			delete(l.live, k)
		}
	}
}

// size returns how many handles are not final, for tests and metrics.
func (l *ledger) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.live)
}
