package benthos

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func rec(offset int64) *kgo.Record { return &kgo.Record{Topic: "t", Partition: 0, Offset: offset} }

// A handle leaves pending once: the second claimer gets nothing, and only
// the owner settles it.
func TestLedgerClaimsOnce(t *testing.T) {
	l := newLedger(nil)
	h := l.deliver(rec(1), 1)
	out, acker := new(int), new(int)
	got, not := l.claim([]*pendingAck{h}, out)
	require.Equal(t, []*pendingAck{h}, got)
	require.Empty(t, not)
	got, not = l.claim([]*pendingAck{h}, acker)
	require.Empty(t, got)
	require.Equal(t, claimed, not[h])
	l.settle([]*pendingAck{h}, acker, released)
	require.Equal(t, claimed, l.state(h), "only the owner settles")
	l.settle([]*pendingAck{h}, out, committed)
	require.Equal(t, committed, l.state(h))
	require.Zero(t, l.size(), "a final handle is forgotten")
	got, _ = l.claim([]*pendingAck{h}, acker)
	require.Empty(t, got, "a committed handle is never claimed again")
}

// A redelivery supersedes a pending handle, not a claimed one; in doubt
// stays with its owner until it learns the outcome.
func TestLedgerRedelivery(t *testing.T) {
	l := newLedger(nil)
	old := l.deliver(rec(1), 1)
	fresh := l.deliver(rec(1), 2)
	require.Equal(t, released, l.state(old))
	require.Equal(t, pending, l.state(fresh))
	got, not := l.claim([]*pendingAck{old, fresh}, l)
	require.Equal(t, []*pendingAck{fresh}, got)
	require.Equal(t, released, not[old])

	out := new(int)
	claimedOld := l.deliver(rec(2), 1)
	l.claim([]*pendingAck{claimedOld}, out)
	newer := l.deliver(rec(2), 2)
	require.Equal(t, claimed, l.state(claimedOld), "its transaction decides")
	l.settle([]*pendingAck{claimedOld}, out, inDoubt)
	require.Equal(t, inDoubt, l.state(claimedOld))
	l.settle([]*pendingAck{claimedOld}, out, released)
	require.Equal(t, released, l.state(claimedOld))
	require.Equal(t, pending, l.state(newer), "settling the old delivery leaves the new one")
}

// Close releases what nobody claimed and births later deliveries
// released; claimed handles stay with their owners.
func TestLedgerClose(t *testing.T) {
	l := newLedger(nil)
	p := l.deliver(rec(1), 1)
	c := l.deliver(rec(2), 1)
	out := new(int)
	l.claim([]*pendingAck{c}, out)
	l.close()
	require.Equal(t, released, l.state(p))
	require.Equal(t, claimed, l.state(c))
	require.Equal(t, released, l.state(l.deliver(rec(3), 1)))
}

// An acknowledgement-only commit settles what it accepted or rejected as
// committed and what it gave back (RELEASE, outside the transaction) as
// released: that delivery is over and the record comes back, so the
// handle must not read as acknowledged.
func TestAckerSettlesReleasedAsReleased(t *testing.T) {
	l := newLedger(nil)
	a := &acker{ledger: l}
	acc, rel, rej := l.deliver(rec(1), 1), l.deliver(rec(2), 1), l.deliver(rec(3), 3)
	got, _ := l.claim([]*pendingAck{acc, rel, rej}, a)
	require.Len(t, got, 3)
	a.settleCommitted([]*pendingAck{acc}, []*pendingAck{rel}, []*pendingAck{rej})
	require.Equal(t, committed, l.state(acc))
	require.Equal(t, released, l.state(rel))
	require.Equal(t, committed, l.state(rej))
	require.Zero(t, l.size())
}
