package broker

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

func TestTxnInitProducerID(t *testing.T) {
	c := newTestCluster(t, Nodes(3), MaxTransactionTimeout(time.Minute))
	const id = "init-producer-id"
	coord := txnCoordinatorNode(t, c, id)

	resp := txnInit(t, c, txnOtherNode(c, coord), id, 1000, -1, -1)
	require.ErrorIs(t, txnErr(resp.ErrorCode), kerr.NotCoordinator)
	resp = txnInit(t, c, coord, id, 61000, -1, -1)
	require.ErrorIs(t, txnErr(resp.ErrorCode), kerr.InvalidTransactionTimeout)
	resp = txnInit(t, c, coord, id, 0, -1, -1)
	require.ErrorIs(t, txnErr(resp.ErrorCode), kerr.InvalidTransactionTimeout)
	resp = txnInit(t, c, coord, "", 1000, -1, -1)
	require.ErrorIs(t, txnErr(resp.ErrorCode), kerr.InvalidRequest)

	first := txnInit(t, c, coord, id, 1000, -1, -1)
	require.NoError(t, txnErr(first.ErrorCode))
	require.GreaterOrEqual(t, first.ProducerID, int64(0))
	require.Equal(t, int16(0), first.ProducerEpoch)
	pid := first.ProducerID

	second := txnInit(t, c, coord, id, 1000, -1, -1)
	require.NoError(t, txnErr(second.ErrorCode))
	require.Equal(t, pid, second.ProducerID, "the same transactional id keeps its producer id")
	require.Equal(t, int16(1), second.ProducerEpoch)

	// KIP-360: the producer presents what it holds and gets a bump.
	bumped := txnInit(t, c, coord, id, 1000, pid, 1)
	require.NoError(t, txnErr(bumped.ErrorCode))
	require.Equal(t, int16(2), bumped.ProducerEpoch)
	// The same call again is a retry whose answer was lost.
	retried := txnInit(t, c, coord, id, 1000, pid, 1)
	require.NoError(t, txnErr(retried.ErrorCode))
	require.Equal(t, pid, retried.ProducerID)
	require.Equal(t, int16(2), retried.ProducerEpoch)

	stale := txnInit(t, c, coord, id, 1000, pid, 0)
	require.ErrorIs(t, txnErr(stale.ErrorCode), kerr.ProducerFenced)
	otherID := txnInit(t, c, coord, id, 1000, pid+100, 2)
	require.ErrorIs(t, txnErr(otherID.ErrorCode), kerr.ProducerFenced)
	half := txnInit(t, c, coord, id, 1000, pid, -1)
	require.ErrorIs(t, txnErr(half.ErrorCode), kerr.InvalidRequest)

	// Before KIP-588 (v3) a fenced producer hears INVALID_PRODUCER_EPOCH.
	v3 := kmsg.NewPtrInitProducerIDRequest()
	v3.Version = 3
	v3.TransactionalID = kmsg.StringPtr(id)
	v3.TransactionTimeoutMillis = 1000
	v3.ProducerID, v3.ProducerEpoch = pid, 0
	require.ErrorIs(t, txnErr(txnWire(t, c, coord, v3).(*kmsg.InitProducerIDResponse).ErrorCode), kerr.InvalidProducerEpoch)

	// Idempotent producers get a fresh id from any node.
	seen := map[int64]bool{pid: true}
	for node := int32(0); node < 3; node++ {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.Version = 5
		req.TransactionTimeoutMillis = -1
		req.ProducerID, req.ProducerEpoch = -1, -1
		r := txnWire(t, c, node, req).(*kmsg.InitProducerIDResponse)
		require.NoError(t, txnErr(r.ErrorCode))
		require.False(t, seen[r.ProducerID], "producer id %d handed out twice", r.ProducerID)
		seen[r.ProducerID] = true
		require.Equal(t, int16(0), r.ProducerEpoch)
	}

	st := txnDescribe(t, c, id)
	require.NoError(t, txnErr(st.ErrorCode))
	require.Equal(t, "Empty", st.State)
	require.Equal(t, pid, st.ProducerID)
	require.Equal(t, int16(2), st.ProducerEpoch)
	require.Equal(t, int32(1000), st.TimeoutMillis)
}

// TestTxnEndTxnV2Table drives every cell of the TV2 EndTxn table (see
// txn_transitions.go) against the coordinator's state machine.
func TestTxnEndTxnV2Table(t *testing.T) {
	const (
		abort  = false
		commit = true
		epoch  = int16(5)
	)
	type cell struct {
		state  txnState
		commit bool
		retry  bool
		want   *kerr.Error
		// wantEpoch is the epoch the producer continues with on success.
		wantEpoch int16
	}
	cells := []cell{
		{txnEmpty, abort, true, kerr.ProducerFenced, 0},
		{txnEmpty, abort, false, nil, epoch + 1},
		{txnEmpty, commit, true, kerr.ProducerFenced, 0},
		{txnEmpty, commit, false, kerr.InvalidTxnState, 0},
		{txnOngoing, abort, true, kerr.ProducerFenced, 0},
		{txnOngoing, abort, false, nil, epoch + 1},
		{txnOngoing, commit, true, kerr.ProducerFenced, 0},
		{txnOngoing, commit, false, nil, epoch + 1},
		{txnPrepareAbort, abort, true, kerr.ConcurrentTransactions, 0},
		{txnPrepareAbort, abort, false, kerr.ProducerFenced, 0},
		{txnPrepareAbort, commit, true, kerr.InvalidTxnState, 0},
		{txnPrepareAbort, commit, false, kerr.ProducerFenced, 0},
		{txnPrepareCommit, abort, true, kerr.InvalidTxnState, 0},
		{txnPrepareCommit, abort, false, kerr.ProducerFenced, 0},
		{txnPrepareCommit, commit, true, kerr.ConcurrentTransactions, 0},
		{txnPrepareCommit, commit, false, kerr.ProducerFenced, 0},
		{txnCompleteAbort, abort, true, nil, epoch},
		{txnCompleteAbort, abort, false, nil, epoch + 1},
		{txnCompleteAbort, commit, true, kerr.ProducerFenced, 0},
		{txnCompleteAbort, commit, false, kerr.InvalidTxnState, 0},
		{txnCompleteCommit, abort, true, kerr.InvalidTxnState, 0},
		{txnCompleteCommit, abort, false, nil, epoch + 1},
		{txnCompleteCommit, commit, true, nil, epoch},
		{txnCompleteCommit, commit, false, kerr.InvalidTxnState, 0},
	}
	c := newTestCluster(t)
	for i, cl := range cells {
		name := fmt.Sprintf("%s/commit=%v/retry=%v", cl.state, cl.commit, cl.retry)
		t.Run(name, func(t *testing.T) {
			id := fmt.Sprintf("table-%d", i)
			reqEpoch := epoch
			if cl.retry {
				reqEpoch = epoch - 1
			}
			var gotPID int64
			var gotEpoch int16
			var err *kerr.Error
			var after txnState
			require.NoError(t, c.do(func() {
				tc := c.coordinators.txn
				sh, lerr := tc.shardFor(0, id)
				require.Nil(t, lerr)
				sh.state.txns[id] = &txnMeta{
					id: id, producerID: 4242, prevProducerID: -1, nextProducerID: -1,
					epoch: epoch, lastEpoch: epoch - 1, timeoutMs: 60000, state: cl.state,
					partitions: map[txnPartition]struct{}{}, tv: txnVersion2, startMs: -1,
					pending: map[txnPartition]struct{}{}, retryAt: time.Now().Add(time.Hour),
				}
				gotPID, gotEpoch, err = tc.endTxn(0, id, 4242, reqEpoch, cl.commit, true, time.Now())
				after = sh.state.txns[id].state
			}))
			if cl.want != nil {
				require.Equal(t, cl.want, err)
				require.Equal(t, cl.state, after, "a refused EndTxn changes nothing")
				return
			}
			require.Nil(t, err)
			require.Equal(t, int64(4242), gotPID)
			require.Equal(t, cl.wantEpoch, gotEpoch)
			require.True(t, after.complete(), "the transaction completes (no partitions to mark): %s", after)
		})
	}
}

// TestTxnEndTxnV2Flow runs a TV2 producer over the wire: implicit adds,
// epoch bumps, retries and markers at the bumped epochs.
func TestTxnEndTxnV2Flow(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "flow", 1)
	const id = "flow"
	coord := txnCoordinatorNode(t, c, id)
	pid, e0 := txnInitOK(t, c, id)

	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 5, id, pid, e0, true).ErrorCode), kerr.InvalidTxnState,
		"nothing was added: an empty transaction cannot commit")
	empty := txnEnd(t, c, coord, 5, id, pid, e0, false)
	require.NoError(t, txnErr(empty.ErrorCode), "an empty transaction can abort")
	e1 := e0 + 1
	require.Equal(t, e1, empty.ProducerEpoch)
	require.Empty(t, txnMarkersIn(t, c, "flow", 0), "aborting nothing writes no marker")

	require.NoError(t, txnProduce(t, c, 12, id, "flow", 0, pid, e1, 0, "a", "b"))
	st := txnDescribe(t, c, id)
	require.Equal(t, "Ongoing", st.State)
	require.Len(t, st.Topics, 1)
	require.Equal(t, "flow", st.Topics[0].Topic)
	require.Equal(t, []int32{0}, st.Topics[0].Partitions)

	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 5, id, pid, e0, true).ErrorCode), kerr.ProducerFenced)
	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 5, id, pid+1, e1, true).ErrorCode), kerr.InvalidProducerIDMapping)
	require.ErrorIs(t, txnErr(txnEnd(t, c, txnCoordinatorNode(t, c, "never-initialized"), 5, "never-initialized", pid, e1, true).ErrorCode), kerr.InvalidProducerIDMapping)
	require.ErrorIs(t, txnErr(txnEnd(t, c, txnOtherNode(c, coord), 5, id, pid, e1, true).ErrorCode), kerr.NotCoordinator)

	committed := txnEnd(t, c, coord, 5, id, pid, e1, true)
	require.NoError(t, txnErr(committed.ErrorCode))
	e2 := e1 + 1
	require.Equal(t, pid, committed.ProducerID)
	require.Equal(t, e2, committed.ProducerEpoch)
	require.Equal(t, []string{fmt.Sprintf("COMMIT@%d", e2)}, txnMarkersIn(t, c, "flow", 0), "the marker carries the bumped epoch")
	end, lso := txnOffsets(t, c, "flow", 0)
	require.Equal(t, end, lso)
	require.Equal(t, "CompleteCommit", txnDescribe(t, c, id).State)

	retry := txnEnd(t, c, coord, 5, id, pid, e1, true)
	require.NoError(t, txnErr(retry.ErrorCode), "a retried commit succeeds")
	require.Equal(t, e2, retry.ProducerEpoch)
	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 5, id, pid, e1, false).ErrorCode), kerr.InvalidTxnState)
	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 5, id, pid, e2, true).ErrorCode), kerr.InvalidTxnState)
	require.Len(t, txnMarkersIn(t, c, "flow", 0), 1, "no answer above wrote a marker")

	// The next transaction, aborted.
	require.NoError(t, txnProduce(t, c, 12, id, "flow", 0, pid, e2, 0, "c"))
	aborted := txnEnd(t, c, coord, 5, id, pid, e2, false)
	require.NoError(t, txnErr(aborted.ErrorCode))
	require.Equal(t, e2+1, aborted.ProducerEpoch)
	require.Equal(t, []string{fmt.Sprintf("COMMIT@%d", e2), fmt.Sprintf("ABORT@%d", e2+1)}, txnMarkersIn(t, c, "flow", 0))
	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 5, id, pid, e2, true).ErrorCode), kerr.ProducerFenced,
		"a commit retried against an abort is fenced")
}

// TestTxnEndTxnV1Flow runs a TV1 producer: client AddPartitionsToTxn,
// produce below v12 (verified by the leader), EndTxn v4 without a bump.
func TestTxnEndTxnV1Flow(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "tv1", 2)
	const id = "tv1"
	coord := txnCoordinatorNode(t, c, id)
	pid, e := txnInitOK(t, c, id)

	require.Error(t, txnProduce(t, c, 11, id, "tv1", 0, pid, e, 0, "x"), "TV1: a partition not added is refused")
	end, _ := txnOffsets(t, c, "tv1", 0)
	require.Zero(t, end)

	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.Version = 3
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = id, pid, e
	at := kmsg.NewAddPartitionsToTxnRequestTopic()
	at.Topic, at.Partitions = "tv1", []int32{0, 1}
	add.Topics = append(add.Topics, at)
	addResp := txnWire(t, c, coord, add).(*kmsg.AddPartitionsToTxnResponse)
	require.Len(t, addResp.Topics, 1)
	for _, p := range addResp.Topics[0].Partitions {
		require.NoError(t, txnErr(p.ErrorCode))
	}
	require.NoError(t, txnProduce(t, c, 11, id, "tv1", 0, pid, e, 0, "x"))
	require.NoError(t, txnProduce(t, c, 11, id, "tv1", 1, pid, e, 0, "y"))

	// Old EndTxn versions hear INVALID_PRODUCER_EPOCH, newer PRODUCER_FENCED.
	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 1, id, pid, e+1, true).ErrorCode), kerr.InvalidProducerEpoch)
	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 2, id, pid, e+1, true).ErrorCode), kerr.ProducerFenced)

	resp := txnEnd(t, c, coord, 4, id, pid, e, true)
	require.NoError(t, txnErr(resp.ErrorCode))
	for p := int32(0); p < 2; p++ {
		require.Equal(t, []string{fmt.Sprintf("COMMIT@%d", e)}, txnMarkersIn(t, c, "tv1", p), "TV1 markers carry the current epoch")
	}
	require.NoError(t, txnErr(txnEnd(t, c, coord, 4, id, pid, e, true).ErrorCode), "TV1: a repeated commit succeeds")
	require.ErrorIs(t, txnErr(txnEnd(t, c, coord, 4, id, pid, e, false).ErrorCode), kerr.InvalidTxnState)
	st := txnDescribe(t, c, id)
	require.Equal(t, "CompleteCommit", st.State)
	require.Equal(t, e, st.ProducerEpoch, "TV1 never bumps")
}

func TestTxnAddPartitionsBrokerForm(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "bf", 3)
	coordOf := func(id string) int32 { return txnCoordinatorNode(t, c, id) }
	// Two ids on the same coordinator, to batch them in one request.
	ids := []string{"bf-0"}
	for i := 1; len(ids) < 2; i++ {
		if id := fmt.Sprintf("bf-%d", i); coordOf(id) == coordOf(ids[0]) {
			ids = append(ids, id)
		}
	}
	coord := coordOf(ids[0])
	pidA, eA := txnInitOK(t, c, ids[0])
	pidB, eB := txnInitOK(t, c, ids[1])

	send := func(version int16, txns ...kmsg.AddPartitionsToTxnRequestTransaction) *kmsg.AddPartitionsToTxnResponse {
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.Version = version
		req.Transactions = txns
		return txnWire(t, c, coord, req).(*kmsg.AddPartitionsToTxnResponse)
	}
	txn := func(id string, pid int64, epoch int16, verify bool, topic string, parts ...int32) kmsg.AddPartitionsToTxnRequestTransaction {
		tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
		tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly = id, pid, epoch, verify
		tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		tt.Topic, tt.Partitions = topic, parts
		tx.Topics = append(tx.Topics, tt)
		return tx
	}
	codes := func(resp *kmsg.AddPartitionsToTxnResponse) map[string][]error {
		out := map[string][]error{}
		for _, rt := range resp.Transactions {
			for _, tt := range rt.Topics {
				for _, p := range tt.Partitions {
					out[rt.TransactionalID] = append(out[rt.TransactionalID], txnErr(p.ErrorCode))
				}
			}
		}
		return out
	}

	got := codes(send(5, txn(ids[0], pidA, eA, true, "bf", 0), txn(ids[1], pidB, eB, true, "bf", 1)))
	require.ErrorIs(t, got[ids[0]][0], kerr.TransactionAbortable, "v5: a partition the client did not add")
	require.ErrorIs(t, got[ids[1]][0], kerr.TransactionAbortable)
	got = codes(send(4, txn(ids[0], pidA, eA, true, "bf", 0)))
	require.ErrorIs(t, got[ids[0]][0], kerr.InvalidTxnState, "v4 predates TRANSACTION_ABORTABLE")

	got = codes(send(5, txn(ids[0], pidA, eA, false, "bf", 0, 1), txn(ids[1], pidB, eB+1, false, "bf", 2)))
	require.Equal(t, []error{nil, nil}, got[ids[0]])
	require.ErrorIs(t, got[ids[1]][0], kerr.ProducerFenced)
	require.Equal(t, "Ongoing", txnDescribe(t, c, ids[0]).State)
	require.Equal(t, "Empty", txnDescribe(t, c, ids[1]).State)

	got = codes(send(5, txn(ids[0], pidA, eA, true, "bf", 0, 1, 2)))
	require.Equal(t, []error{nil, nil, kerr.TransactionAbortable}, got[ids[0]])

	got = codes(send(5, txn(ids[0], pidA, eA, false, "bf", 1, 7)))
	require.Equal(t, []error{kerr.OperationNotAttempted, kerr.UnknownTopicOrPartition}, got[ids[0]])
	got = codes(send(5, txn(ids[0], pidA+7, eA, false, "bf", 1)))
	require.Equal(t, []error{kerr.InvalidProducerIDMapping}, got[ids[0]])

	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 5
	req.Transactions = []kmsg.AddPartitionsToTxnRequestTransaction{txn(ids[0], pidA, eA, false, "bf", 2)}
	other := txnWire(t, c, txnOtherNode(c, coord), req).(*kmsg.AddPartitionsToTxnResponse)
	require.ErrorIs(t, txnErr(other.Transactions[0].Topics[0].Partitions[0].ErrorCode), kerr.NotCoordinator)
}

// TestTxnStateSurvivesLeadershipMove checks that a new coordinator rebuilds
// the state by replaying __transaction_state and that the old one answers
// NOT_COORDINATOR.
func TestTxnStateSurvivesLeadershipMove(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "move", 2)
	const id = "survivor"
	pid, e := txnInitOK(t, c, id)
	require.NoError(t, txnProduce(t, c, 12, id, "move", 0, pid, e, 0, "a"))
	require.NoError(t, txnProduce(t, c, 12, id, "move", 1, pid, e, 0, "b"))

	old := txnCoordinatorNode(t, c, id)
	next := txnOtherNode(c, old)
	require.NoError(t, c.MoveLeader(wire.TransactionStateTopic, c.CoordinatorPartition(coordinatorTxn, id), next))
	require.Equal(t, next, txnCoordinatorNode(t, c, id))

	st := txnDescribe(t, c, id)
	require.NoError(t, txnErr(st.ErrorCode))
	require.Equal(t, "Ongoing", st.State)
	require.Equal(t, pid, st.ProducerID)
	require.Equal(t, e, st.ProducerEpoch)
	require.Len(t, st.Topics, 1)
	require.Equal(t, []int32{0, 1}, st.Topics[0].Partitions)

	describeOld := kmsg.NewPtrDescribeTransactionsRequest()
	describeOld.TransactionalIDs = []string{id}
	oldResp := txnWire(t, c, old, describeOld).(*kmsg.DescribeTransactionsResponse)
	require.ErrorIs(t, txnErr(oldResp.TransactionStates[0].ErrorCode), kerr.NotCoordinator)
	require.ErrorIs(t, txnErr(txnEnd(t, c, old, 5, id, pid, e, true).ErrorCode), kerr.NotCoordinator)

	resp := txnEnd(t, c, next, 5, id, pid, e, true)
	require.NoError(t, txnErr(resp.ErrorCode))
	for p := int32(0); p < 2; p++ {
		require.Equal(t, []string{fmt.Sprintf("COMMIT@%d", e+1)}, txnMarkersIn(t, c, "move", p))
	}
	// The markers carry the new coordinator's epoch, which the leaders keep.
	coordEpoch := txnShardEpoch(t, c, id)
	dp := kmsg.NewPtrDescribeProducersRequest()
	dt := kmsg.NewDescribeProducersRequestTopic()
	dt.Topic, dt.Partitions = "move", []int32{0}
	dp.Topics = append(dp.Topics, dt)
	leader, err := c.Leader("move", 0)
	require.NoError(t, err)
	prod := txnWire(t, c, leader, dp).(*kmsg.DescribeProducersResponse)
	require.Len(t, prod.Topics[0].Partitions[0].ActiveProducers, 1)
	require.Equal(t, coordEpoch, prod.Topics[0].Partitions[0].ActiveProducers[0].CoordinatorEpoch)
}

// txnShardEpoch returns the coordinator epoch of txnID's current shard.
func txnShardEpoch(t testing.TB, c *Cluster, txnID string) int32 {
	t.Helper()
	var epoch int32
	require.NoError(t, c.do(func() {
		p := c.coordinatorPartitionFor(coordinatorTxn, txnID)
		sh, err := c.coordinators.txn.shards.lookup(p.leader, p.index)
		require.Nil(t, err)
		epoch = sh.epoch
	}))
	return epoch
}

// TestTxnNewLeaderCompletesPrepared plays a coordinator that wrote
// PrepareCommit and lost leadership before sending any marker: the next
// leader replays the record and completes the transaction.
func TestTxnNewLeaderCompletesPrepared(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "prep", 1)
	const id = "prepared"
	pid, e := txnInitOK(t, c, id)
	require.NoError(t, txnProduce(t, c, 12, id, "prep", 0, pid, e, 0, "a"))
	_, lso := txnOffsets(t, c, "prep", 0)
	require.Zero(t, lso, "the open transaction holds the LSO")

	require.NoError(t, c.do(func() {
		tc := c.coordinators.txn
		p := c.coordinatorPartitionFor(coordinatorTxn, id)
		sh, err := tc.shards.lookup(p.leader, p.index)
		require.Nil(t, err)
		n := sh.state.txns[id].next(time.Now())
		n.state, n.tv, n.lastEpoch, n.epoch = txnPrepareCommit, txnVersion2, e, e+1
		value, encErr := encodeTxnMeta(n)
		require.NoError(t, encErr)
		_, err = sh.append([]kv{{key: []byte(id), value: value}}, -1, -1, time.Now())
		require.Nil(t, err)
	}))
	require.Empty(t, txnMarkersIn(t, c, "prep", 0))

	old := txnCoordinatorNode(t, c, id)
	require.NoError(t, c.MoveLeader(wire.TransactionStateTopic, c.CoordinatorPartition(coordinatorTxn, id), txnOtherNode(c, old)))
	require.Eventually(t, func() bool { return txnDescribe(t, c, id).State == "CompleteCommit" }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{fmt.Sprintf("COMMIT@%d", e+1)}, txnMarkersIn(t, c, "prep", 0))
	end, lso := txnOffsets(t, c, "prep", 0)
	require.Equal(t, end, lso)
}

// TestTxnMarkerRetry checks that a marker a leader did not write stays
// pending and is sent again, and that a refused one counts as done.
func TestTxnMarkerRetry(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "retry", 2)
	const id = "retry"
	pid, e := txnInitOK(t, c, id)
	require.NoError(t, c.do(func() {
		tc := c.coordinators.txn
		m := &txnMeta{
			id: id, producerID: pid, epoch: e, state: txnPrepareCommit, tv: txnVersion2,
			pending: map[txnPartition]struct{}{{"retry", 0}: {}, {"retry", 1}: {}},
		}
		resp := kmsg.NewPtrWriteTxnMarkersResponse()
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
		rt.Topic = "retry"
		p0 := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
		p0.Partition, p0.ErrorCode = 0, kerr.NotLeaderForPartition.Code
		p1 := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
		p1.Partition, p1.ErrorCode = 1, kerr.InvalidProducerEpoch.Code
		rt.Partitions = []kmsg.WriteTxnMarkersResponseMarkerTopicPartition{p0, p1}
		rm.Topics = append(rm.Topics, rt)
		resp.Markers = append(resp.Markers, rm)
		tc.markerResults(m, resp)
		require.Equal(t, map[txnPartition]struct{}{{"retry", 0}: {}}, m.pending)
	}))

	// A real pending marker: prepared with one partition whose marker was
	// not written yet; the sweep sends it and completes the transaction.
	require.NoError(t, txnProduce(t, c, 12, id, "retry", 0, pid, e, 0, "a"))
	require.NoError(t, c.do(func() {
		tc := c.coordinators.txn
		sh, err := tc.shardFor(txnCoordinatorNodeLocked(c, id), id)
		require.Nil(t, err)
		n := sh.state.txns[id].next(time.Now())
		n.state, n.tv, n.lastEpoch, n.epoch = txnPrepareAbort, txnVersion2, e, e+1
		require.Nil(t, tc.persist(sh, n, time.Now()))
		n.pending = map[txnPartition]struct{}{{"retry", 0}: {}}
		n.retryAt = time.Now()
	}))
	require.Eventually(t, func() bool { return txnDescribe(t, c, id).State == "CompleteAbort" }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{fmt.Sprintf("ABORT@%d", e+1)}, txnMarkersIn(t, c, "retry", 0))
}

// txnCoordinatorNodeLocked is txnCoordinatorNode for code already on the loop.
func txnCoordinatorNodeLocked(c *Cluster, txnID string) int32 {
	return c.coordinatorPartitionFor(coordinatorTxn, txnID).leader
}

func TestTxnRecordRoundTrip(t *testing.T) {
	m := &txnMeta{
		id: "rt", producerID: 7, prevProducerID: 3, nextProducerID: -1, epoch: 9, lastEpoch: 8,
		timeoutMs: 1234, state: txnPrepareAbort, tv: txnVersion2, startMs: 55, updateMs: 66,
		partitions: map[txnPartition]struct{}{{"a", 1}: {}, {"a", 0}: {}, {"b", 3}: {}},
	}
	value, err := encodeTxnMeta(m)
	require.NoError(t, err)
	back, err := decodeTxnMeta("rt", value)
	require.NoError(t, err)
	require.Equal(t, m, back)

	_, err = decodeTxnMeta("bad", []byte(`{"state":"Sleeping"}`))
	require.ErrorContains(t, err, "unknown state")
	_, err = decodeTxnMeta("bad", []byte(`not json`))
	require.Error(t, err)
}

func TestTxnEpochExhaustion(t *testing.T) {
	require.False(t, epochExhausted(math.MaxInt16-2))
	require.True(t, epochExhausted(math.MaxInt16-1))
	require.True(t, epochExhausted(math.MaxInt16))
}
