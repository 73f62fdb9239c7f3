package ledger_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/ledger"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
)

var inputID = [16]byte{9, 9, 9}

// claimRecord is c as a ledger record on its partition of a ledger of n.
func claimRecord(t *testing.T, topic string, n int32, c ledger.Claim) *kgo.Record {
	t.Helper()
	v, err := c.Encode()
	require.NoError(t, err)
	return &kgo.Record{Topic: topic, Partition: c.Input().LedgerPartition(n), Key: []byte(c.Input().Key()), Value: v}
}

// writeInTxn writes recs in one transaction of cl and commits or aborts it.
func writeInTxn(ctx context.Context, t *testing.T, cl *kgo.Client, commit bool, recs ...*kgo.Record) {
	t.Helper()
	require.NoError(t, cl.BeginTransaction())
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	require.NoError(t, cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
}

// The resolver creates a missing ledger, indexes committed claims only,
// skips foreign records, and waits for an open transaction that wrote
// before its mark to end.
func TestResolverReadsCommittedClaims(t *testing.T) {
	c := bundled.Cluster(t, broker.ShareTxnAPIs(false))
	ctx := testkit.Context(t)
	cl := testkit.Client(t, c.Bootstrap())
	r := ledger.NewResolver(cl, "claims", "g", testkit.Logger())
	_, err := r.Ensure(ctx, false, 0)
	require.ErrorIs(t, err, kshare.ErrUsage, "a missing ledger is not created unless asked")
	n, err := r.Ensure(ctx, true, 4)
	require.NoError(t, err)
	require.Equal(t, int32(4), n)

	w := testkit.Client(t, c.Bootstrap(), kgo.TransactionalID("w"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	in := ledger.Input{Group: "g", TopicID: inputID, Partition: 2}
	part := in.LedgerPartition(n)
	committed := ledger.Claim{Group: "g", TopicID: inputID, Partition: 2, TransactionalID: "w", Ranges: []ledger.Range{{First: 0, Last: 9, Type: ledger.TypeAccept}}}
	aborted := ledger.Claim{Group: "g", TopicID: inputID, Partition: 2, TransactionalID: "w", Ranges: []ledger.Range{{First: 10, Last: 19, Type: ledger.TypeAccept}}}
	writeInTxn(ctx, t, w, true, claimRecord(t, "claims", n, committed), &kgo.Record{Topic: "claims", Partition: part, Value: []byte("not a claim")})
	writeInTxn(ctx, t, w, false, claimRecord(t, "claims", n, aborted))

	require.NoError(t, r.CatchUp(ctx, []int32{part}))
	typ, ok := r.Lookup(in, 5)
	require.True(t, ok)
	require.Equal(t, ledger.TypeAccept, typ)
	_, ok = r.Lookup(in, 15)
	require.False(t, ok, "an aborted claim is not seen")
	st := r.Stats()
	require.Equal(t, int64(1), st.Claims)
	require.Equal(t, int64(1), st.Malformed)

	// An open transaction's claim holds CatchUp back until it ends.
	require.NoError(t, w.BeginTransaction())
	late := ledger.Claim{Group: "g", TopicID: inputID, Partition: 2, TransactionalID: "w", Ranges: []ledger.Range{{First: 20, Last: 20, Type: ledger.TypeReject}}}
	require.NoError(t, w.ProduceSync(ctx, claimRecord(t, "claims", n, late)).FirstErr())
	done := make(chan error, 1)
	go func() { done <- r.CatchUp(ctx, []int32{part}) }()
	select {
	case err := <-done:
		t.Fatalf("CatchUp returned (%v) while a transaction that wrote before its mark was open", err)
	default:
	}
	require.NoError(t, w.EndTransaction(ctx, kgo.TryCommit))
	require.NoError(t, <-done)
	typ, ok = r.Lookup(in, 20)
	require.True(t, ok)
	require.Equal(t, ledger.TypeReject, typ)

	r.Prune(in, 10)
	_, ok = r.Lookup(in, 5)
	require.False(t, ok, "pruned below the start offset")

	// Truncation keeps the lowest claim still held, and everything once
	// nothing is held.
	adm := kadm.NewClient(cl)
	require.NoError(t, r.Truncate(ctx))
	starts, err := adm.ListStartOffsets(ctx, "claims")
	require.NoError(t, err)
	lateAt, _ := starts.Lookup("claims", part)
	ends, err := adm.ListEndOffsets(ctx, "claims")
	require.NoError(t, err)
	end, _ := ends.Lookup("claims", part)
	require.Greater(t, lateAt.Offset, int64(0), "the pruned claims were deleted")
	require.Less(t, lateAt.Offset, end.Offset, "the claim still held was kept")
	typ, ok = r.Lookup(in, 20)
	require.True(t, ok)
	require.Equal(t, ledger.TypeReject, typ)
	r.Prune(in, 21)
	require.NoError(t, r.Truncate(ctx))
	starts, err = adm.ListStartOffsets(ctx, "claims")
	require.NoError(t, err)
	all, _ := starts.Lookup("claims", part)
	require.Equal(t, end.Offset, all.Offset, "nothing held: truncated to the position")
	require.NoError(t, r.CatchUp(ctx, []int32{part}), "a reader past the truncation reads on")
	fresh := ledger.NewResolver(testkit.Client(t, c.Bootstrap()), "claims", "g", testkit.Logger())
	_, err = fresh.Ensure(ctx, false, 0)
	require.NoError(t, err)
	require.NoError(t, fresh.CatchUp(ctx, []int32{part}), "a reader below another reader's truncation skips to the log start")

	// A claim of another group is not indexed, and keeps the partition
	// from being truncated.
	writeInTxn(ctx, t, w, true, claimRecord(t, "claims", n, ledger.Claim{Group: "other", TopicID: inputID, Partition: 2, Ranges: []ledger.Range{{First: 0, Last: 0, Type: ledger.TypeAccept}}}))
	otherPart := ledger.Input{Group: "other", TopicID: inputID, Partition: 2}.LedgerPartition(n)
	require.NoError(t, r.CatchUp(ctx, []int32{otherPart}))
	require.Equal(t, int64(1), r.Stats().OtherGroups)
	_, ok = r.Lookup(ledger.Input{Group: "other", TopicID: inputID, Partition: 2}, 0)
	require.False(t, ok)
}
