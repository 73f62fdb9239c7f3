package txn

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/wire"
)

func TestNewRejectsBadConfig(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	require.NoError(t, err)
	defer cl.Close()
	for name, cfg := range map[string]Config{
		"no client":        {TransactionalID: "x"},
		"no id":            {Client: cl},
		"negative timeout": {Client: cl, TransactionalID: "x", TransactionTimeout: -time.Second},
		"huge timeout":     {Client: cl, TransactionalID: "x", TransactionTimeout: 1 << 62},
		"sub-ms timeout":   {Client: cl, TransactionalID: "x", TransactionTimeout: time.Millisecond - 1},
	} {
		_, err := New(cfg)
		require.ErrorIs(t, err, kshare.ErrUsage, name)
	}
	m, err := New(Config{Client: cl, TransactionalID: "x", TransactionTimeout: time.Millisecond})
	require.NoError(t, err, "one millisecond is the smallest timeout the coordinator can be told")
	require.Equal(t, time.Millisecond, m.TransactionTimeout())
}

// Calls in the wrong state fail with kshare.ErrUsage, send nothing and change
// nothing.
func TestWrongStateIsUsageError(t *testing.T) {
	c := bundled.Cluster(t)
	log := bundled.ObserveRequests(t, c)
	m := newManager(t, newClient(t, c), "usage")
	ctx := testCtx(t)
	require.ErrorIs(t, m.Begin(), kshare.ErrUsage, "begin before init")
	require.ErrorIs(t, m.Commit(ctx, nil, nil), kshare.ErrUsage)
	require.ErrorIs(t, m.Abort(ctx, nil), kshare.ErrUsage)
	require.Empty(t, log.Of(kmsg.InitProducerID.Int16()))
	require.Equal(t, StateUninitialized, m.State())

	require.NoError(t, m.InitProducerID(ctx, nil))
	require.ErrorIs(t, m.Commit(ctx, nil, nil), kshare.ErrUsage, "commit without a transaction")
	require.ErrorIs(t, m.Abort(ctx, nil), kshare.ErrUsage, "abort without a transaction")
	require.NoError(t, m.Begin())
	require.ErrorIs(t, m.Begin(), kshare.ErrUsage, "nested begin")
	require.ErrorIs(t, m.InitProducerID(ctx, nil), kshare.ErrUsage, "init during a transaction")
	require.Equal(t, StateInTransaction, m.State(), "usage errors of the state change nothing")

	// What a transaction would carry, refused: the transaction must not
	// commit without it.
	meta := kshare.ShareGroupMetadata{GroupID: "g", MemberID: "m"}
	require.ErrorIs(t, m.StageShareAcks(ctx, nil, meta), kshare.ErrUsage)
	renew := acktrack.New(nil)
	renew.Add("t", [16]byte{}, 0, acktrack.Record{Offset: 1, Type: int8(wire.AckRenew)})
	require.ErrorIs(t, m.StageShareAcks(ctx, (*kshare.ShareAcks)(renew), meta), kshare.ErrUsage, "RENEW cannot be staged")
	require.ErrorIs(t, m.StageShareAcks(ctx, emptyAcks(), kshare.ShareGroupMetadata{GroupID: "g"}), kshare.ErrUsage, "no member id")
	require.ErrorIs(t, m.SendOffsets(ctx, nil, GroupMetadata{}), kshare.ErrUsage, "no group id")
	require.Equal(t, StateAbortableError, m.State(), "refused acknowledgements or offsets doom the transaction")
	require.ErrorIs(t, m.Commit(ctx, nil, nil), kshare.ErrAbortable)
	require.NoError(t, m.Abort(ctx, nil))
	require.Equal(t, StateReady, m.State())
	require.Empty(t, log.Of(kmsg.EndTxn.Int16()), "nothing was sent")
}

// A transaction that sent nothing ends without EndTxn; one that carries
// anything ends with it, and on TV2 the epoch EndTxn returns is used.
func TestEndTxnOnlyWhenSomethingWasSent(t *testing.T) {
	c := bundled.Cluster(t)
	log := bundled.ObserveRequests(t, c)
	m := newManager(t, newClient(t, c), "empty")
	ctx := testCtx(t)
	require.NoError(t, m.InitProducerID(ctx, nil))
	require.True(t, m.TV2())
	pid, epoch := m.ProducerID()

	require.NoError(t, m.Begin())
	require.NoError(t, m.Commit(ctx, nil, nil))
	require.NoError(t, m.Begin())
	require.NoError(t, m.Abort(ctx, nil))
	require.Empty(t, log.Of(kmsg.EndTxn.Int16()), "empty transactions end locally")
	require.Equal(t, Stats{Committed: 1, Aborted: 1}, m.Stats())

	// A produce request went out (and failed): the abort needs EndTxn,
	// which on TV2 bumps the epoch even for a transaction the coordinator
	// never saw start.
	require.NoError(t, m.Begin())
	m.MarkSent()
	require.NoError(t, m.Abort(ctx, nil))
	ends := log.Of(kmsg.EndTxn.Int16())
	require.Len(t, ends, 1)
	end := ends[0].Req.(*kmsg.EndTxnRequest)
	require.False(t, end.Commit)
	require.Equal(t, pid, end.ProducerID)
	require.Equal(t, epoch, end.ProducerEpoch)
	newPID, newEpoch := m.ProducerID()
	require.Equal(t, pid, newPID)
	require.Equal(t, epoch+1, newEpoch, "TV2 bumps the epoch at every EndTxn")
}

// Re-initializing after an abortable error passes the current id and epoch
// (recovery) after ending the open transaction with EndTxn(ABORT); a
// producer that was fenced meanwhile learns it as kshare.ErrFatal.
func TestInitProducerIDRecovery(t *testing.T) {
	c := bundled.Cluster(t)
	log := bundled.ObserveRequests(t, c)
	cl := newClient(t, c)
	m := newManager(t, cl, "recovery")
	ctx := testCtx(t)
	require.NoError(t, m.InitProducerID(ctx, nil))
	first := log.Of(kmsg.InitProducerID.Int16())[0].Req.(*kmsg.InitProducerIDRequest)
	require.EqualValues(t, -1, first.ProducerID, "a new producer asks for a fresh id")
	pid, epoch := m.ProducerID()

	require.NoError(t, m.Begin())
	m.MarkSent()
	err := m.Fail("produce", kerr.MessageTooLarge)
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.Equal(t, StateAbortableError, m.State())
	require.ErrorIs(t, m.Commit(ctx, nil, nil), kshare.ErrAbortable, "an abortable transaction cannot commit")

	log.Reset()
	require.NoError(t, m.InitProducerID(ctx, nil))
	seq := log.Of(kmsg.EndTxn.Int16(), kmsg.InitProducerID.Int16())
	require.Len(t, seq, 2, "recovery ends the open transaction, then bumps the epoch")
	end := seq[0].Req.(*kmsg.EndTxnRequest)
	require.False(t, end.Commit)
	require.Equal(t, []any{pid, epoch}, []any{end.ProducerID, end.ProducerEpoch})
	req := seq[1].Req.(*kmsg.InitProducerIDRequest)
	require.Equal(t, pid, req.ProducerID, "recovery passes the current id")
	require.Equal(t, epoch+1, req.ProducerEpoch, "and the epoch the abort moved to (TV2)")
	_, newEpoch := m.ProducerID()
	require.Equal(t, epoch+2, newEpoch)
	require.Equal(t, StateReady, m.State())
	require.EqualValues(t, 1, m.Stats().Aborted)

	// A successor fences m; m's recovery attempt is refused.
	require.NoError(t, m.Begin())
	require.Error(t, m.Fail("produce", kerr.MessageTooLarge))
	require.NoError(t, newManager(t, cl, "recovery").InitProducerID(ctx, nil))
	err = m.InitProducerID(ctx, nil)
	require.ErrorIs(t, err, kshare.ErrFatal)
	require.ErrorIs(t, err, kerr.ProducerFenced)
	require.Equal(t, StateFatalError, m.State())
}

// TxnState pairs the state with the number of the transaction it concerns:
// Begin numbers transactions, and the end of one keeps its number until
// the next Begin.
func TestTxnStateNumbersTransactions(t *testing.T) {
	c := bundled.Cluster(t)
	m := newManager(t, newClient(t, c), "numbered")
	ctx := testCtx(t)
	st, n := m.TxnState()
	require.Equal(t, StateUninitialized, st)
	require.Zero(t, n)
	require.NoError(t, m.InitProducerID(ctx, nil))
	for want := uint64(1); want <= 3; want++ {
		require.NoError(t, m.Begin())
		st, n = m.TxnState()
		require.Equal(t, StateInTransaction, st)
		require.Equal(t, want, n)
		if want%2 == 0 {
			m.MarkSent() // the abort goes to the coordinator
			require.NoError(t, m.Abort(ctx, nil))
		} else {
			require.NoError(t, m.Commit(ctx, nil, nil)) // nothing sent: ends locally
		}
		st, n = m.TxnState()
		require.Equal(t, StateReady, st)
		require.Equal(t, want, n, "the ended transaction keeps its number")
		require.Equal(t, st, m.State())
	}
}

// The first stale-suspect answer on behalf of the coordinator is retried;
// a repeat with the coordinator unmoved is final; a moved coordinator means
// another retry. Other codes are final at once.
func TestConfirmAnswer(t *testing.T) {
	c := bundled.Cluster(t, broker.Nodes(2))
	m := newManager(t, newClient(t, c), "confirm")
	ctx := testCtx(t)
	require.NoError(t, m.InitProducerID(ctx, nil))
	var chk AnswerCheck
	require.True(t, m.ConfirmAnswer(ctx, kerr.ProducerFenced.Code, &chk), "first answer is retried")
	require.False(t, m.ConfirmAnswer(ctx, kerr.ProducerFenced.Code, &chk), "repeated by the same coordinator: final")

	part := c.CoordinatorPartition(1, "confirm")
	leader, err := c.Leader(wire.TransactionStateTopic, part)
	require.NoError(t, err)
	require.NoError(t, c.MoveLeader(wire.TransactionStateTopic, part, 1-leader))
	require.True(t, m.ConfirmAnswer(ctx, kerr.InvalidTxnState.Code, &chk), "the coordinator moved: retry")
	require.False(t, m.ConfirmAnswer(ctx, kerr.InvalidTxnState.Code, &chk))
	require.False(t, m.ConfirmAnswer(ctx, kerr.InvalidRecordState.Code, &AnswerCheck{}), "not stale-suspect")
}

// FindCoordinator answers are cached until forgotten; Refresh asks again.
func TestCoordinatorCache(t *testing.T) {
	c := bundled.Cluster(t, broker.Nodes(3))
	log := bundled.ObserveRequests(t, c)
	co := NewCoordinators(newClient(t, c), nil)
	ctx := testCtx(t)
	node, err := co.Find(ctx, TransactionCoordinator, "cached")
	require.NoError(t, err)
	leader, err := c.Leader(wire.TransactionStateTopic, c.CoordinatorPartition(1, "cached"))
	require.NoError(t, err)
	require.Equal(t, leader, node)
	again, err := co.Find(ctx, TransactionCoordinator, "cached")
	require.NoError(t, err)
	require.Equal(t, node, again)
	require.Len(t, log.Of(kmsg.FindCoordinator.Int16()), 1, "the second Find is served from the cache")

	co.Forget(TransactionCoordinator, "cached", node+1)
	_, ok := co.Cached(TransactionCoordinator, "cached")
	require.True(t, ok, "Forget of another node keeps the entry")
	co.Forget(TransactionCoordinator, "cached", node)
	_, ok = co.Cached(TransactionCoordinator, "cached")
	require.False(t, ok)

	group, err := co.Find(ctx, GroupCoordinator, "a-group")
	require.NoError(t, err)
	groupLeader, err := c.Leader(wire.ConsumerOffsetsTopic, c.CoordinatorPartition(0, "a-group"))
	require.NoError(t, err)
	require.Equal(t, groupLeader, group)
}

// Capability detection reads ApiVersions: both KIP-1289 keys and
// share.version >= 3, or a message naming the broker and what it lacks.
func TestCapabilities(t *testing.T) {
	ctx := testCtx(t)
	with := bundled.Cluster(t)
	caps := NewCapabilities(newClient(t, with))
	b, err := caps.Of(ctx, 0)
	require.NoError(t, err)
	require.True(t, b.TV2())
	require.Empty(t, b.ShareAcksMissing())
	require.NoError(t, caps.RequireShareAcks(ctx, "op", []int32{0}))

	without := bundled.Cluster(t, broker.ShareTxnAPIs(false))
	caps = NewCapabilities(newClient(t, without))
	err = caps.RequireShareAcks(ctx, "op", []int32{0})
	require.ErrorIs(t, err, kshare.ErrUnsupported)
	require.Contains(t, err.Error(), "broker 0 (")
	require.Contains(t, err.Error(), "API key 95 (TxnShareAcknowledge) not advertised")
	require.NotContains(t, err.Error(), "API key 96", "KIP-1289's draft has key 95 alone")

	// A client pinned below the KIP-1289 key cannot send it either.
	pinned := NewCapabilities(newClient(t, with, kgo.MaxVersions(kversion.V4_0_0())))
	err = pinned.RequireShareAcks(ctx, "op", []int32{0})
	require.ErrorIs(t, err, kshare.ErrUnsupported)
	require.Contains(t, err.Error(), "kgo.MaxVersions pin")
}

// Consumer-group offsets join the transaction: on TV2 with TxnOffsetCommit
// alone, on TV1 after AddOffsetsToTxn. Committed offsets become visible,
// aborted ones do not.
func TestSendOffsets(t *testing.T) {
	for _, tv1 := range []bool{false, true} {
		name := "TV2"
		if tv1 {
			name = "TV1"
		}
		t.Run(name, func(t *testing.T) {
			c := bundled.Cluster(t)
			const topic, group = "offsets", "offsets-group"
			createTopic(t, c, topic, 1)
			log := bundled.ObserveRequests(t, c)
			ctx := testCtx(t)
			consumer := newClient(t, c, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond))
			var member string
			var gen int32
			for member == "" {
				pollCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				consumer.PollFetches(pollCtx)
				cancel()
				require.NoError(t, ctx.Err())
				member, gen = consumer.GroupMetadata()
			}
			var opts []kgo.Opt
			if tv1 {
				opts = append(opts, kgo.MaxVersions(kversion.V3_5_0()))
			}
			m := newManager(t, newClient(t, c, opts...), "offsets-"+name)
			require.NoError(t, m.InitProducerID(ctx, nil))
			require.Equal(t, !tv1, m.TV2())
			meta := GroupMetadata{GroupID: group, MemberID: member, Generation: gen}

			for _, commit := range []bool{true, false} {
				at := int64(5)
				if !commit {
					at = 9
				}
				require.NoError(t, m.Begin())
				require.NoError(t, m.SendOffsets(ctx, map[string]map[int32]kgo.EpochOffset{topic: {0: {Epoch: -1, Offset: at}}}, meta))
				if commit {
					require.NoError(t, m.Commit(ctx, nil, nil))
				} else {
					require.NoError(t, m.Abort(ctx, nil))
				}
			}
			if tv1 {
				require.Len(t, log.Of(kmsg.AddOffsetsToTxn.Int16()), 2)
			} else {
				require.Empty(t, log.Of(kmsg.AddOffsetsToTxn.Int16()), "TV2 sends no AddOffsetsToTxn")
			}
			require.Len(t, log.Of(kmsg.EndTxn.Int16()), 2)
			fetched, err := kadm.NewClient(newClient(t, c)).FetchOffsets(ctx, group)
			require.NoError(t, err)
			o, ok := fetched.Lookup(topic, 0)
			require.True(t, ok)
			require.EqualValues(t, 5, o.At, "the committed offset, not the aborted one")
		})
	}
}
