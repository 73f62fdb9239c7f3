package broker

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTxnProduceVerifiesOnlyTheFirstBatch: a leader asks the transaction
// coordinator about a partition once per transaction, for its first batch
// there, as Kafka's leaders do; the next transaction (a new epoch under
// transaction version 2) asks again, and a late batch of the ended
// transaction is checked, and refused, rather than waved through.
func TestTxnProduceVerifiesOnlyTheFirstBatch(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "out", 1)
	var asks atomic.Int64
	stop := c.ObserveRequests(func(_ int32, req kmsg.Request) {
		if a, ok := req.(*kmsg.AddPartitionsToTxnRequest); ok && a.Version >= 4 {
			asks.Add(1)
		}
	})
	t.Cleanup(stop)
	pid, epoch := txnInitOK(t, c, "tx")

	require.NoError(t, txnProduce(t, c, 12, "tx", "out", 0, pid, epoch, 0, "a"))
	require.EqualValues(t, 1, asks.Load(), "the first batch adds the partition")
	require.NoError(t, txnProduce(t, c, 12, "tx", "out", 0, pid, epoch, 1, "b"))
	require.NoError(t, txnProduce(t, c, 12, "tx", "out", 0, pid, epoch, 2, "c"))
	require.EqualValues(t, 1, asks.Load(), "later batches of the open transaction are not asked about")

	resp := txnEnd(t, c, txnCoordinatorNode(t, c, "tx"), 5, "tx", pid, epoch, true)
	require.NoError(t, txnErr(resp.ErrorCode))
	require.ErrorIs(t, txnProduce(t, c, 12, "tx", "out", 0, pid, epoch, 3, "late"), kerr.InvalidProducerEpoch,
		"a batch of the ended transaction is asked about, and refused")
	require.EqualValues(t, 2, asks.Load())

	require.NoError(t, txnProduce(t, c, 12, "tx", "out", 0, resp.ProducerID, resp.ProducerEpoch, 0, "next"))
	require.EqualValues(t, 3, asks.Load(), "the next transaction's first batch is asked about")
}
