package broker

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare/wire"
)

// TestShareTxnLeaderAddsTheStatePartition: as in KIP-1289's draft, the
// leader that gets TxnShareAcknowledge puts the share state partition in
// the transaction (there is no AddShareAcksToTxn), so the commit's marker
// reaches it and the records are acknowledged.
func TestShareTxnLeaderAddsTheStatePartition(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil)
	pid, epoch := txnInitOK(t, c, "tx")
	top, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.NoError(t, top)
	require.NoError(t, part)
	require.Equal(t, map[shareRecordState]int{shareTxPending: 5, shareAcquired: 5}, shareRecordStates(t, c, "g", "in", 0))

	next := shareEndTxn(t, c, "tx", pid, epoch, true)
	require.Greater(t, next, epoch)
	require.Equal(t, int64(5), shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset, "the commit marker reached the state partition")

	// A late request with the epoch the commit bumped away from must not
	// start a transaction of its own: transaction version 2 bumps the
	// epoch at every EndTxn for this.
	_, part = m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{5, 9, wire.AckAccept})
	require.ErrorIs(t, part, kerr.ProducerFenced)
	require.Equal(t, map[shareRecordState]int{shareAcquired: 5}, shareRecordStates(t, c, "g", "in", 0), "nothing staged")
}

// TestShareTxnAbortReleasesAtOnce: an abort makes what was staged
// available again at once, gaps included; a commit archives gaps.
func TestShareTxnAbortReleasesAtOnce(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil)
	pid, epoch := txnInitOK(t, c, "tx")
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 9, wire.AckAccept})
	require.NoError(t, part)
	shareEndTxn(t, c, "tx", pid, epoch, false)
	require.Equal(t, map[shareRecordState]int{shareAvailable: 10}, shareRecordStates(t, c, "g", "in", 0))
}

// TestShareTxnGapsAndPerOffsetTypes: a batch may carry one type per offset
// (AcknowledgeTypes as long as the range) and the gap marker; a commit
// archives rejected records and gaps and acknowledges accepted ones.
func TestShareTxnGapsAndPerOffsetTypes(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil)
	pid, epoch := txnInitOK(t, c, "tx")
	req := &wire.TxnShareAcknowledgeRequest{
		TransactionalID: "tx", GroupID: "g", ProducerID: pid, ProducerEpoch: epoch,
		MemberID: m1.id, MemberEpoch: m1.epoch,
		Topics: []wire.TxnShareAcknowledgeTopic{{TopicID: m1.topicID("in"), Partitions: []wire.TxnShareAcknowledgePartition{{
			Partition: 0, AcknowledgementBatches: []wire.TxnShareAcknowledgeBatch{
				{FirstOffset: 0, LastOffset: 3, AcknowledgeTypes: []wire.AckType{wire.AckAccept, wire.AckGap, wire.AckReject, wire.AckAccept}},
				{FirstOffset: 4, LastOffset: 9, AcknowledgeTypes: []wire.AckType{wire.AckGap}},
			},
		}}}},
	}
	resp := txnWire(t, c, m1.leader("in", 0), req).(*wire.TxnShareAcknowledgeResponse)
	require.Zero(t, resp.ErrorCode)
	require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, map[shareRecordState]int{shareTxPending: 10}, shareRecordStates(t, c, "g", "in", 0))

	// A per-offset array of the wrong length is refused, nothing staged.
	bad := *req
	bad.Topics = []wire.TxnShareAcknowledgeTopic{{TopicID: m1.topicID("in"), Partitions: []wire.TxnShareAcknowledgePartition{{
		Partition: 0, AcknowledgementBatches: []wire.TxnShareAcknowledgeBatch{{FirstOffset: 0, LastOffset: 3, AcknowledgeTypes: []wire.AckType{wire.AckAccept, wire.AckReject}}},
	}}}}
	resp = txnWire(t, c, m1.leader("in", 0), &bad).(*wire.TxnShareAcknowledgeResponse)
	require.Equal(t, kerr.InvalidRequest.Code, resp.Topics[0].Partitions[0].ErrorCode)

	shareEndTxn(t, c, "tx", pid, epoch, true)
	require.Equal(t, int64(10), shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset, "every record done")
	require.Empty(t, shareJoin(t, c, "g", "m2", "in").fetch("in", 0), "nothing comes back")
}
