package broker

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestTxnTimeoutAborts leaves a transaction open past its timeout: the
// coordinator fences the producer and aborts it, as Kafka does.
func TestTxnTimeoutAborts(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "slow", 1)
	const id = "slow"
	coord := txnCoordinatorNode(t, c, id)
	init := txnInit(t, c, coord, id, 100, -1, -1)
	require.NoError(t, txnErr(init.ErrorCode))
	pid, e := init.ProducerID, init.ProducerEpoch
	require.NoError(t, txnProduce(t, c, 12, id, "slow", 0, pid, e, 0, "late-1", "late-2"))

	require.Eventually(t, func() bool { return txnDescribe(t, c, id).State == "CompleteAbort" },
		10*time.Second, 10*time.Millisecond, "the coordinator aborts the transaction after its timeout")
	st := txnDescribe(t, c, id)
	require.Equal(t, e+1, st.ProducerEpoch, "fenced once; the abort keeps the fenced epoch, as in Kafka 4.4")
	require.Equal(t, []string{fmt.Sprintf("ABORT@%d", e+1)}, txnMarkersIn(t, c, "slow", 0))
	end, lso := txnOffsets(t, c, "slow", 0)
	require.Equal(t, end, lso, "nothing holds the LSO any more")
	require.NoError(t, c.do(func() {
		require.Len(t, c.partitionOf("slow", 0).abortedIn(0, end), 1, "read_committed readers skip the batch")
	}))

	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 5, id, pid, e, true).ErrorCode), kerr.ProducerFenced,
		"the timed-out producer cannot commit")
	require.Error(t, txnProduce(t, c, 12, id, "slow", 0, pid, e, 2, "after"), "nor write")
	end2, _ := txnOffsets(t, c, "slow", 0)
	require.Equal(t, end, end2)
}

// TestTxnProducerFencing starts a second producer with the same
// transactional id while the first one is in a transaction.
func TestTxnProducerFencing(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "fence", 2)
	const id = "fence"
	coord := txnCoordinatorNode(t, c, id)
	pid, e := txnInitOK(t, c, id)
	require.NoError(t, txnProduce(t, c, 12, id, "fence", 0, pid, e, 0, "zombie"))

	busy := txnInit(t, c, coord, id, 60000, -1, -1)
	require.ErrorIs(t, txnErr(busy.ErrorCode), kerr.ConcurrentTransactions,
		"the new producer waits while the old transaction is aborted")
	require.Equal(t, []string{fmt.Sprintf("ABORT@%d", e+1)}, txnMarkersIn(t, c, "fence", 0))
	fresh := txnInit(t, c, coord, id, 60000, -1, -1)
	require.NoError(t, txnErr(fresh.ErrorCode))
	require.Equal(t, pid, fresh.ProducerID)
	require.Equal(t, e+2, fresh.ProducerEpoch, "the fence's epoch, bumped once more")

	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 5, id, pid, e, true).ErrorCode), kerr.ProducerFenced)
	require.Error(t, txnProduce(t, c, 12, id, "fence", 1, pid, e, 0, "zombie-2"))
	require.ErrorIs(t, txnErr(txnInit(t, c, coord, id, 60000, pid, e).ErrorCode), kerr.ProducerFenced,
		"the old producer cannot reclaim the id with its old epoch")

	ne := fresh.ProducerEpoch
	require.NoError(t, txnProduce(t, c, 12, id, "fence", 1, pid, ne, 0, "fresh"))
	resp := txnEnd(t, c, coord, 5, id, pid, ne, true)
	require.NoError(t, txnErr(resp.ErrorCode))
	require.Equal(t, []string{fmt.Sprintf("COMMIT@%d", ne+1)}, txnMarkersIn(t, c, "fence", 1))
}

// TestTxnProducerIDExhaustionEndTxn runs TV2 transactions up to the last
// epoch: the EndTxn whose bump would exhaust the epoch writes its markers
// at 32767 and hands the producer a new id at epoch 0 (KIP-890).
func TestTxnProducerIDExhaustionEndTxn(t *testing.T) {
	c := newTestCluster(t, Nodes(2), FirstProducerEpoch(math.MaxInt16-2))
	createTopic(t, c, "exhaust", 1)
	const id = "exhaust"
	coord := txnCoordinatorNode(t, c, id)
	pid, e := txnInitOK(t, c, id)
	require.Equal(t, int16(math.MaxInt16-2), e)

	require.NoError(t, txnProduce(t, c, 12, id, "exhaust", 0, pid, e, 0, "a"))
	first := txnEnd(t, c, coord, 5, id, pid, e, true)
	require.NoError(t, txnErr(first.ErrorCode))
	require.Equal(t, pid, first.ProducerID)
	require.Equal(t, int16(math.MaxInt16-1), first.ProducerEpoch)

	require.NoError(t, txnProduce(t, c, 12, id, "exhaust", 0, pid, math.MaxInt16-1, 0, "b"))
	last := txnEnd(t, c, coord, 5, id, pid, math.MaxInt16-1, true)
	require.NoError(t, txnErr(last.ErrorCode))
	require.NotEqual(t, pid, last.ProducerID, "a new producer id")
	require.Equal(t, int16(0), last.ProducerEpoch)
	require.Equal(t, []string{
		fmt.Sprintf("COMMIT@%d", math.MaxInt16-1),
		fmt.Sprintf("COMMIT@%d", math.MaxInt16),
	}, txnMarkersIn(t, c, "exhaust", 0), "the last markers of the old id carry epoch 32767")
	newPID := last.ProducerID

	retry := txnEnd(t, c, coord, 5, id, pid, math.MaxInt16-1, true)
	require.NoError(t, txnErr(retry.ErrorCode), "a retry across the rotation succeeds")
	require.Equal(t, newPID, retry.ProducerID)
	require.Equal(t, int16(0), retry.ProducerEpoch)
	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 5, id, pid, math.MaxInt16-1, false).ErrorCode), kerr.InvalidTxnState)
	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 5, id, pid, math.MaxInt16, true).ErrorCode), kerr.InvalidProducerIDMapping)

	st := txnDescribe(t, c, id)
	require.Equal(t, "CompleteCommit", st.State)
	require.Equal(t, newPID, st.ProducerID)
	require.Equal(t, int16(0), st.ProducerEpoch)

	require.NoError(t, txnProduce(t, c, 12, id, "exhaust", 0, newPID, 0, 0, "c"))
	next := txnEnd(t, c, coord, 5, id, newPID, 0, true)
	require.NoError(t, txnErr(next.ErrorCode))
	require.Equal(t, newPID, next.ProducerID)
	require.Equal(t, int16(1), next.ProducerEpoch)
	end, lso := txnOffsets(t, c, "exhaust", 0)
	require.Equal(t, end, lso)
}

// TestTxnProducerIDExhaustionInit exhausts the epoch through
// InitProducerId: the id rotates, and a KIP-360 retry of the rotating call
// gets the same answer.
func TestTxnProducerIDExhaustionInit(t *testing.T) {
	c := newTestCluster(t, FirstProducerEpoch(math.MaxInt16-1))
	const id = "exhaust-init"
	pid, e := txnInitOK(t, c, id)
	require.Equal(t, int16(math.MaxInt16-1), e)

	rotated := txnInit(t, c, 0, id, 60000, pid, e)
	require.NoError(t, txnErr(rotated.ErrorCode))
	require.NotEqual(t, pid, rotated.ProducerID)
	require.Equal(t, int16(0), rotated.ProducerEpoch)

	again := txnInit(t, c, 0, id, 60000, pid, e)
	require.NoError(t, txnErr(again.ErrorCode), "the retry of the rotating call")
	require.Equal(t, rotated.ProducerID, again.ProducerID)
	require.Equal(t, int16(0), again.ProducerEpoch)

	bumped := txnInit(t, c, 0, id, 60000, rotated.ProducerID, 0)
	require.NoError(t, txnErr(bumped.ErrorCode))
	require.Equal(t, rotated.ProducerID, bumped.ProducerID)
	require.Equal(t, int16(1), bumped.ProducerEpoch)
}
