package broker

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// txnWire sends req, at exactly the version it carries, to node over a new
// TCP connection and returns the decoded response. Tests use it where the
// version matters (kgo always picks the highest one).
func txnWire(t testing.TB, c *Cluster, node int32, req kmsg.Request) kmsg.Response {
	t.Helper()
	return decodeWireResponse(t, req, wireRoundTrip(t, c, node, req))
}

// decodeWireResponse decodes the answer to req from its frame after the
// correlation id.
func decodeWireResponse(t testing.TB, req kmsg.Request, body []byte) kmsg.Response {
	t.Helper()
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != 18 {
		r := kbin.Reader{Src: body}
		skipTags(&r)
		require.True(t, r.Ok())
		body = r.Src
	}
	require.NoError(t, resp.ReadFrom(body), "decoding %s v%d response", wire.NameForKey(req.Key()), req.GetVersion())
	return resp
}

// wireRoundTrip sends req to node on a new connection and returns the
// answer's frame after its correlation id.
func wireRoundTrip(t testing.TB, c *Cluster, node int32, req kmsg.Request) []byte {
	t.Helper()
	conn, err := net.DialTimeout("tcp", c.nodes[node].addr(), 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	return wireExchange(t, conn, 7, req)
}

// wireExchange sends req on conn with correlation id corr and returns the
// answer's frame after the correlation id.
func wireExchange(t testing.TB, conn net.Conn, corr int32, req kmsg.Request) []byte {
	t.Helper()
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err := conn.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("txn-test")).AppendRequest(nil, req, corr))
	require.NoError(t, err)
	var size [4]byte
	_, err = io.ReadFull(conn, size[:])
	require.NoError(t, err)
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err = io.ReadFull(conn, frame)
	require.NoError(t, err)
	require.Equal(t, corr, int32(binary.BigEndian.Uint32(frame)))
	return frame[4:]
}

// wireConn is one raw connection to a node that stays open across
// requests, as a share session's must: the broker releases a session's
// records when the connection that opened it closes. The test closes it.
type wireConn struct {
	t    testing.TB
	conn net.Conn
	corr int32
}

// dialWire opens a kept connection to node.
func dialWire(t testing.TB, c *Cluster, node int32) *wireConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", c.nodes[node].addr(), 5*time.Second)
	require.NoError(t, err)
	w := &wireConn{t: t, conn: conn}
	t.Cleanup(w.close)
	return w
}

// send sends req and decodes its answer.
func (w *wireConn) send(req kmsg.Request) kmsg.Response {
	w.t.Helper()
	w.corr++
	return decodeWireResponse(w.t, req, wireExchange(w.t, w.conn, w.corr, req))
}

func (w *wireConn) close() { _ = w.conn.Close() }

// txnErr turns an error code into the kerr error (nil for none), so tests
// compare names rather than numbers.
func txnErr(code int16) error { return kerr.ErrorForCode(code) }

// txnCoordinatorNode returns the node leading txnID's __transaction_state
// partition.
func txnCoordinatorNode(t testing.TB, c *Cluster, txnID string) int32 {
	t.Helper()
	leader, err := c.Leader(wire.TransactionStateTopic, c.CoordinatorPartition(coordinatorTxn, txnID))
	require.NoError(t, err)
	return leader
}

// txnOtherNode returns a node other than n.
func txnOtherNode(c *Cluster, n int32) int32 { return (n + 1) % int32(len(c.nodes)) }

// txnInit sends InitProducerId v5 to node.
func txnInit(t testing.TB, c *Cluster, node int32, txnID string, timeoutMs int32, pid int64, epoch int16) *kmsg.InitProducerIDResponse {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version = 5
	req.TransactionalID = &txnID
	req.TransactionTimeoutMillis = timeoutMs
	req.ProducerID, req.ProducerEpoch = pid, epoch
	return txnWire(t, c, node, req).(*kmsg.InitProducerIDResponse)
}

// txnInitOK initializes txnID at its coordinator and returns its id and epoch.
func txnInitOK(t testing.TB, c *Cluster, txnID string) (int64, int16) {
	t.Helper()
	resp := txnInit(t, c, txnCoordinatorNode(t, c, txnID), txnID, 60000, -1, -1)
	require.NoError(t, txnErr(resp.ErrorCode))
	return resp.ProducerID, resp.ProducerEpoch
}

// txnProduce writes a transactional batch of values to topic/partition at
// its leader with produce v12 (the leader adds the partition, TV2) or
// below (the leader only verifies, TV1). It returns the partition's error.
func txnProduce(t testing.TB, c *Cluster, version int16, txnID, topic string, partition int32, pid int64, epoch int16, seq int32, values ...string) error {
	t.Helper()
	leader, err := c.Leader(topic, partition)
	require.NoError(t, err)
	recs := make([]kv, len(values))
	for i, v := range values {
		recs[i] = kv{value: []byte(v)}
	}
	req := kmsg.NewPtrProduceRequest()
	req.Version = version
	req.TransactionID = &txnID
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = buildBatch(recs, pid, epoch, seq, true, false, time.Now())
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := txnWire(t, c, leader, req).(*kmsg.ProduceResponse)
	require.Len(t, resp.Topics, 1)
	require.Len(t, resp.Topics[0].Partitions, 1)
	return txnErr(resp.Topics[0].Partitions[0].ErrorCode)
}

// txnEnd sends EndTxn at version to node.
func txnEnd(t testing.TB, c *Cluster, node int32, version int16, txnID string, pid int64, epoch int16, commit bool) *kmsg.EndTxnResponse {
	t.Helper()
	req := kmsg.NewPtrEndTxnRequest()
	req.Version = version
	req.TransactionalID = txnID
	req.ProducerID, req.ProducerEpoch = pid, epoch
	req.Commit = commit
	return txnWire(t, c, node, req).(*kmsg.EndTxnResponse)
}

// txnMarker sends one WriteTxnMarkers marker for topic/partition to its
// leader and returns the partition's error.
func txnMarker(t testing.TB, c *Cluster, version int16, tv int8, topic string, partition int32, pid int64, epoch int16, commit bool, coordinatorEpoch int32) error {
	t.Helper()
	leader, err := c.Leader(topic, partition)
	require.NoError(t, err)
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = version
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed = pid, epoch, commit
	m.CoordinatorEpoch = coordinatorEpoch
	m.TransactionVersion = tv
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic = topic
	mt.Partitions = []int32{partition}
	m.Topics = append(m.Topics, mt)
	req.Markers = append(req.Markers, m)
	resp := txnWire(t, c, leader, req).(*kmsg.WriteTxnMarkersResponse)
	require.Len(t, resp.Markers, 1)
	require.Len(t, resp.Markers[0].Topics, 1)
	require.Len(t, resp.Markers[0].Topics[0].Partitions, 1)
	return txnErr(resp.Markers[0].Topics[0].Partitions[0].ErrorCode)
}

// txnOffsets returns a partition's log end offset and last stable offset.
func txnOffsets(t testing.TB, c *Cluster, topic string, partition int32) (end, lso int64) {
	t.Helper()
	require.NoError(t, c.do(func() {
		p := c.partitionOf(topic, partition)
		end, lso = p.endOffset(), p.lastStableOffset()
	}))
	return end, lso
}

// txnDescribe describes txnID at its coordinator.
func txnDescribe(t testing.TB, c *Cluster, txnID string) kmsg.DescribeTransactionsResponseTransactionState {
	t.Helper()
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{txnID}
	resp := txnWire(t, c, txnCoordinatorNode(t, c, txnID), req).(*kmsg.DescribeTransactionsResponse)
	require.Len(t, resp.TransactionStates, 1)
	return resp.TransactionStates[0]
}

// txnMarkersIn returns the control records of a partition in offset order,
// as "COMMIT@epoch" or "ABORT@epoch".
func txnMarkersIn(t testing.TB, c *Cluster, topic string, partition int32) []string {
	t.Helper()
	var out []string
	require.NoError(t, c.do(func() {
		for _, b := range c.partitionOf(topic, partition).batches {
			if !b.control {
				continue
			}
			recs, err := decodeRecords(b.raw)
			if err != nil || len(recs) != 1 || len(recs[0].key) < 4 {
				out = append(out, "CORRUPT")
				continue
			}
			typ := "ABORT"
			if binary.BigEndian.Uint16(recs[0].key[2:]) == uint16(controlCommit) {
				typ = "COMMIT"
			}
			out = append(out, fmt.Sprintf("%s@%d", typ, b.epoch))
		}
	}))
	return out
}
