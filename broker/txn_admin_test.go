package broker

import (
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// txnList sends ListTransactions to every node and merges the answers.
func txnList(t testing.TB, c *Cluster, build func(*kmsg.ListTransactionsRequest)) ([]string, []string) {
	t.Helper()
	var ids, unknown []string
	for node := int32(0); node < int32(len(c.nodes)); node++ {
		req := kmsg.NewPtrListTransactionsRequest()
		req.Version = 2
		build(req)
		resp := txnWire(t, c, node, req).(*kmsg.ListTransactionsResponse)
		require.NoError(t, txnErr(resp.ErrorCode))
		for _, st := range resp.TransactionStates {
			ids = append(ids, st.TransactionalID+"="+st.TransactionState)
		}
		unknown = resp.UnknownStateFilters
	}
	sort.Strings(ids)
	return ids, unknown
}

func TestTxnListAndDescribe(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "listed", 2)
	pidA, eA := txnInitOK(t, c, "list-a")
	require.NoError(t, txnProduce(t, c, 12, "list-a", "listed", 0, pidA, eA, 0, "x"))
	pidB, eB := txnInitOK(t, c, "list-b")
	require.NoError(t, txnProduce(t, c, 12, "list-b", "listed", 1, pidB, eB, 0, "y"))
	require.NoError(t, txnErr(txnEnd(t, c, txnCoordinatorNode(t, c, "list-b"), 5, "list-b", pidB, eB, true).ErrorCode))
	txnInitOK(t, c, "other-c")

	all, _ := txnList(t, c, func(*kmsg.ListTransactionsRequest) {})
	require.Equal(t, []string{"list-a=Ongoing", "list-b=CompleteCommit", "other-c=Empty"}, all)

	ongoing, unknown := txnList(t, c, func(r *kmsg.ListTransactionsRequest) {
		r.StateFilters = []string{"Ongoing", "Bogus", "PrepareEpochFence"}
	})
	require.Equal(t, []string{"list-a=Ongoing"}, ongoing)
	require.Equal(t, []string{"Bogus"}, unknown, "PrepareEpochFence is a name Kafka knows")

	byPID, _ := txnList(t, c, func(r *kmsg.ListTransactionsRequest) { r.ProducerIDFilters = []int64{pidB} })
	require.Equal(t, []string{"list-b=CompleteCommit"}, byPID)

	byPattern, _ := txnList(t, c, func(r *kmsg.ListTransactionsRequest) { r.TransactionalIDPattern = kmsg.StringPtr("list-.") })
	require.Equal(t, []string{"list-a=Ongoing", "list-b=CompleteCommit"}, byPattern)
	partial, _ := txnList(t, c, func(r *kmsg.ListTransactionsRequest) { r.TransactionalIDPattern = kmsg.StringPtr("list") })
	require.Empty(t, partial, "the pattern must match the whole id")

	long, _ := txnList(t, c, func(r *kmsg.ListTransactionsRequest) { r.DurationFilterMillis = 3_600_000 })
	require.Equal(t, []string{"other-c=Empty"}, long, "only transactions started over an hour ago (Kafka counts never-started ones)")

	bad := kmsg.NewPtrListTransactionsRequest()
	bad.Version = 2
	bad.TransactionalIDPattern = kmsg.StringPtr("(")
	require.ErrorIs(t, txnErr(txnWire(t, c, 0, bad).(*kmsg.ListTransactionsResponse).ErrorCode), kerr.InvalidRegularExpression)

	st := txnDescribe(t, c, "list-a")
	require.NoError(t, txnErr(st.ErrorCode))
	require.Equal(t, "Ongoing", st.State)
	require.Equal(t, pidA, st.ProducerID)
	require.Positive(t, st.StartTimestamp)
	require.Equal(t, []kmsg.DescribeTransactionsResponseTransactionStateTopic{{Topic: "listed", Partitions: []int32{0}}},
		st.Topics)
	require.ErrorIs(t, txnErr(txnDescribe(t, c, "never-seen").ErrorCode), kerr.TransactionalIDNotFound)
	empty := kmsg.NewPtrDescribeTransactionsRequest()
	empty.TransactionalIDs = []string{""}
	require.ErrorIs(t, txnErr(txnWire(t, c, 0, empty).(*kmsg.DescribeTransactionsResponse).TransactionStates[0].ErrorCode),
		kerr.InvalidRequest)
}

func TestTxnDescribeProducers(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "producers", 1)
	pid, e := txnInitOK(t, c, "described")
	require.NoError(t, txnProduce(t, c, 12, "described", "producers", 0, pid, e, 0, "a", "b", "c"))
	leader, err := c.Leader("producers", 0)
	require.NoError(t, err)

	describe := func(node int32, topic string, partition int32) kmsg.DescribeProducersResponseTopicPartition {
		req := kmsg.NewPtrDescribeProducersRequest()
		rt := kmsg.NewDescribeProducersRequestTopic()
		rt.Topic, rt.Partitions = topic, []int32{partition}
		req.Topics = append(req.Topics, rt)
		resp := txnWire(t, c, node, req).(*kmsg.DescribeProducersResponse)
		return resp.Topics[0].Partitions[0]
	}
	got := describe(leader, "producers", 0)
	require.NoError(t, txnErr(got.ErrorCode))
	require.Len(t, got.ActiveProducers, 1)
	ap := got.ActiveProducers[0]
	require.Equal(t, pid, ap.ProducerID)
	require.Equal(t, int32(e), ap.ProducerEpoch)
	require.Equal(t, int32(2), ap.LastSequence)
	require.Equal(t, int64(0), ap.CurrentTxnStartOffset)
	require.Positive(t, ap.LastTimestamp)

	require.NoError(t, txnErr(txnEnd(t, c, txnCoordinatorNode(t, c, "described"), 5, "described", pid, e, false).ErrorCode))
	ap = describe(leader, "producers", 0).ActiveProducers[0]
	require.Equal(t, int64(-1), ap.CurrentTxnStartOffset, "the abort closed the transaction")
	require.Equal(t, int32(e+1), ap.ProducerEpoch, "the marker's epoch")

	require.ErrorIs(t, txnErr(describe(txnOtherNode(c, leader), "producers", 0).ErrorCode), kerr.NotLeaderForPartition)
	require.ErrorIs(t, txnErr(describe(leader, "producers", 9).ErrorCode), kerr.UnknownTopicOrPartition)
	require.ErrorIs(t, txnErr(describe(leader, "missing", 0).ErrorCode), kerr.UnknownTopicOrPartition)
}

func TestTxnAddOffsetsToTxn(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	const id, group = "offsets", "offsets-group"
	coord := txnCoordinatorNode(t, c, id)
	pid, e := txnInitOK(t, c, id)
	add := func(version int16, epoch int16) error {
		req := kmsg.NewPtrAddOffsetsToTxnRequest()
		req.Version = version
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = id, pid, epoch, group
		return txnErr(txnWire(t, c, coord, req).(*kmsg.AddOffsetsToTxnResponse).ErrorCode)
	}
	require.ErrorIs(t, add(1, e+1), kerr.InvalidProducerEpoch)
	require.ErrorIs(t, add(2, e+1), kerr.ProducerFenced)
	require.NoError(t, add(3, e))

	offsetsPartition := c.CoordinatorPartition(coordinatorGroup, group)
	st := txnDescribe(t, c, id)
	require.Equal(t, "Ongoing", st.State)
	require.Equal(t, []kmsg.DescribeTransactionsResponseTransactionStateTopic{
		{Topic: wire.ConsumerOffsetsTopic, Partitions: []int32{offsetsPartition}},
	}, st.Topics)
	require.NoError(t, txnErr(txnEnd(t, c, coord, 3, id, pid, e, true).ErrorCode))
	require.Equal(t, []string{fmt.Sprintf("COMMIT@%d", e)}, txnMarkersIn(t, c, wire.ConsumerOffsetsTopic, offsetsPartition),
		"the group coordinator's partition gets the marker")
}
