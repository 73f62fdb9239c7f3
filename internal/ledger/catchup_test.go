package ledger_test

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/ledger"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
)

// ledgerWithWriter is a bundled cluster of nodes nodes without KIP-1289,
// a resolver of ledger "claims" (group "g") that created it with
// partitions partitions, and a transactional client that writes to it.
func ledgerWithWriter(t *testing.T, nodes int, partitions int32) (*broker.Cluster, *ledger.Resolver, int32, *kgo.Client) {
	t.Helper()
	c := bundled.Cluster(t, broker.Nodes(nodes), broker.ShareTxnAPIs(false))
	r := ledger.NewResolver(testkit.Client(t, c.Bootstrap()), "claims", "g", testkit.Logger())
	n, err := r.Ensure(testkit.Context(t), true, partitions)
	require.NoError(t, err)
	w := testkit.Client(t, c.Bootstrap(), kgo.TransactionalID("w"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	return c, r, n, w
}

// One CatchUp of ledger partitions led by several nodes reads each
// partition's claims with one Fetch and one ListOffsets per leader, not a
// round trip per partition: what a Poll of records from many input
// partitions costs.
func TestCatchUpOneRoundTripPerLeader(t *testing.T) {
	c, r, n, w := ledgerWithWriter(t, 3, 8)
	ctx := testkit.Context(t)
	var recs []*kgo.Record
	var inputs []ledger.Input
	parts := make(map[int32]bool)
	for p := int32(0); len(parts) < int(n); p++ {
		in := ledger.Input{Group: "g", TopicID: inputID, Partition: p}
		if parts[in.LedgerPartition(n)] {
			continue
		}
		parts[in.LedgerPartition(n)] = true
		inputs = append(inputs, in)
		recs = append(recs, claimRecord(t, "claims", n, ledger.Claim{Group: "g", TopicID: inputID, Partition: p, TransactionalID: "w",
			Ranges: []ledger.Range{{First: 0, Last: 9, Type: ledger.TypeAccept}}}))
	}
	writeInTxn(ctx, t, w, true, recs...)
	leaders := make(map[int32]bool)
	var list []int32
	for p := range parts {
		list = append(list, p)
		leader, err := c.Leader("claims", p)
		require.NoError(t, err)
		leaders[leader] = true
	}
	require.Greater(t, len(leaders), 1, "the ledger's partitions are led by several nodes")

	log := bundled.ObserveRequests(t, c)
	require.NoError(t, r.CatchUp(ctx, list))
	for _, in := range inputs {
		typ, ok := r.Lookup(in, 9)
		require.True(t, ok, "the claim of input partition %d was read", in.Partition)
		require.Equal(t, ledger.TypeAccept, typ)
	}
	require.Len(t, log.Of(kmsg.Fetch.Int16()), len(leaders), "one Fetch per leader")
	require.Len(t, log.Of(kmsg.ListOffsets.Int16()), len(leaders), "one ListOffsets per leader")
	require.Empty(t, log.Of(kmsg.Metadata.Int16()), "no metadata round trip")
}

// A Fetch answer whose high watermark lags the claims a previous leader
// acknowledged (a leader just elected learns the mark from its followers)
// does not end the read: the mark is what ListOffsets reports, and the
// reader fetches on until it passes it. A reader that took the Fetch's
// high watermark as its mark would stop short and miss the claim.
func TestCatchUpMarkIsNotAFetchHighWatermark(t *testing.T) {
	c, r, n, w := ledgerWithWriter(t, 1, 1)
	ctx := testkit.Context(t)
	in := ledger.Input{Group: "g", TopicID: inputID, Partition: 0}
	writeInTxn(ctx, t, w, true, claimRecord(t, "claims", n, ledger.Claim{Group: "g", TopicID: inputID, Partition: 0, TransactionalID: "w",
		Ranges: []ledger.Range{{First: 0, Last: 4, Type: ledger.TypeReject}}}))

	// The first Fetch answers as a lagging new leader would: nothing
	// visible, the high watermark at the fetch offset.
	var lagged atomic.Int32
	stop := c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if _, ok := req.(*kmsg.FetchRequest); !ok || !lagged.CompareAndSwap(0, 1) {
			return broker.FaultAction{}
		}
		return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
			for i := range resp.(*kmsg.FetchResponse).Topics {
				t := &resp.(*kmsg.FetchResponse).Topics[i]
				for j := range t.Partitions {
					p := &t.Partitions[j]
					p.HighWatermark, p.LastStableOffset, p.RecordBatches, p.AbortedTransactions = 0, 0, nil, nil
				}
			}
		}}
	})
	defer stop()
	require.NoError(t, r.CatchUp(ctx, []int32{in.LedgerPartition(n)}))
	require.Equal(t, int32(1), lagged.Load(), "the lagging answer was given")
	typ, ok := r.Lookup(in, 2)
	require.True(t, ok, "the claim below the ListOffsets mark was read")
	require.Equal(t, ledger.TypeReject, typ)
}
