package txn

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/wire"
)

// The fencing probe of a failed commit (EndTxn(ABORT) after an epoch error
// at a leader) runs only once the produce path is drained, and not at all
// when the drain cannot finish.
func TestFencingProbeDrainsFirst(t *testing.T) {
	c := bundled.Cluster(t)
	log := bundled.ObserveRequests(t, c)
	m := newManager(t, newClient(t, c), "probe")
	ctx := testCtx(t)
	require.NoError(t, m.InitProducerID(ctx, nil))

	suspect := func() {
		require.NoError(t, m.Begin())
		m.MarkSent()
		require.ErrorIs(t, m.Fail("produce", kerr.InvalidProducerEpoch), kshare.ErrAbortable)
	}
	suspect()
	stuck := errors.New("records still in flight")
	err := m.Commit(ctx, nil, func(context.Context) error { return stuck })
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.Empty(t, log.Of(kmsg.EndTxn.Int16()), "no probe while records may be in flight")

	drained := false
	err = m.Commit(ctx, nil, func(context.Context) error {
		require.Empty(t, log.Of(kmsg.EndTxn.Int16()), "the drain comes first")
		drained = true
		return nil
	})
	require.ErrorIs(t, err, kshare.ErrAbortable, "the transaction still cannot commit")
	require.True(t, drained)
	ends := log.Of(kmsg.EndTxn.Int16())
	require.Len(t, ends, 1, "the probe aborted the transaction")
	require.False(t, ends[0].Req.(*kmsg.EndTxnRequest).Commit)
	require.NoError(t, m.Abort(ctx, nil), "not fenced: Abort settles what the probe aborted")
	require.Len(t, log.Of(kmsg.EndTxn.Int16()), 1, "without a second EndTxn")
	require.EqualValues(t, 1, m.Stats().Aborted)
}

// Close in each state: nothing to do in Ready; a transaction that sent
// nothing ends locally; one in progress is aborted; every call after it
// fails with kshare.ErrClosed; a second Close returns nil.
func TestCloseEndsTheTransaction(t *testing.T) {
	c := bundled.Cluster(t)
	log := bundled.ObserveRequests(t, c)
	ctx := testCtx(t)
	cl := newClient(t, c)

	ready := newManager(t, cl, "close-ready")
	require.NoError(t, ready.InitProducerID(ctx, nil))
	require.NoError(t, ready.Close(ctx, nil))
	require.Equal(t, StateClosed, ready.State())

	local := newManager(t, cl, "close-local")
	require.NoError(t, local.InitProducerID(ctx, nil))
	require.NoError(t, local.Begin())
	require.NoError(t, local.Close(ctx, nil))
	require.Empty(t, log.Of(kmsg.EndTxn.Int16()), "nothing was sent, nothing to abort remotely")
	require.EqualValues(t, 1, local.Stats().Aborted)

	open := newManager(t, cl, "close-open")
	require.NoError(t, open.InitProducerID(ctx, nil))
	require.NoError(t, open.Begin())
	open.MarkSent()
	drained := false
	require.NoError(t, open.Close(ctx, func(context.Context) error { drained = true; return nil }))
	require.True(t, drained, "the produce path is drained before the abort")
	require.Len(t, log.Of(kmsg.EndTxn.Int16()), 1)
	for name, err := range map[string]error{
		"Begin":          open.Begin(),
		"Commit":         open.Commit(ctx, nil, nil),
		"Abort":          open.Abort(ctx, nil),
		"InitProducerID": open.InitProducerID(ctx, nil),
		"SendOffsets":    open.SendOffsets(ctx, nil, GroupMetadata{GroupID: "g"}),
		"StageShareAcks": open.StageShareAcks(ctx, emptyAcks(), kshare.ShareGroupMetadata{GroupID: "g", MemberID: "m"}),
	} {
		require.ErrorIs(t, err, kshare.ErrClosed, name)
		require.Contains(t, err.Error(), "closed", name)
	}
	require.NoError(t, open.Close(ctx, nil), "a second Close")
	require.Len(t, log.Of(kmsg.EndTxn.Int16()), 1, "nothing sent after Close")
}

// Close whose context has ended does not wait for the operation in
// progress: it cancels it (a Commit still flushing fails without
// EndTxn(COMMIT)) and reports that it could not abort.
func TestCloseCutsTheOperationInProgressShort(t *testing.T) {
	c := bundled.Cluster(t)
	log := bundled.ObserveRequests(t, c)
	m := newManager(t, newClient(t, c), "close-cut")
	ctx := testCtx(t)
	require.NoError(t, m.InitProducerID(ctx, nil))
	require.NoError(t, m.Begin())
	m.MarkSent()

	flushing := make(chan struct{})
	committed := make(chan error, 1)
	go func() {
		committed <- m.Commit(ctx, func(ctx context.Context) error {
			close(flushing)
			<-ctx.Done() // records that never get their answers
			return ctx.Err()
		}, nil)
	}()
	<-flushing
	dead, cancel := context.WithCancel(ctx)
	cancel()
	closeErr := m.Close(dead, nil)
	require.ErrorIs(t, closeErr, kshare.ErrAbortable, "Close could not abort")
	require.Contains(t, closeErr.Error(), "left to the coordinator")
	commitErr := <-committed
	require.ErrorIs(t, commitErr, kshare.ErrAbortable)
	require.ErrorIs(t, commitErr, context.Canceled)
	for _, o := range log.Of(kmsg.EndTxn.Int16()) {
		require.False(t, o.Req.(*kmsg.EndTxnRequest).Commit, "no EndTxn(COMMIT) after Close cut the commit short")
	}
	require.Equal(t, StateClosed, m.State())
}

// A stale-suspect answer is final only when the same answer comes again
// from the coordinator FindCoordinator named after the first one and still
// names; the first is always retried, whoever gave it.
func TestStaleCheck(t *testing.T) {
	var s staleCheck
	fenced, invalid := kerr.ProducerFenced.Code, kerr.InvalidTxnState.Code
	require.False(t, s.confirmed(invalid, 1, 1), "the first answer is retried even when node 1 is named again")
	require.False(t, s.confirmed(invalid, 2, 2), "the retry went to node 1, not 2")
	require.False(t, s.confirmed(fenced, 2, 2), "another answer")
	require.True(t, s.confirmed(fenced, 2, 2), "repeated by the coordinator named after it, still named")
	s.reset()
	require.False(t, s.confirmed(fenced, 2, 2), "reset: confirm again")
	require.False(t, s.confirmed(fenced, 2, 0), "the coordinator moved meanwhile")
	require.False(t, s.confirmed(fenced, 0, 1), "moved again")
	require.True(t, s.confirmed(fenced, 1, 1))
}

// A TxnShareAcknowledge answer that leaves a partition out is retried, as
// a partition not staged; its own error code or the top-level one decides
// otherwise.
func TestTxnShareAcknowledgeMissingPartition(t *testing.T) {
	id := [16]byte{1}
	res := leaderResult{resp: &wire.TxnShareAcknowledgeResponse{Topics: []wire.TxnShareAcknowledgeTopicResponse{{
		TopicID:    id,
		Partitions: []wire.TxnShareAcknowledgePartitionResponse{{Partition: 0, ErrorCode: kerr.InvalidRecordState.Code}},
	}}}}
	code, _, missing := res.codeOf(id, 0)
	require.Equal(t, kerr.InvalidRecordState.Code, code)
	require.False(t, missing)
	_, _, missing = res.codeOf(id, 1)
	require.True(t, missing, "partition 1 was left out")
	_, _, missing = res.codeOf([16]byte{2}, 0)
	require.True(t, missing, "the topic was left out")
	res.resp.ErrorCode = kerr.FencedMemberEpoch.Code
	code, _, missing = res.codeOf(id, 1)
	require.Equal(t, kerr.FencedMemberEpoch.Code, code, "a top-level error answers for every partition")
	require.False(t, missing)
}
