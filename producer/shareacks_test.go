package producer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/internal/txn"
	"github.com/kshare-go/kshare/wire"
)

// Output records and the acknowledgements of acquired input records commit
// in one transaction: the outputs become visible and the inputs
// ACKNOWLEDGED (the group's start offset passes them and they are never
// delivered again). A second transaction carries only acknowledgements and
// commits too.
func TestShareAcksCommitWithOutputs(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const in, out, group, perPartition = "share-in", "share-out", "ctp", 10
	createTopic(t, c, in, 3)
	createTopic(t, c, out, 1)
	produceInput(t, c, in, 3, perPartition)
	member := joinShareGroup(t, c, group, in)
	tracker := &recordingTracker{}
	p := newProducer(t, c, "ctp-worker", Linger(0))
	ctx := testCtx(t)

	acks := acktrack.New(tracker)
	require.NoError(t, p.BeginTransaction())
	for part := int32(0); part < 3; part++ {
		got := member.acquire(ctx, part, perPartition)
		require.Len(t, got, perPartition)
		id := member.topicID
		if part == 1 {
			id = [16]byte{} // the producer resolves missing topic ids from metadata
		}
		acksFor(acks, in, id, part, got, kshare.AckAccept)
		for o := range got {
			p.Produce(ctx, &kgo.Record{Topic: out, Value: []byte(fmt.Sprintf("out-%d-%d", part, o))}, nil)
		}
	}
	require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
	require.Equal(t, 1, tracker.staged)
	require.NoError(t, p.CommitTransaction(ctx))
	require.Equal(t, []bool{true}, tracker.resolved, "resolved once, as committed")

	starts := startOffsets(t, member.cl, group, in)
	for part := int32(0); part < 3; part++ {
		require.EqualValues(t, perPartition, starts[part], "partition %d fully acknowledged", part)
	}
	require.Len(t, readCommitted(t, c, out, 1), 3*perPartition)
	require.Empty(t, member.acquire(ctx, 0, 0), "acknowledged records are not delivered again")

	// An acknowledgement-only transaction commits (with EndTxn).
	produceInput(t, c, in, 3, 2)
	got := member.acquire(ctx, 2, 2)
	require.Len(t, got, 2)
	log := bundled.ObserveRequests(t, c)
	only := acktrack.New(nil)
	acksFor(only, in, member.topicID, 2, got, kshare.AckReject)
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(only), member.metadata()))
	require.NoError(t, p.CommitTransaction(ctx))
	require.True(t, slices.ContainsFunc(log.Of(kmsg.EndTxn.Int16()), func(o bundled.Observed) bool {
		return o.Req.(*kmsg.EndTxnRequest).Commit
	}), "the acknowledgement-only transaction ended with EndTxn(COMMIT)")
	require.EqualValues(t, perPartition+2, startOffsets(t, member.cl, group, in)[2], "rejected records are archived")
	m := p.Metrics()
	require.EqualValues(t, 3*perPartition+2, m.ShareAcksCommitted)
	require.EqualValues(t, 2, m.TransactionsCommitted)
}

// If one partition's acknowledgements are refused (INVALID_RECORD_STATE:
// offsets this member does not hold), the commit fails as abortable after
// another partition's were staged; the abort then makes those records
// available again at once (the abort itself is not a delivery), and no
// output is visible.
func TestShareAcksRefusedThenAborted(t *testing.T) {
	c := newCluster(t, broker.Nodes(3))
	const in, out, group = "refused-in", "refused-out", "refusers"
	createTopic(t, c, in, 2)
	createTopic(t, c, out, 1)
	produceInput(t, c, in, 2, 5)
	member := joinShareGroup(t, c, group, in)
	tracker := &recordingTracker{}
	p := newProducer(t, c, "refused-worker", Linger(0))
	ctx := testCtx(t)

	held := member.acquire(ctx, 0, 5)
	acks := acktrack.New(tracker)
	acksFor(acks, in, member.topicID, 0, held, kshare.AckAccept)
	acks.Add(in, member.topicID, 1, acktrack.Record{Offset: 3, Type: int8(kshare.AckAccept)}) // never acquired

	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, out, "out-a", "out-b")
	require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
	err := p.CommitTransaction(ctx)
	require.ErrorIs(t, err, kshare.ErrAbortable)
	var ke *kerr.Error
	require.True(t, errors.As(err, &ke))
	require.Equal(t, kerr.InvalidRecordState, ke)
	require.Equal(t, txn.StateAbortableError, p.txn.State())
	require.Empty(t, tracker.resolved, "not resolved before the transaction ends")

	require.NoError(t, p.AbortTransaction(ctx))
	require.Equal(t, []bool{false}, tracker.resolved, "resolved once, as aborted")
	again := member.acquire(ctx, 0, 5)
	require.Len(t, again, len(held), "the staged records are available again at once")
	for o, count := range held {
		require.Equal(t, count+1, again[o], "offset %d: the abort did not count as a delivery", o)
	}
	require.Empty(t, readCommitted(t, c, out, 1), "the outputs were aborted")
	require.Zero(t, startOffsets(t, member.cl, group, in)[0])
}

// Acknowledging records whose acquisition lock has expired fails the commit
// as abortable, and nothing of the transaction commits.
func TestShareAcksExpiredLockCommitsNothing(t *testing.T) {
	c := newCluster(t, broker.Nodes(1))
	const in, out, group, lock = "expired-in", "expired-out", "slow", time.Second
	createTopic(t, c, in, 1)
	createTopic(t, c, out, 1)
	produceInput(t, c, in, 1, 4)
	member := joinShareGroup(t, c, group, in, "share.record.lock.duration.ms", fmt.Sprint(lock.Milliseconds()))
	p := newProducer(t, c, "slow-worker", Linger(0))
	ctx := testCtx(t)

	held := member.acquire(ctx, 0, 4)
	sleepPast(lock)
	acks := acktrack.New(nil)
	acksFor(acks, in, member.topicID, 0, held, kshare.AckAccept)
	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, out, "late-output")
	require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
	err := p.CommitTransaction(ctx)
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.ErrorIs(t, err, kerr.InvalidRecordState)
	require.NoError(t, p.AbortTransaction(ctx))

	require.Empty(t, readCommitted(t, c, out, 1), "the output did not commit")
	require.Zero(t, startOffsets(t, member.cl, group, in)[0], "no acknowledgement committed")
	require.Len(t, member.acquire(ctx, 0, 4), 4, "the records are delivered again")
}

// A tracker that refuses staging (the share consumer does when a lock has
// expired) fails the transaction as abortable before anything is sent.
func TestShareAcksTrackerRefusal(t *testing.T) {
	c := newCluster(t)
	createTopic(t, c, "tracked", 1)
	p := newProducer(t, c, "tracked-worker")
	ctx := testCtx(t)
	refusal := errors.New("lock expired")
	tracker := &recordingTracker{stageErr: refusal}
	acks := acktrack.New(tracker)
	acks.Add("tracked", [16]byte{}, 0, acktrack.Record{Offset: 0, Type: int8(kshare.AckAccept)})

	require.NoError(t, p.BeginTransaction())
	err := p.SendShareAcksToTransaction(ctx, ka(acks), kshare.ShareGroupMetadata{GroupID: "g", MemberID: "m", MemberEpoch: 1})
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.ErrorIs(t, err, refusal)
	require.ErrorIs(t, p.CommitTransaction(ctx), kshare.ErrAbortable)
	require.NoError(t, p.AbortTransaction(ctx))
	require.Empty(t, tracker.resolved, "acknowledgements that were never staged are not resolved")
}

// Against a broker without the KIP-1289 APIs the call fails with
// ErrShareAcksUnsupported, naming the broker and what it lacks; no
// KIP-1289 request is sent and the transaction can still commit.
func TestShareAcksUnsupportedSendsNothing(t *testing.T) {
	c := newCluster(t, broker.ShareTxnAPIs(false))
	createTopic(t, c, "plain", 1)
	log := bundled.ObserveRequests(t, c)
	p := newProducer(t, c, "plain-worker", Linger(0))
	ctx := testCtx(t)
	tracker := &recordingTracker{}
	acks := acktrack.New(tracker)
	acks.Add("plain", [16]byte{}, 0, acktrack.Record{Offset: 0, Type: int8(kshare.AckAccept)})

	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, "plain", "v")
	err := p.SendShareAcksToTransaction(ctx, ka(acks), kshare.ShareGroupMetadata{GroupID: "g", MemberID: "m", MemberEpoch: 1})
	require.ErrorIs(t, err, kshare.ErrUnsupported)
	require.NotErrorIs(t, err, kshare.ErrFatal, "one class: the producer stays usable")
	for _, want := range []string{"broker 0", "API key 95", wire.ShareVersionFeature} {
		require.True(t, strings.Contains(err.Error(), want), "%q should mention %q", err, want)
	}
	require.Zero(t, tracker.staged, "nothing staged")
	require.NoError(t, p.CommitTransaction(ctx), "the transaction is unchanged and commits")
	require.Len(t, readCommitted(t, c, "plain", 1), 1)
	require.Empty(t, log.Of(wire.TxnShareAcknowledgeKey), "no KIP-1289 request was sent")
}
