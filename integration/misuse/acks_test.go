package misuse_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
	"github.com/kshare-go/kshare/shareconsumer"
)

// F4 (exactly-once under misuse): one ShareAcks staged in two
// checkpoints is refused at the second Stage (ErrUsage: already staged in
// checkpoint 1), and checkpoint 1 still commits. The consumer used to
// accept the second staging as "checking them again": dropping checkpoint
// 1 then released the records although checkpoint 2 still carried them,
// they were delivered again, and checkpoint 2 committed their
// acknowledgements anyway, so the application processed them twice.
func TestOneShareAcksInTwoCheckpoints(t *testing.T) {
	ctx := testCtx(t)
	f := newCheckpointFixture(ctx, t)
	requireClass(t, kshare.ErrUsage, f.a.Stage(2, f.acks, f.c.GroupMetadata()), "staging acknowledgements that checkpoint 1 holds")
	require.Equal(t, []int64{1}, f.a.Staged(), "the refused Stage kept nothing")
	require.NoError(t, f.a.CommitCheckpoint(ctx, 2), "checkpoint 1 commits, once")
	require.Equal(t, int64(2), f.e.startOffset(ctx, t, "g", "in"))
	require.Equal(t, int64(2), f.a.Metrics().ShareAcksCommitted)
}

// F4, the transaction variants: acknowledgements that a checkpoint holds
// cannot also be committed by CommitAcknowledgements, nor sent in a
// producer's transaction, and acknowledgements sent in one producer's
// transaction cannot be sent in another's while the first is open (they
// would be resolved by the first to end, which releases the records while
// the other still carries them). Each refusal is ErrUsage and dooms only
// the refused transaction; the first owner commits.
func TestOneShareAcksInTwoTransactions(t *testing.T) {
	ctx := testCtx(t)
	f := newCheckpointFixture(ctx, t)
	meta := f.c.GroupMetadata()
	requireClass(t, kshare.ErrUsage, f.a.CommitAcknowledgements(ctx, f.acks, meta), "CommitAcknowledgements of a staged checkpoint's acknowledgements")

	p := f.e.Producer(ctx, t, "other")
	require.NoError(t, p.BeginTransaction())
	requireClass(t, kshare.ErrUsage, p.SendShareAcksToTransaction(ctx, f.acks, meta), "a producer sending a staged checkpoint's acknowledgements")
	requireClass(t, kshare.ErrAbortable, p.CommitTransaction(ctx), "the refused transaction is doomed")
	require.NoError(t, p.AbortTransaction(ctx))
	require.NoError(t, f.a.CommitCheckpoint(ctx, 1), "the checkpoint still holds the records, and commits them")
	require.Equal(t, int64(2), f.e.startOffset(ctx, t, "g", "in"))

	// Two producers, one ShareAcks.
	f.e.Input(ctx, t, "in", "c", "d")
	acks := f.c.Acks(appenv.PollN(ctx, t, f.c, 2), kshare.AckAccept)
	q := f.e.Producer(ctx, t, "second")
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, q.BeginTransaction())
	require.NoError(t, p.SendShareAcksToTransaction(ctx, acks, meta))
	requireClass(t, kshare.ErrUsage, q.SendShareAcksToTransaction(ctx, acks, meta), "the same acknowledgements in a second open transaction")
	require.NoError(t, q.AbortTransaction(ctx))
	require.NoError(t, p.CommitTransaction(ctx), "the first transaction still carries them")
	require.Equal(t, int64(4), f.e.startOffset(ctx, t, "g", "in"))

	// Once that transaction has ended, the same acknowledgements are no
	// longer staged; their records are acknowledged, so staging them again
	// is refused as not held.
	require.NoError(t, q.BeginTransaction())
	err := q.SendShareAcksToTransaction(ctx, acks, meta)
	requireClass(t, kshare.ErrUsage, err, "acknowledgements of records acknowledged already")
	require.ErrorIs(t, err, shareconsumer.ErrNotHeld)
	require.NoError(t, q.AbortTransaction(ctx))
}

// F11: AbortCheckpoint(id) while a CommitCheckpoint(id) of the same
// checkpoint is in flight fails with ErrUsage ("being committed") and
// drops nothing; the commit decides. It used to return nil, reporting a
// drop that did not happen, and the commit then committed: a program that
// rolled the checkpoint's output back on that answer lost the records.
func TestAbortCheckpointDuringItsCommitSaysSo(t *testing.T) {
	ctx := testCtx(t)
	f := newCheckpointFixture(ctx, t)
	held, release := f.e.HoldCommits(t)
	res := make(chan error, 1)
	go func() { res <- f.a.CommitCheckpoint(ctx, 1) }()
	<-held
	aerr := f.a.AbortCheckpoint(1)
	release()
	cerr := <-res
	if aerr == nil && cerr == nil {
		t.Fatalf("AbortCheckpoint(1) reported the checkpoint dropped, and its commit committed (start offset %d)",
			f.e.startOffset(ctx, t, "g", "in"))
	}
	requireClass(t, kshare.ErrUsage, aerr, "AbortCheckpoint of a checkpoint being committed")
	require.NoError(t, cerr, "the commit decides, and commits")
	require.NoError(t, f.a.AbortCheckpoint(1), "once the commit has ended, AbortCheckpoint has nothing to drop")
}

// F15: the same offset acknowledged twice in one ShareAcks (Merge of
// overlapping acknowledgements, or a record listed twice in Acks) counts
// once in Len and in Metrics().ShareAcksCommitted ("acknowledged offsets
// in committed transactions"), as it is sent once. Both used to say five
// here, for two offsets.
func TestDuplicateAcknowledgementsCountOnce(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	e.Topic(ctx, t, "in", 1)
	e.Input(ctx, t, "in", "a", "b")
	c := e.consumer(t, "g", "in", shareconsumer.Transactional)
	recs := appenv.PollN(ctx, t, c, 2)
	p := e.Producer(ctx, t, "ctp")
	acks := c.Acks(recs, kshare.AckAccept).Merge(c.Acks(recs[:1], kshare.AckReject)).
		Merge(c.Acks([]*kgo.Record{recs[1], recs[1]}, kshare.AckAccept))
	require.Equal(t, 2, acks.Len())
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendShareAcksToTransaction(ctx, acks, c.GroupMetadata()))
	require.NoError(t, p.CommitTransaction(ctx))
	require.Equal(t, int64(2), e.startOffset(ctx, t, "g", "in"), "both offsets are acknowledged or archived")
	require.Equal(t, int64(2), p.Metrics().ShareAcksCommitted, "acknowledged offsets in committed transactions")
}
