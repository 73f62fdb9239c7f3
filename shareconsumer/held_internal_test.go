package shareconsumer

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
)

// stagingConsumer is a Transactional consumer with one session and no
// client: enough for the tracker's bookkeeping, which never does I/O.
func stagingConsumer() (*Consumer, *session) {
	c := &Consumer{
		cfg:      config{group: "g", mode: Transactional},
		memberID: "m",
		logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	s := &session{c: c, wake: make(chan struct{}, 1), lockDur: time.Minute}
	c.sessOrder = []*session{s}
	return c, s
}

// delivered registers an acquisition of offsets first..first+n-1 of tp,
// every one returned by Poll.
func delivered(c *Consumer, s *session, tp kshare.TopicPartition, first int64, n int) *acquisition {
	a := &acquisition{tp: tp, sess: s, first: first, deliveries: 1,
		deadline: time.Now().Add(time.Minute), lockDur: time.Minute, states: make([]recState, n)}
	for i := range n {
		a.set(i, stDelivered)
	}
	c.held.add(a)
	return a
}

func ackSet(c *Consumer, tp kshare.TopicPartition, offs ...int64) *acktrack.Set {
	set := acktrack.New((*tracker)(c))
	for _, off := range offs {
		set.Add(tp.Topic, [16]byte{1}, tp.Partition, acktrack.Record{Offset: off, Type: int8(kshare.AckAccept)})
	}
	return set
}

// stage stages set as a transaction of member m of group g does.
func stage(c *Consumer, set *acktrack.Set) error {
	return (*tracker)(c).Stage(set, acktrack.Staging{Group: "g", Member: "m"})
}

// A staged record lives in its acquisition: Stage refuses it to a second
// transaction, Resolve of a commit frees it, and a record the broker
// delivered again while it was staged (the lock expired) belongs to the
// new delivery: the old transaction's Resolve leaves it alone and a new
// transaction can stage it.
func TestStagedRecordsFollowTheirAcquisition(t *testing.T) {
	c, s := stagingConsumer()
	tp := kshare.TopicPartition{Topic: "in", Partition: 0}
	old := delivered(c, s, tp, 0, 4)

	first := ackSet(c, tp, 0, 1, 2)
	if err := stage(c, first); err != nil {
		t.Fatalf("stage: %v", err)
	}
	if err := stage(c, first); !errors.Is(err, kshare.ErrUsage) {
		t.Fatalf("staging the same acks again: got %v, want ErrUsage", err)
	}
	if err := (*tracker)(c).Stage(first, acktrack.Staging{Group: "g", Member: "m", Again: true}); err != nil {
		t.Fatalf("staging the same acks again, checked by their owner: %v", err)
	}
	if err := stage(c, ackSet(c, tp, 2, 3)); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("staging a record of another transaction: got %v, want ErrNotHeld", err)
	}
	for off, want := range []recState{stStaged, stStaged, stStaged, stDelivered} {
		if old.states[off] != want {
			t.Fatalf("offset %d: state %d, want %d", off, old.states[off], want)
		}
	}
	if sr := old.stagedAt(1); sr == nil || sr.off != 1 || sr.unit != first {
		t.Fatalf("offset 1 staging %+v", sr)
	}

	// Offsets 1 and 2 are delivered again in a new acquisition.
	again := delivered(c, s, tp, 1, 2)
	if old.stagedAt(1) != nil || old.states[1] != stFree || old.states[2] != stFree {
		t.Fatalf("the old hold of offsets 1-2 is not over: states %v", old.states)
	}
	if got, _, ok := c.held.find(tp, 1); !ok || got != again {
		t.Fatalf("offset 1 is held by %p, want the new acquisition %p", got, again)
	}

	second := ackSet(c, tp, 1, 2)
	if err := stage(c, second); err != nil {
		t.Fatalf("staging the new delivery: %v", err)
	}
	(*tracker)(c).Resolve(first, true)
	if old.states[0] != stFree || old.stagedAt(0) != nil {
		t.Fatalf("committed offset 0 still held: state %d", old.states[0])
	}
	if sr := again.stagedAt(0); sr == nil || sr.unit != second || again.stagedAt(1) == nil {
		t.Fatalf("the old transaction's Resolve touched the new delivery: states %v", again.states)
	}
	(*tracker)(c).Resolve(second, true)
	(*tracker)(c).Resolve(ackSet(c, tp, 3), true) // never staged: nothing happens
	if old.states[3] != stDelivered {
		t.Fatalf("Resolve of an unstaged set changed offset 3: state %d", old.states[3])
	}
	if len(c.held.parts[tp].acqs) != 1 || c.held.parts[tp].acqs[0] != old {
		t.Fatalf("held acquisitions %v, want only the one holding offset 3", c.held.parts[tp].acqs)
	}
}

// Renewals find the staged records of the session through their
// acquisitions, and only those whose renewal is due.
func TestDueRenewalsScanStagedRecords(t *testing.T) {
	c, s := stagingConsumer()
	tp := kshare.TopicPartition{Topic: "in", Partition: 0}
	a := delivered(c, s, tp, 10, 3)
	if err := stage(c, ackSet(c, tp, 10, 12)); err != nil {
		t.Fatalf("stage: %v", err)
	}
	due, next := s.dueRenewalsLocked(time.Now())
	if !due.empty() || next.IsZero() {
		t.Fatalf("fresh locks due for renewal: %v, next %v", due, next)
	}
	due, _ = s.dueRenewalsLocked(a.deadline.Add(-time.Second))
	if got := due.staged[tp]; len(got) != 2 || got[0].off != 10 || got[1].off != 12 {
		t.Fatalf("due at the end of the lock: %v, want offsets 10 and 12", got)
	}
}
