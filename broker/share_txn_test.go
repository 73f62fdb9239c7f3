package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare/wire"
)

// Protocol-level tests of transactional share acknowledgements (KIP-1289):
// records acquired with ShareFetch, InitProducerId, TxnShareAcknowledge
// (whose leader adds the share state partition to the transaction), EndTxn
// v5.

// shareTxnSetup starts a 3-node cluster with topic "in" holding ten
// records, share group "g" reading from the earliest offset with the given
// extra group configs, and member "m1" holding all ten records.
func shareTxnSetup(t *testing.T, opts []Opt, configs ...string) (*Cluster, *rawShareMember) {
	t.Helper()
	c := newTestCluster(t, append([]Opt{Nodes(3)}, opts...)...)
	createTopic(t, c, "in", 1)
	admin := newTestClient(t, c)
	shareSetGroupConfigs(t, admin, "g", append([]string{"share.auto.offset.reset", "earliest"}, configs...)...)
	shareProduce(t, shareProducer(t, c), "in", 1, shareValues("in", 10)...)
	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Len(t, m1.fetch("in", 0), 10)
	return c, m1
}

// shareTxnBegin initializes a transactional id; its first
// TxnShareAcknowledge starts its transaction.
func shareTxnBegin(t *testing.T, c *Cluster, txnID string) (int64, int16) {
	t.Helper()
	return txnInitOK(t, c, txnID)
}

func offsetsFrom(first, last int64, count int16) map[int64]int16 {
	out := map[int64]int16{}
	for o := first; o <= last; o++ {
		out[o] = count
	}
	return out
}

func TestShareTxnCommit(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil)
	pid, epoch := shareTxnBegin(t, c, "tx")
	top, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{6, 9, wire.AckRelease})
	require.ErrorIs(t, part, kerr.InvalidRequest, "RELEASE is not valid in a transaction")
	require.NoError(t, top)
	require.NoError(t, m1.acknowledge("in", 0, 6, 9, wire.AckRelease), "a release goes outside the transaction")
	top, part = m1.stageTxn("tx", pid, epoch, "in", 0,
		shareRange{0, 4, wire.AckAccept}, shareRange{5, 5, wire.AckReject})
	require.NoError(t, top)
	require.NoError(t, part)
	require.Equal(t, map[shareRecordState]int{shareTxPending: 6, shareAvailable: 4}, shareRecordStates(t, c, "g", "in", 0))

	shareEndTxn(t, c, "tx", pid, epoch, true)
	require.Equal(t, int64(6), shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset,
		"accepted and rejected records are done")
	m2 := shareJoin(t, c, "g", "m2", "in")
	require.Equal(t, offsetsFrom(6, 9, 2), m2.fetch("in", 0), "only the released records come back")
	require.NoError(t, m2.acknowledge("in", 0, 6, 9, wire.AckAccept))
	require.Empty(t, m2.fetch("in", 0), "committed acknowledgements are never redelivered")
}

func TestShareTxnAbortMakesRecordsAvailableAtOnce(t *testing.T) {
	// The lock is ten minutes: only the abort can make these available.
	c, m1 := shareTxnSetup(t, nil, "share.record.lock.duration.ms", "600000")
	pid, epoch := shareTxnBegin(t, c, "tx")
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 9, wire.AckAccept})
	require.NoError(t, part)
	shareEndTxn(t, c, "tx", pid, epoch, false)
	m2 := shareJoin(t, c, "g", "m2", "in")
	require.Equal(t, offsetsFrom(0, 9, 2), m2.fetch("in", 0), "aborted: available at once, delivery count unchanged")
}

func TestShareTxnStagingNeedsHeldRecords(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil, "share.record.lock.duration.ms", "600000")
	m2 := shareJoin(t, c, "g", "m2", "in")
	require.NoError(t, m1.acknowledge("in", 0, 5, 9, wire.AckRelease))
	require.Equal(t, offsetsFrom(5, 9, 2), m2.fetch("in", 0))
	pid, epoch := shareTxnBegin(t, c, "tx")

	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 6, wire.AckAccept})
	require.ErrorIs(t, part, kerr.InvalidRecordState, "offsets 5-6 are held by another member")
	require.Equal(t, map[shareRecordState]int{shareAcquired: 10}, shareRecordStates(t, c, "g", "in", 0), "nothing staged")
	require.NoError(t, m1.acknowledge("in", 0, 0, 4, wire.AckAccept), "m1 still holds its records")

	_, part = m2.stageTxn("tx", pid, epoch, "in", 0, shareRange{5, 9, wire.AckRelease})
	require.ErrorIs(t, part, kerr.InvalidRequest, "RELEASE cannot be staged")
	_, part = m2.stageTxn("tx", pid, epoch, "in", 0, shareRange{5, 9, wire.AckRenew})
	require.ErrorIs(t, part, kerr.InvalidRequest, "RENEW cannot be staged")
	future := *m2
	future.epoch = m2.epoch + 5
	top, part := future.stageTxn("tx", pid, epoch, "in", 0, shareRange{5, 9, wire.AckAccept})
	require.ErrorIs(t, top, kerr.FencedMemberEpoch)
	require.ErrorIs(t, part, kerr.FencedMemberEpoch)
	stale := *m2
	stale.epoch = m2.epoch - 1
	top, part = stale.stageTxn("tx", pid, epoch, "in", 0, shareRange{5, 9, wire.AckAccept})
	require.ErrorIs(t, top, kerr.StaleMemberEpoch, "only the member's current epoch is valid")
	require.ErrorIs(t, part, kerr.StaleMemberEpoch)
	stranger := *m2
	stranger.id = "nobody"
	_, part = stranger.stageTxn("tx", pid, epoch, "in", 0, shareRange{5, 9, wire.AckAccept})
	require.ErrorIs(t, part, kerr.UnknownMemberID)
	require.Equal(t, map[shareRecordState]int{shareAcquired: 5}, shareRecordStates(t, c, "g", "in", 0), "still nothing staged")

	_, part = m2.stageTxn("tx", pid, epoch, "in", 0, shareRange{5, 9, wire.AckAccept})
	require.NoError(t, part)
	shareEndTxn(t, c, "tx", pid, epoch, true)
	require.Equal(t, int64(10), shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset)
}

// A TxnShareAcknowledge retried after its answer was lost is answered as
// the first one was, without a second write; a different acknowledgement,
// or another producer or epoch, for the same records is still refused.
func TestShareTxnStagingRetryIsAccepted(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil, "share.record.lock.duration.ms", "600000")
	pid, epoch := shareTxnBegin(t, c, "tx")
	stage := []shareRange{{0, 4, wire.AckAccept}, {5, 9, wire.AckReject}}
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, stage...)
	require.NoError(t, part)
	_, part = m1.stageTxn("tx", pid, epoch, "in", 0, stage...)
	require.NoError(t, part, "the retry of an applied staging")
	_, part = m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.NoError(t, part, "a retry of part of it")
	_, part = m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 9, wire.AckAccept})
	require.ErrorIs(t, part, kerr.InvalidRecordState, "offsets 5-9 are staged as REJECT")
	other, otherEpoch := shareTxnBegin(t, c, "other-tx")
	_, part = m1.stageTxn("other-tx", other, otherEpoch, "in", 0, stage...)
	require.ErrorIs(t, part, kerr.InvalidRecordState, "another producer's staging")
	require.Equal(t, map[shareRecordState]int{shareTxPending: 10}, shareRecordStates(t, c, "g", "in", 0))

	shareEndTxn(t, c, "tx", pid, epoch, true)
	require.Equal(t, int64(10), shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset)
	_, part = m1.stageTxn("tx", pid, epoch, "in", 0, stage...)
	require.Error(t, part, "after the transaction ended the records are no longer pending for it")
}

func TestShareTxnStagingAnExpiredLockFails(t *testing.T) {
	c, m1 := shareTxnSetup(t, []Opt{ShareLockDurationBounds(100*time.Millisecond, time.Hour)}, "share.record.lock.duration.ms", "200")
	pid, epoch := shareTxnBegin(t, c, "tx")
	ctx := testCtx(t)
	shareEventually(t, ctx, "the lock to expire", func() bool {
		return shareRecordStates(t, c, "g", "in", 0)[shareAvailable] == 10
	})
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 9, wire.AckAccept})
	require.ErrorIs(t, part, kerr.InvalidRecordState)
	require.Equal(t, map[shareRecordState]int{shareAvailable: 10}, shareRecordStates(t, c, "g", "in", 0), "nothing staged")
}

func TestShareTxnPendingOutlivesTheLock(t *testing.T) {
	c, m1 := shareTxnSetup(t, []Opt{ShareLockDurationBounds(100*time.Millisecond, time.Hour)}, "share.record.lock.duration.ms", "200")
	pid, epoch := shareTxnBegin(t, c, "tx")
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 9, wire.AckAccept})
	require.NoError(t, part)
	m2 := shareJoin(t, c, "g", "m2", "in")
	time.Sleep(600 * time.Millisecond) // three lock durations
	require.Empty(t, m2.fetch("in", 0), "TX_PENDING records are not delivered after the lock duration")
	require.Equal(t, map[shareRecordState]int{shareTxPending: 10}, shareRecordStates(t, c, "g", "in", 0))
	shareEndTxn(t, c, "tx", pid, epoch, true)
	require.Empty(t, m2.fetch("in", 0))
	require.Equal(t, int64(10), shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset)
}

func TestShareTxnTimeoutMakesRecordsAvailable(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil, "share.record.lock.duration.ms", "600000")
	resp := txnInit(t, c, txnCoordinatorNode(t, c, "tx"), "tx", 500, -1, -1)
	require.NoError(t, txnErr(resp.ErrorCode))
	pid, epoch := resp.ProducerID, resp.ProducerEpoch
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 9, wire.AckAccept})
	require.NoError(t, part)

	m2 := shareJoin(t, c, "g", "m2", "in")
	ctx := testCtx(t)
	var got map[int64]int16
	shareEventually(t, ctx, "the timed-out transaction to be aborted", func() bool {
		got = m2.fetch("in", 0)
		return len(got) > 0
	})
	require.Equal(t, offsetsFrom(0, 9, 2), got)
	end := txnEnd(t, c, txnCoordinatorNode(t, c, "tx"), 5, "tx", pid, epoch, true)
	require.Error(t, txnErr(end.ErrorCode), "the producer cannot commit a transaction the coordinator aborted")
}

// TestShareTxnLateCommitMarker joins the two KIPs: a late copy of
// transaction N's COMMIT marker reaches the __share_group_state partition
// while transaction N+1 of the same producer has staged acknowledgements.
// KIP-1228's rule refuses it, N+1 aborts and its records are delivered
// again; under the legacy rule the late marker commits N+1's
// acknowledgements and the records are lost to the group.
func TestShareTxnLateCommitMarker(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		name := "KIP-1228"
		if legacy {
			name = "legacy-marker-validation"
		}
		t.Run(name, func(t *testing.T) {
			c, m1 := shareTxnSetup(t, []Opt{LegacyMarkerValidation(legacy)}, "share.record.lock.duration.ms", "600000")
			pid, epochN := shareTxnBegin(t, c, "tx")
			_, part := m1.stageTxn("tx", pid, epochN, "in", 0, shareRange{0, 4, wire.AckAccept})
			require.NoError(t, part)
			epochNext := shareEndTxn(t, c, "tx", pid, epochN, true) // N's markers carry epochNext

			_, part = m1.stageTxn("tx", pid, epochNext, "in", 0, shareRange{5, 9, wire.AckAccept})
			require.NoError(t, part)

			state := shareStatePartition(t, c, "g", "in", 0)
			err := txnMarker(t, c, 2, txnVersion2, wire.ShareGroupStateTopic, state, pid, epochNext, true, txnShardEpoch(t, c, "tx"))
			if legacy {
				require.NoError(t, err, "the legacy rule takes the late marker")
			} else {
				require.ErrorIs(t, err, kerr.InvalidProducerEpoch, "KIP-1228 refuses the late marker")
			}
			shareEndTxn(t, c, "tx", pid, epochNext, false) // N+1 aborts

			m2 := shareJoin(t, c, "g", "m2", "in")
			start := shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset
			if legacy {
				require.Empty(t, m2.fetch("in", 0), "N+1's acknowledgements were committed by N's late marker")
				require.Equal(t, int64(10), start)
				return
			}
			require.Equal(t, offsetsFrom(5, 9, 2), m2.fetch("in", 0), "N+1 aborted: its records are delivered again")
			require.Equal(t, int64(5), start)
		})
	}
}

// TestShareTxnStatePartitionMovesMidTransaction moves the leadership of
// the __share_group_state partition after staging: the new share
// coordinator replays the staged record, the marker reaches it, and the
// outcome is applied once, including across a later move.
func TestShareTxnStatePartitionMovesMidTransaction(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil, "share.record.lock.duration.ms", "600000")
	pid, epoch := shareTxnBegin(t, c, "tx")
	require.NoError(t, m1.acknowledge("in", 0, 5, 9, wire.AckRelease))
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.NoError(t, part)

	state := shareStatePartition(t, c, "g", "in", 0)
	moveAway := func() {
		leader, err := c.Leader(wire.ShareGroupStateTopic, state)
		require.NoError(t, err)
		require.NoError(t, c.MoveLeader(wire.ShareGroupStateTopic, state, txnOtherNode(c, leader)))
	}
	moveAway()
	require.Equal(t, map[shareRecordState]int{shareTxPending: 5, shareAvailable: 5}, shareRecordStates(t, c, "g", "in", 0))
	shareEndTxn(t, c, "tx", pid, epoch, true)
	require.Equal(t, map[shareRecordState]int{shareAvailable: 5}, shareRecordStates(t, c, "g", "in", 0))

	moveAway()
	admin := newTestClient(t, c)
	require.Equal(t, int64(5), shareOffsets(t, admin, "g", "in")[0].StartOffset)
	m2 := shareJoin(t, c, "g", "m2", "in")
	require.Equal(t, offsetsFrom(5, 9, 2), m2.fetch("in", 0), "released once: delivery count 2, not 3")
}

// TestShareTxnDataPartitionMovesMidTransaction moves the data partition's
// leadership after staging: the new leader rebuilds the share-partition
// from the share coordinator with the staged records still TX_PENDING.
func TestShareTxnDataPartitionMovesMidTransaction(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil, "share.record.lock.duration.ms", "600000")
	pid, epoch := shareTxnBegin(t, c, "tx")
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.NoError(t, part)
	leader, err := c.Leader("in", 0)
	require.NoError(t, err)
	require.NoError(t, c.MoveLeader("in", 0, txnOtherNode(c, leader)))

	m2 := shareJoin(t, c, "g", "m2", "in")
	require.Equal(t, offsetsFrom(5, 9, 2), m2.fetch("in", 0),
		"records m1 held come back at the new leader (their delivery counted); staged ones stay pending")
	shareEndTxn(t, c, "tx", pid, epoch, true)
	require.Equal(t, int64(5), shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset)
}

// TestShareTxnRepeatedAbortsArchive shows the delivery-limit consequence of
// repeated aborts: an abort keeps the delivery count, but every delivery
// raised it, so the abort after the limit-th delivery archives the record.
func TestShareTxnRepeatedAbortsArchive(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil, "share.record.lock.duration.ms", "600000", "share.delivery.count.limit", "2")
	pid, epoch := shareTxnBegin(t, c, "tx")
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 9, wire.AckAccept})
	require.NoError(t, part)
	epoch = shareEndTxn(t, c, "tx", pid, epoch, false)
	require.Equal(t, offsetsFrom(0, 9, 2), m1.fetch("in", 0), "first abort: available again")

	_, part = m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 9, wire.AckAccept})
	require.NoError(t, part)
	shareEndTxn(t, c, "tx", pid, epoch, false)
	require.Empty(t, m1.fetch("in", 0), "delivered twice with limit 2: the second abort archives")
	require.Equal(t, int64(10), shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset)
}
