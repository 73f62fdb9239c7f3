package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// rawErrorCode sends req to node and returns the first int16 of the answer
// after the correlation id: the error code of an UNSUPPORTED_VERSION
// answer (for other answers, whatever their body starts with).
func rawErrorCode(t testing.TB, c *Cluster, node int32, req kmsg.Request) int16 {
	t.Helper()
	body := wireRoundTrip(t, c, node, req)
	require.GreaterOrEqual(t, len(body), 2)
	return int16(binary.BigEndian.Uint16(body))
}

// markerVersionsSeen records, per node, the WriteTxnMarkers versions it
// received and how many internal ApiVersions requests asked it.
type markerVersionsSeen struct {
	mu       sync.Mutex
	versions map[int32]map[int16]int
	asked    map[int32]int
}

func observeMarkerVersions(t *testing.T, c *Cluster) *markerVersionsSeen {
	s := &markerVersionsSeen{versions: map[int32]map[int16]int{}, asked: map[int32]int{}}
	stop := c.ObserveRequests(func(node int32, req kmsg.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch r := req.(type) {
		case *kmsg.WriteTxnMarkersRequest:
			if s.versions[node] == nil {
				s.versions[node] = map[int16]int{}
			}
			s.versions[node][r.Version]++
		case *kmsg.ApiVersionsRequest:
			if r.ClientSoftwareName == "kshare-broker" {
				s.asked[node]++
			}
		}
	})
	t.Cleanup(stop)
	return s
}

func (s *markerVersionsSeen) take() (map[int32]map[int16]int, map[int32]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, a := s.versions, s.asked
	s.versions, s.asked = map[int32]map[int16]int{}, map[int32]int{}
	return v, a
}

// pinLeaders makes node i lead partition i of topic.
func pinLeaders(t testing.TB, c *Cluster, topic string, n int32) {
	t.Helper()
	for p := int32(0); p < n; p++ {
		require.NoError(t, c.MoveLeader(topic, p, p%int32(len(c.nodes))))
	}
}

// TestMixedVersionsAdvertiseAndRefuse: an old node advertises
// WriteTxnMarkers up to v1 and refuses v2; new nodes serve v2.
func TestMixedVersionsAdvertiseAndRefuse(t *testing.T) {
	c := newTestCluster(t, Nodes(3), OldNodes(2))
	for _, node := range c.NodeIDs() {
		resp := txnWire(t, c, node, kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
		max := int16(-1)
		for _, k := range resp.ApiKeys {
			if k.ApiKey == 27 {
				max = k.MaxVersion
			}
		}
		want := int16(2)
		if node == 2 {
			want = 1
		}
		require.Equal(t, want, max, "node %d", node)
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = 2
	require.Equal(t, kerr.UnsupportedVersion.Code, rawErrorCode(t, c, 2, req), "an old node refuses v2")
	require.NotEqual(t, kerr.UnsupportedVersion.Code, rawErrorCode(t, c, 1, req), "a new node serves it")
	req.Version = 1
	require.NotEqual(t, kerr.UnsupportedVersion.Code, rawErrorCode(t, c, 2, req))

	_, err := NewCluster(Nodes(2), OldNodes(2))
	require.ErrorContains(t, err, "OldNodes(2)")
}

// TestMixedVersionsMarkerFallback: the coordinator asks each leader its
// versions once with ApiVersions and sends v2 markers to new leaders and
// v1 to the old one; a coordinator on the old node sends v1 everywhere.
func TestMixedVersionsMarkerFallback(t *testing.T) {
	c := newTestCluster(t, Nodes(3), OldNodes(2))
	createTopic(t, c, "mixed", 3)
	pinLeaders(t, c, "mixed", 3)
	seen := observeMarkerVersions(t, c)

	run := func(id string, coordinator int32) {
		t.Helper()
		require.NoError(t, c.MoveLeader(wire.TransactionStateTopic, c.CoordinatorPartition(coordinatorTxn, id), coordinator))
		for range 2 {
			pid, epoch := txnInitOK(t, c, id)
			for p := int32(0); p < 3; p++ {
				require.NoError(t, txnProduce(t, c, 12, id, "mixed", p, pid, epoch, 0, "v"))
			}
			require.NoError(t, txnErr(txnEnd(t, c, coordinator, 5, id, pid, epoch, true).ErrorCode))
		}
	}

	run("mixed-new-coordinator", 0)
	versions, asked := seen.take()
	require.Equal(t, map[int16]int{2: 2}, versions[1], "a new leader gets v2")
	require.Equal(t, map[int16]int{1: 2}, versions[2], "the old leader gets v1")
	require.Equal(t, 2, versions[0][2], "node 0, new, leads partition 0 (and the transaction's own state)")
	require.Zero(t, versions[0][1])
	require.Equal(t, 1, asked[1], "ApiVersions once per leader, then cached")
	require.Equal(t, 1, asked[2])

	run("mixed-old-coordinator", 2)
	versions, _ = seen.take()
	for node, vs := range versions {
		require.Zero(t, vs[2], "a coordinator on the old node sends v1 everywhere (node %d got %v)", node, vs)
	}
	require.Positive(t, versions[0][1])
	require.Positive(t, versions[1][1])
	for p := int32(0); p < 3; p++ {
		end, lso := txnOffsets(t, c, "mixed", p)
		require.Equal(t, end, lso, "every transaction completed at partition %d", p)
	}
}

// TestMixedVersionsLateMarker: with LateMarkerCopies, the late copy of
// transaction N's commit marker reaches both leaders while N+1 is open:
// the new leader refuses it (strict rule), the old one writes it and ends
// N+1 early there (legacy rule), the consequence KIP-1228 documents for
// clusters mid-upgrade.
func TestMixedVersionsLateMarker(t *testing.T) {
	c := newTestCluster(t, Nodes(3), OldNodes(2), LateMarkerCopies(500*time.Millisecond))
	createTopic(t, c, "late-mixed", 3)
	pinLeaders(t, c, "late-mixed", 3)
	const id = "late-mixed"
	require.NoError(t, c.MoveLeader(wire.TransactionStateTopic, c.CoordinatorPartition(coordinatorTxn, id), 0))

	var mu sync.Mutex
	copies := map[int32]int{} // marker requests for the topic, by node
	stop := c.ObserveRequests(func(node int32, req kmsg.Request) {
		if wr, ok := req.(*kmsg.WriteTxnMarkersRequest); ok && len(wr.Markers) > 0 && len(wr.Markers[0].Topics) > 0 && wr.Markers[0].Topics[0].Topic == "late-mixed" {
			mu.Lock()
			copies[node]++
			mu.Unlock()
		}
	})
	defer stop()

	pid, e := txnInitOK(t, c, id)
	for _, p := range []int32{1, 2} {
		require.NoError(t, txnProduce(t, c, 12, id, "late-mixed", p, pid, e, 0, "n"))
	}
	resp := txnEnd(t, c, 0, 5, id, pid, e, true)
	require.NoError(t, txnErr(resp.ErrorCode))
	epoch := resp.ProducerEpoch
	firsts := map[int32]int64{}
	for _, p := range []int32{1, 2} {
		firsts[p], _ = txnOffsets(t, c, "late-mixed", p)
		require.NoError(t, txnProduce(t, c, 12, id, "late-mixed", p, pid, epoch, 0, "n+1"))
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return copies[1] == 2 && copies[2] == 2
	}, 10*time.Second, 10*time.Millisecond, "the markers and their late copies")
	require.NoError(t, c.do(func() {})) // a copy is handled in the loop turn that observed it

	end1, lso1 := txnOffsets(t, c, "late-mixed", 1)
	require.Equal(t, firsts[1], lso1, "the new leader refused the late copy: N+1 is still open")
	require.Less(t, lso1, end1)
	end2, lso2 := txnOffsets(t, c, "late-mixed", 2)
	require.Equal(t, end2, lso2, "the old leader wrote the late copy: N+1 ended there early")
	require.Equal(t, []string{fmt.Sprintf("COMMIT@%d", epoch), fmt.Sprintf("COMMIT@%d", epoch)}, txnMarkersIn(t, c, "late-mixed", 2))
	require.Equal(t, []string{fmt.Sprintf("COMMIT@%d", epoch)}, txnMarkersIn(t, c, "late-mixed", 1))

	// N+1 aborts: the new leader discards N+1's record; at the old leader
	// it was already committed, and the abort cannot take it back.
	require.NoError(t, txnErr(txnEnd(t, c, 0, 5, id, pid, epoch, false).ErrorCode))
	require.NoError(t, c.do(func() {
		require.Len(t, c.partitionOf("late-mixed", 1).abortedIn(firsts[1], firsts[1]), 1, "aborted at the new leader")
		require.Empty(t, c.partitionOf("late-mixed", 2).abortedIn(firsts[2], firsts[2]), "committed early at the old one")
	}))
}

// TestAPIVersionCap: capped nodes advertise and serve only the versions
// they are left with, a cap below the oldest version removes the key, and
// caps on unknown keys or nodes are refused.
func TestAPIVersionCap(t *testing.T) {
	c := newTestCluster(t, Nodes(3),
		APIVersionCap(kmsg.EndTxn.Int16(), 4, 2),
		APIVersionCap(wire.TxnShareAcknowledgeKey, -1, 1))
	maxOf := func(node int32, key int16) int16 {
		resp := txnWire(t, c, node, kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
		for _, k := range resp.ApiKeys {
			if k.ApiKey == key {
				return k.MaxVersion
			}
		}
		return -1
	}
	require.Equal(t, int16(5), maxOf(0, kmsg.EndTxn.Int16()))
	require.Equal(t, int16(4), maxOf(2, kmsg.EndTxn.Int16()))
	require.Equal(t, wire.TxnShareAcknowledgeMaxVersion, maxOf(0, wire.TxnShareAcknowledgeKey))
	require.Equal(t, int16(-1), maxOf(1, wire.TxnShareAcknowledgeKey), "a cap below v0 removes the key")

	req := kmsg.NewPtrEndTxnRequest()
	req.Version = 5
	require.Equal(t, kerr.UnsupportedVersion.Code, rawErrorCode(t, c, 2, req), "a capped node refuses v5")
	require.NotEqual(t, kerr.UnsupportedVersion.Code, rawErrorCode(t, c, 0, req))

	all := newTestCluster(t, Nodes(2), APIVersionCap(kmsg.EndTxn.Int16(), 4))
	for _, node := range all.NodeIDs() {
		resp := txnWire(t, all, node, kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
		for _, k := range resp.ApiKeys {
			if k.ApiKey == kmsg.EndTxn.Int16() {
				require.Equal(t, int16(4), k.MaxVersion, "no node named: every node is capped")
			}
		}
	}

	_, err := NewCluster(Nodes(2), APIVersionCap(wire.TxnShareAcknowledgeKey, 0, 2))
	require.ErrorContains(t, err, "APIVersionCap(95, nodes 2)")
	_, err = NewCluster(APIVersionCap(9999, 0))
	require.ErrorContains(t, err, "does not serve API key 9999")
}

// TestAPIVersionCapRefusesInterBrokerKeys: the nodes send each other
// AddPartitionsToTxn (v5, transaction verification) and WriteTxnMarkers;
// a cap on either would leave transactions waiting for ever (EndTxn
// answered, markers never written; every transactional write answered
// NOT_ENOUGH_REPLICAS), so NewCluster refuses it.
func TestAPIVersionCapRefusesInterBrokerKeys(t *testing.T) {
	for _, opt := range []Opt{
		APIVersionCap(writeTxnMarkersKey, -1, 1),
		APIVersionCap(writeTxnMarkersKey, 1),
		APIVersionCap(kmsg.AddPartitionsToTxn.Int16(), 3),
	} {
		_, err := NewCluster(Nodes(3), opt)
		require.ErrorContains(t, err, "send API key")
	}
}

// TestAPIVersionCapOnApiVersionsIsHarmless: APIVersionCap(18, -1) is
// accepted: a node that "serves no ApiVersions" still answers the v0
// fallback listing its keys, and clients connect.
func TestAPIVersionCapOnApiVersionsIsHarmless(t *testing.T) {
	c := newTestCluster(t, Nodes(1), APIVersionCap(18, -1))
	cl := newTestClient(t, c)
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()
	require.NoError(t, cl.Ping(ctx))
}
