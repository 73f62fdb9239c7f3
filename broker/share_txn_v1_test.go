package broker

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

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
