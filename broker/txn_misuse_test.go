package broker

// Misuse of the transactional write checks: batches under a foreign
// transactional id, leader-side adds after a transaction version 1 end
// (and after a timeout abort, which must not count as one),
// TxnShareAcknowledge at a version the broker does not serve or with
// producers it must refuse, and the retry of a staging after a leader
// move. The APIVersionCap tests are in mixed_versions_test.go.

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// TestTxnForeignTxnIDCannotJoinOpenTransaction: the leader skips the
// coordinator only for later batches of a transaction it already checked
// under the same transactional id. A batch naming another id (initialized
// or not) with the open transaction's producer id and epoch is asked
// about, refused, and not committed by the transaction's EndTxn.
func TestTxnForeignTxnIDCannotJoinOpenTransaction(t *testing.T) {
	for _, other := range []string{"other", "never-initialized"} {
		t.Run(other, func(t *testing.T) {
			c := newTestCluster(t, Nodes(3))
			createTopic(t, c, "out", 1)
			pid, epoch := txnInitOK(t, c, "tx")
			if other == "other" {
				txnInitOK(t, c, other)
			}
			require.NoError(t, txnProduce(t, c, 12, "tx", "out", 0, pid, epoch, 0, "mine"))

			err := txnProduce(t, c, 12, other, "out", 0, pid, epoch, 1, "intruder")
			require.ErrorIs(t, err, kerr.InvalidProducerIDMapping)
			resp := txnEnd(t, c, txnCoordinatorNode(t, c, "tx"), 5, "tx", pid, epoch, true)
			require.NoError(t, txnErr(resp.ErrorCode))
			end, lso := txnOffsets(t, c, "out", 0)
			require.Equal(t, end, lso)
			require.EqualValues(t, 2, end, "one data record and the marker: the intruder was not appended")
		})
	}
}

// TestTxnShareAckLateCopyAfterTV1End: a producer that ends with EndTxn v4
// (transaction version 1) keeps its epoch, so a late copy of a
// TxnShareAcknowledge of its aborted transaction, arriving once the member
// holds the same records again, must not be staged: the coordinator
// refuses a leader's add after a transaction version 1 end at the same
// epoch (INVALID_TXN_STATE), which would otherwise open a transaction of
// its own that the producer's next commit (AddPartitionsToTxn v3, Produce
// v11, EndTxn v4) would commit.
func TestTxnShareAckLateCopyAfterTV1End(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil)
	createTopic(t, c, "out", 1)
	coord := txnCoordinatorNode(t, c, "tx")
	pid, epoch := txnInitOK(t, c, "tx")
	// Transaction 1 stages ACCEPT of 0-4, then aborts with EndTxn v4.
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.NoError(t, part)
	require.NoError(t, txnErr(txnEnd(t, c, coord, 4, "tx", pid, epoch, false).ErrorCode))
	require.Len(t, m1.fetch("in", 0), 5, "the aborted records come back to the member")

	// The late copy of transaction 1's request.
	_, part = m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})

	// Transaction 2 writes output only, and commits.
	require.NoError(t, txnAddOutV3(t, c, coord, pid, epoch))
	require.NoError(t, txnProduce(t, c, 11, "tx", "out", 0, pid, epoch, 0, "txn2"))
	require.NoError(t, txnErr(txnEnd(t, c, coord, 4, "tx", pid, epoch, true).ErrorCode))

	start := shareOffsets(t, newTestClient(t, c), "g", "in")[0].StartOffset
	require.ErrorIs(t, part, kerr.InvalidTxnState, "a late copy of an aborted transaction's TxnShareAcknowledge")
	require.Zero(t, start, "transaction 2 acknowledged nothing, yet records 0-%d are done", start-1)
}

// TestTxnShareAckVersion2Unsupported: key 95 v2 (and v1: the draft has v0
// only) is UNSUPPORTED_VERSION and nothing is staged.
func TestTxnShareAckVersion2Unsupported(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil)
	pid, epoch := txnInitOK(t, c, "tx")
	req := &wire.TxnShareAcknowledgeRequest{
		Version: 2, TransactionalID: "tx", GroupID: "g", MemberID: m1.id, MemberEpoch: m1.epoch,
		ProducerID: pid, ProducerEpoch: epoch,
		Topics: []wire.TxnShareAcknowledgeTopic{{TopicID: m1.topicID("in"), Partitions: []wire.TxnShareAcknowledgePartition{{
			Partition: 0, AcknowledgementBatches: []wire.TxnShareAcknowledgeBatch{{FirstOffset: 0, LastOffset: 9, AcknowledgeTypes: []wire.AckType{wire.AckAccept}}},
		}}}},
	}
	body := wireRoundTrip(t, c, m1.leader("in", 0), req)
	require.Len(t, body, 2)
	require.Equal(t, kerr.UnsupportedVersion.Code, int16(binary.BigEndian.Uint16(body)))
	req.Version = 1
	body = wireRoundTrip(t, c, m1.leader("in", 0), req)
	require.Len(t, body, 2)
	require.Equal(t, kerr.UnsupportedVersion.Code, int16(binary.BigEndian.Uint16(body)), "kshare's former v1 is gone")
	require.Equal(t, map[shareRecordState]int{shareAcquired: 10}, shareRecordStates(t, c, "g", "in", 0))
}

// TestTxnShareAckProducerMisuse: a future epoch, a producer id no
// InitProducerId gave, another producer's id, and a transactional id that
// a new producer took over, each refused with nothing staged; v1 with the
// epoch a TV2 EndTxn returned starts the next transaction.
func TestTxnShareAckProducerMisuse(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil)
	pid, epoch := txnInitOK(t, c, "tx")
	otherPid, otherEpoch := txnInitOK(t, c, "other")
	nothing := map[shareRecordState]int{shareAcquired: 10}

	_, part := m1.stageTxn("tx", pid, epoch+1, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.Error(t, part, "future epoch")
	_, part = m1.stageTxn("tx", pid+1000, 0, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.ErrorIs(t, part, kerr.InvalidProducerIDMapping)
	_, part = m1.stageTxn("never", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.ErrorIs(t, part, kerr.InvalidProducerIDMapping)
	_, part = m1.stageTxn("tx", otherPid, otherEpoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.ErrorIs(t, part, kerr.InvalidProducerIDMapping)
	require.Equal(t, nothing, shareRecordStates(t, c, "g", "in", 0))

	// A new producer takes the transactional id over: the old epoch is
	// fenced.
	newPid, newEpoch := txnInitOK(t, c, "tx")
	require.Equal(t, pid, newPid)
	require.Greater(t, newEpoch, epoch)
	_, part = m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.ErrorIs(t, part, kerr.ProducerFenced)
	require.Equal(t, nothing, shareRecordStates(t, c, "g", "in", 0))

	// Right after a TV2 commit, the new epoch starts the next
	// transaction.
	_, part = m1.stageTxn("tx", newPid, newEpoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.NoError(t, part)
	next := shareEndTxn(t, c, "tx", newPid, newEpoch, true)
	_, part = m1.stageTxn("tx", newPid, next, "in", 0, shareRange{5, 9, wire.AckAccept})
	require.NoError(t, part)
	shareEndTxn(t, c, "tx", newPid, next, false)
	require.Equal(t, map[shareRecordState]int{shareAvailable: 5}, shareRecordStates(t, c, "g", "in", 0),
		"0-4 committed, 5-9 released by the abort")
}

// TestShareTxnStagingRetryAfterLeaderMove: a TxnShareAcknowledge whose
// staging was applied and whose answer was lost is retried; between the
// two the input partition's leadership moves, so the new leader loads the
// share-partition from __share_group_state. The reload keeps each staging's
// producer epoch, so the retry is recognised and answered as success (it
// used to read INVALID_RECORD_STATE, which aborted the commit).
func TestShareTxnStagingRetryAfterLeaderMove(t *testing.T) {
	c, m1 := shareTxnSetup(t, nil)
	pid, epoch := txnInitOK(t, c, "tx")
	_, part := m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.NoError(t, part)
	// The same retry at the same leader is accepted.
	_, part = m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.NoError(t, part)

	require.NoError(t, c.MoveLeader("in", 0, txnOtherNode(c, m1.leader("in", 0))))
	_, part = m1.stageTxn("tx", pid, epoch, "in", 0, shareRange{0, 4, wire.AckAccept})
	require.NoError(t, part, "the retry of an applied staging, at the partition's new leader")
}

// txnAddOutV3 adds out/0 to tx's transaction with the client form of
// AddPartitionsToTxn (v3, TV1) and returns the partition's error.
func txnAddOutV3(t *testing.T, c *Cluster, coord int32, pid int64, epoch int16) error {
	t.Helper()
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.Version = 3
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = "tx", pid, epoch
	at := kmsg.NewAddPartitionsToTxnRequestTopic()
	at.Topic, at.Partitions = "out", []int32{0}
	add.Topics = append(add.Topics, at)
	ar := txnWire(t, c, coord, add).(*kmsg.AddPartitionsToTxnResponse)
	return txnErr(ar.Topics[0].Partitions[0].ErrorCode)
}

// TestTxnLeaderAddAfterTimeoutAbort: the refusal of a leader's add after
// a transaction version 1 end must not catch a transaction version 2
// producer whose transaction was aborted on timeout. A TV2 producer makes
// client-form adds legitimately (kgo's AddOffsetsToTxn without
// TxnOffsetCommit v5), so the transaction's version reads 0; the timeout
// abort bumps the epoch, and the producer's EndTxn v5 ABORT at the old
// epoch, the retry of that abort, hands it the new one. Nothing was ever
// sent at the new epoch: the next transaction's first Produce v12 or
// TxnShareAcknowledge starts it.
func TestTxnLeaderAddAfterTimeoutAbort(t *testing.T) {
	for _, cs := range []struct{ legacyAdd, next string }{
		{"AddOffsetsToTxn", "Produce v12"},
		{"AddOffsetsToTxn", "TxnShareAcknowledge"},
	} {
		legacyAdd := cs.legacyAdd
		t.Run(legacyAdd+" then "+cs.next, func(t *testing.T) {
			c, m1 := shareTxnSetup(t, nil)
			createTopic(t, c, "out", 1)
			coord := txnCoordinatorNode(t, c, "tx")
			pid, epoch := txnInitOK(t, c, "tx")

			require.NoError(t, txnProduce(t, c, 12, "tx", "out", 0, pid, epoch, 0, "txn1"))
			switch legacyAdd {
			case "AddOffsetsToTxn":
				req := kmsg.NewPtrAddOffsetsToTxnRequest()
				req.Version = 4
				req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = "tx", pid, epoch, "cg"
				resp := txnWire(t, c, coord, req).(*kmsg.AddOffsetsToTxnResponse)
				require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
			}

			// The transaction's timer fires as if its timeout had passed
			// (the path TestTxnTimeoutAborts takes by waiting).
			var shardErr error
			require.NoError(t, c.do(func() {
				tc := c.coordinators.txn
				sh, err := tc.shardFor(coord, "tx")
				if err != nil {
					shardErr = err
					return
				}
				tc.due(sh, "tx", time.Now().Add(time.Hour))
			}))
			require.NoError(t, shardErr)
			require.Eventually(t, func() bool { return txnDescribe(t, c, "tx").State == "CompleteAbort" },
				10*time.Second, 10*time.Millisecond, "the coordinator aborts the timed-out transaction")

			resp := txnEnd(t, c, coord, 5, "tx", pid, epoch, false)
			require.NoError(t, txnErr(resp.ErrorCode), "EndTxn v5 ABORT at the old epoch is the retry of the abort")
			next := resp.ProducerEpoch
			require.Equal(t, epoch+1, next, "the fence's epoch")

			var err error
			if cs.next == "Produce v12" {
				err = txnProduce(t, c, 12, "tx", "out", 0, pid, next, 0, "txn2")
			} else {
				// 0-4 are still held by m1; kshare classifies this
				// answer (INVALID_TXN_STATE), once confirmed, as fatal.
				_, err = m1.stageTxn("tx", pid, next, "in", 0, shareRange{0, 4, wire.AckAccept})
			}
			require.NoError(t, err, "the first %s of the next transaction, at an epoch nothing was sent at", cs.next)
		})
	}
}
