package txn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/errs"
)

// SkipLedgerRenewal makes commits of ledger transactions skip the lock
// renewal that must succeed before EndTxn. For tests only: it shows that
// the exactly-once checks catch what the renewal prevents (an old holder
// committing records that another member has been handed since).
var SkipLedgerRenewal atomic.Bool

// StageLedgerAcks adds share acknowledgements that claim ledger ledgerTopic carries
// to the current transaction, on any cluster (KIP-1289 is not needed):
// the tracker checks and stages them (Staging.Ledger; it renews their
// locks from now on), then write puts their claims in the transaction
// (records produced to the ledger topic). At commit, after the flush has
// made the claims durable, the Manager renews every record's lock
// through the tracker's acktrack.Renewer and refuses to commit if one
// renewal fails; after EndTxn committed, the tracker sends the plain
// acknowledgements as it resolves them.
//
// Failures doom the transaction, as StageShareAcks' do: invalid
// acknowledgements or metadata, a nil ctx, a tracker that cannot renew
// (ErrUsage); the tracker's refusal (its class); write's failure (its
// class, ErrAbortable if it has none). Once the tracker's Stage has
// accepted acks, its Resolve is called exactly once, as for
// StageShareAcks.
func (m *Manager) StageLedgerAcks(ctx context.Context, ledgerTopic string, acks *kshare.ShareAcks, meta kshare.ShareGroupMetadata, write func(context.Context, *acktrack.Set) error) error {
	const op = "send share acknowledgements to transaction"
	set := (*acktrack.Set)(acks)
	if err := ValidateShareAcks(set, meta); err != nil {
		return m.doomWith(op, errs.Usage(op, err))
	}
	if ctx == nil {
		return m.doomWith(op, errs.Usage(op, errNilContext))
	}
	ctx, leave, err := m.enterDooming(ctx, op)
	if err != nil {
		return err
	}
	defer leave()
	deadline, _, err := m.openTxn(op)
	if err != nil {
		return err
	}
	if set.Len() == 0 {
		return nil
	}
	t := set.Tracker()
	if _, ok := t.(acktrack.Renewer); !ok {
		return m.doomWith(op, errs.Usage(op, errors.New("the acknowledgements were not built by a share consumer (shareconsumer.Consumer.Acks), which a claim ledger needs to renew their locks")))
	}
	if err := t.Stage(set, acktrack.Staging{Group: meta.GroupID, Member: meta.MemberID, Deadline: deadline, Ledger: ledgerTopic}); err != nil {
		return m.doomWith(op, trackerRefusal(op, err))
	}
	ctx, cancel := m.withDeadline(ctx, deadline)
	defer cancel()
	if h := faultHooks.Load(); h != nil && h.BeforeClaims != nil {
		h.BeforeClaims(ctx)
	}
	// The claims are written while the operation holds the Manager, so
	// no commit can start between the staging and its claims.
	if err := write(ctx, set); err != nil {
		t.Resolve(set, false)
		return m.doomWith(op, trackerRefusal(op, err))
	}
	m.mu.Lock()
	if m.state != StateInTransaction {
		err := m.stateErr(op)
		m.unlock()
		t.Resolve(set, false)
		return err
	}
	m.txn.staged = append(m.txn.staged, stagedAcks{acks: set, meta: meta, ledger: true})
	m.unlock()
	return nil
}

// renewLedgerAcks renews, through their trackers, the locks of every
// record staged with a claim ledger, after the flush has made the claims
// durable and before EndTxn: the claims are then written before the
// renewal, and a renewal that succeeds means that no other member has
// been handed the records (a share-partition leader does not renew a lock
// that ran out or a record it gave to another member). Any failure dooms
// the transaction: its error names the records and wraps their causes.
func (m *Manager) renewLedgerAcks(ctx context.Context) error {
	if SkipLedgerRenewal.Load() {
		return nil
	}
	m.mu.Lock()
	var sets []*acktrack.Set
	for _, s := range m.txn.staged {
		if s.ledger {
			sets = append(sets, s.acks)
		}
	}
	m.unlock()
	var failed []acktrack.RenewFailure
	for _, set := range sets {
		r, ok := set.Tracker().(acktrack.Renewer)
		if !ok { // StageLedgerAcks refuses such acknowledgements
			return fmt.Errorf("acknowledgements without a tracker that renews: %w", kshare.ErrUsage)
		}
		failed = append(failed, r.Renew(ctx, set)...)
	}
	if len(failed) == 0 {
		return nil
	}
	return renewalsFailed(failed)
}

// renewalsFailed is the error of a ledger commit whose renewals failed:
// it names up to a few records and wraps every distinct cause.
func renewalsFailed(failed []acktrack.RenewFailure) error {
	const named = 5
	var names []string
	var causes []error
	seen := make(map[string]bool)
	for i, f := range failed {
		if i < named {
			names = append(names, fmt.Sprintf("%s/%d offset %d", f.Topic, f.Partition, f.Offset))
		}
		if f.Err != nil && !seen[f.Err.Error()] {
			seen[f.Err.Error()] = true
			causes = append(causes, f.Err)
		}
	}
	more := ""
	if len(failed) > named {
		more = fmt.Sprintf(" and %d more", len(failed)-named)
	}
	return errs.Abortable("commit transaction", fmt.Errorf("the locks of %d records could not be renewed before the commit (%s%s), so another member may hold them: the transaction must abort: %w",
		len(failed), strings.Join(names, ", "), more, errors.Join(causes...)))
}

// kip1289StagedLocked reports whether acknowledgements that go to the
// brokers with TxnShareAcknowledge are staged.
func (m *Manager) kip1289StagedLocked() bool {
	for _, s := range m.txn.staged {
		if !s.ledger {
			return true
		}
	}
	return false
}

// ledgerStagedLocked reports whether acknowledgements carried by a claim
// ledger are staged.
func (m *Manager) ledgerStagedLocked() bool {
	for _, s := range m.txn.staged {
		if s.ledger {
			return true
		}
	}
	return false
}
