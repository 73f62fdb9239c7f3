package review_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/shareconsumer"
)

// Finding (exactly-once violation under misuse): one ShareAcks staged in
// two checkpoints (or sent in two transactions, of one acknowledger or of
// two producers) is accepted twice: the consumer treats a second Stage of
// the same acknowledgements as "checking them again". When the first
// checkpoint is dropped (AbortCheckpoint), the consumer forgets the
// records and releases them, although checkpoint 2 still carries them;
// they are delivered again (here to the same consumer, which hands them to
// the application a second time), and then checkpoint 2 commits their
// acknowledgements anyway. The application has processed them twice, and
// the second delivery can no longer be acknowledged (ErrNotHeld). Either
// the second Stage must fail (ErrUsage: already staged in checkpoint 1),
// or dropping checkpoint 1 must leave records that checkpoint 2 holds
// alone.
func TestOneShareAcksInTwoCheckpoints(t *testing.T) {
	ctx := testCtx(t)
	f := newCheckpointFixture(ctx, t)
	if err := f.a.Stage(2, f.acks, f.c.GroupMetadata()); err != nil {
		requireClass(t, kshare.ErrUsage, err, "staging acknowledgements that checkpoint 1 holds")
		return
	}
	require.NoError(t, f.a.AbortCheckpoint(1))
	again := pollFor(ctx, t, f.c, 2*time.Second)
	cerr := f.a.CommitCheckpoint(ctx, 2)
	if len(again) > 0 && cerr == nil {
		t.Fatalf("checkpoint 2 committed the acknowledgements of %d records that were delivered again meanwhile (start offset %d)",
			len(again), f.e.startOffset(ctx, t, "g", "in"))
	}
	require.NoError(t, cerr, "checkpoint 2 holds the records: it commits")
}

// Finding (minor, doc mismatch): AbortCheckpoint(id) returns nil while a
// CommitCheckpoint(id) of the same checkpoint is in flight, and that
// commit then commits: the application is told the checkpoint's
// acknowledgements were dropped (their records come back at once), and
// they take effect instead; a program that rolls the checkpoint's output
// back on that answer loses the records. AbortCheckpoint should say that
// the checkpoint is being committed (an error), rather than report a drop
// that did not happen.
func TestAbortCheckpointDuringItsCommitSaysSo(t *testing.T) {
	ctx := testCtx(t)
	f := newCheckpointFixture(ctx, t)
	held, release := f.e.holdCommits(t)
	res := make(chan error, 1)
	go func() { res <- f.a.CommitCheckpoint(ctx, 1) }()
	<-held
	aerr := f.a.AbortCheckpoint(1)
	close(release)
	cerr := <-res
	if aerr == nil && cerr == nil {
		t.Fatalf("AbortCheckpoint(1) reported the checkpoint dropped, and its commit committed (start offset %d)",
			f.e.startOffset(ctx, t, "g", "in"))
	}
}

// Finding (minor): the same offset acknowledged twice in one ShareAcks
// (Merge of overlapping acknowledgements, or a record listed twice in
// Acks) counts twice in Len and in Metrics().ShareAcksCommitted, which is
// documented as "acknowledged offsets in committed transactions": two
// offsets are committed here, the metric says five.
func TestDuplicateAcknowledgementsCountOnce(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	e.topic(ctx, t, "in", 1)
	e.input(ctx, t, "in", "a", "b")
	c := e.consumer(t, "g", "in", shareconsumer.Transactional)
	recs := poll(ctx, t, c, 2)
	p := e.producer(ctx, t, "ctp")
	acks := c.Acks(recs, kshare.AckAccept).Merge(c.Acks(recs[:1], kshare.AckReject)).
		Merge(c.Acks([]*kgo.Record{recs[1], recs[1]}, kshare.AckAccept))
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendShareAcksToTransaction(ctx, acks, c.GroupMetadata()))
	require.NoError(t, p.CommitTransaction(ctx))
	require.Equal(t, int64(2), e.startOffset(ctx, t, "g", "in"), "both offsets are acknowledged or archived")
	require.Equal(t, int64(2), p.Metrics().ShareAcksCommitted, "acknowledged offsets in committed transactions")
}
