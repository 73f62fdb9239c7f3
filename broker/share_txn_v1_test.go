package broker

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// TestShareTxnV1AddsTheStatePartition: TxnShareAcknowledge v1 needs no
// AddShareAcksToTxn; the leader puts the share state partition in the
// transaction, so the commit's marker reaches it and the records are
// acknowledged. v0 without AddShareAcksToTxn is refused (the test below
// it in share_txn_test.go), so the difference is the version.
func TestShareTxnV1AddsTheStatePartition(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil)
	pid, epoch := txnInitOK(t, c, "tx") // no AddShareAcksToTxn
	top, part := m1.stageTxnAt(1, "tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.NoError(t, top)
	require.NoError(t, part)
	require.Equal(t, map[shareRecordState]int{shareTxPending: 5, shareAcquired: 5}, shareRecordStates(t, c, "g", "in", 0))

	next := shareEndTxn(t, c, "tx", pid, epoch, true)
	require.Greater(t, next, epoch)
	require.Equal(t, int64(5), shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset, "the commit marker reached the state partition")

	// A late request with the epoch the commit bumped away from must not
	// start a transaction of its own: transaction version 2 bumps the
	// epoch at every EndTxn for this.
	_, part = m1.stageTxnAt(1, "tx", pid, epoch, "in", 0, shareRange{5, 9, wire.AckAccept})
	require.ErrorIs(t, part, kerr.ProducerFenced)
	require.Equal(t, map[shareRecordState]int{shareAcquired: 5}, shareRecordStates(t, c, "g", "in", 0), "nothing staged")
}

// TestShareTxnV1AbortReleases: an abort releases what v1 staged, as it
// does for v0 after AddShareAcksToTxn.
func TestShareTxnV1AbortReleases(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil)
	pid, epoch := txnInitOK(t, c, "tx")
	_, part := m1.stageTxnAt(1, "tx", pid, epoch, "in", 0, shareRange{0, 9, wire.AckAccept})
	require.NoError(t, part)
	shareEndTxn(t, c, "tx", pid, epoch, false)
	require.Equal(t, map[shareRecordState]int{shareAvailable: 10}, shareRecordStates(t, c, "g", "in", 0))
}

// TestShareTxnV1FencedProducerStagesNothing: v1's add is refused for a
// producer a newer one fenced, and nothing is staged.
func TestShareTxnV1FencedProducerStagesNothing(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil)
	pid, epoch := txnInitOK(t, c, "tx")
	txnInitOK(t, c, "tx") // fences epoch
	_, part := m1.stageTxnAt(1, "tx", pid, epoch, "in", 0, shareRange{0, 9, wire.AckAccept})
	require.ErrorIs(t, part, kerr.ProducerFenced)
	require.Equal(t, map[shareRecordState]int{shareAcquired: 10}, shareRecordStates(t, c, "g", "in", 0), "nothing staged")
}

// TestAPIVersionCap: capped nodes advertise and serve only the versions
// they are left with, a cap below the oldest version removes the key, and
// caps on unknown keys or nodes are refused.
func TestAPIVersionCap(t *testing.T) {
	c := newTestCluster(t, Nodes(3),
		APIVersionCap(wire.TxnShareAcknowledgeKey, 0, 2),
		APIVersionCap(wire.AddShareAcksToTxnKey, -1, 1))
	maxOf := func(node int32, key int16) int16 {
		resp := txnWire(t, c, node, kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
		for _, k := range resp.ApiKeys {
			if k.ApiKey == key {
				return k.MaxVersion
			}
		}
		return -1
	}
	require.Equal(t, wire.TxnShareAcknowledgeMaxVersion, maxOf(0, wire.TxnShareAcknowledgeKey))
	require.Equal(t, int16(0), maxOf(2, wire.TxnShareAcknowledgeKey))
	require.Equal(t, int16(0), maxOf(0, wire.AddShareAcksToTxnKey))
	require.Equal(t, int16(-1), maxOf(1, wire.AddShareAcksToTxnKey), "a cap below v0 removes the key")

	req := &wire.TxnShareAcknowledgeRequest{Version: 1}
	require.Equal(t, kerr.UnsupportedVersion.Code, rawErrorCode(t, c, 2, req), "a capped node refuses v1")
	require.NotEqual(t, kerr.UnsupportedVersion.Code, rawErrorCode(t, c, 0, req))

	all := newTestCluster(t, Nodes(2), APIVersionCap(wire.TxnShareAcknowledgeKey, 0))
	for _, node := range all.NodeIDs() {
		resp := txnWire(t, all, node, kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
		for _, k := range resp.ApiKeys {
			if k.ApiKey == wire.TxnShareAcknowledgeKey {
				require.Equal(t, int16(0), k.MaxVersion, "no node named: every node is capped")
			}
		}
	}

	_, err := NewCluster(Nodes(2), APIVersionCap(wire.TxnShareAcknowledgeKey, 0, 2))
	require.ErrorContains(t, err, "APIVersionCap(95, nodes 2)")
	_, err = NewCluster(APIVersionCap(9999, 0))
	require.ErrorContains(t, err, "does not serve API key 9999")
}
