package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/eos"
	"github.com/kshare-go/kshare/wire"
)

// oldNode is the node the mixed-version runs make old (OldNodes).
const oldNode = 2

// Late marker copies arrive when the producer's next transaction first
// writes to one of their partitions (LateMarkerCopiesOnNextTransaction),
// or lateCopyBound after the original: they meet an open transaction
// whatever the machine's speed. (Copies sent a fixed 100ms late met one
// only when the timing allowed: the pacing of the loop changed, and runs
// on the mixed cluster passed without a violation.)
const lateCopyBound = 5 * time.Second

// heldTxns keep every transaction open for long; 5000 records take about
// 20 seconds that way, in short and full runs alike.
var heldTxns = pipelineShape{txnSize: 50, hold: 250 * time.Millisecond, records: 5000}

// prepareMixedCluster leaves the old node leading only output partitions
// (even ones), so that the only markers it ever checks are those of the
// pipeline's output: every internal partition (transaction coordinators,
// share coordinators) and the input move to the new nodes.
func prepareMixedCluster(t *testing.T, c *broker.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, topic := range []string{"input", "output"} {
		resp, err := adm.CreateTopic(ctx, 6, 1, nil, topic)
		require.NoError(t, err)
		require.NoError(t, resp.Err)
	}
	for p := int32(0); p < 6; p++ {
		require.NoError(t, c.MoveLeader("input", p, p%2))
		to := int32(oldNode)
		if p%2 == 1 {
			to = p % 4 / 2 // nodes 0 and 1
		}
		require.NoError(t, c.MoveLeader("output", p, to))
	}
	for _, topic := range []string{wire.TransactionStateTopic, wire.ConsumerOffsetsTopic, wire.ShareGroupStateTopic} {
		for p := int32(0); ; p++ {
			leader, err := c.Leader(topic, p)
			if err != nil {
				break
			}
			if leader == oldNode {
				require.NoError(t, c.MoveLeader(topic, p, p%2))
			}
		}
	}
}

// TestMixedVersionClusterExactlyOnce runs the exactly-once pipeline with
// late marker copies and deliberate aborts (the run in which the legacy
// marker rule breaks exactly-once) on a cluster mid-upgrade, where one
// node predates KIP-1228 and the transaction coordinators fall back to v1
// markers there, and on a cluster of new nodes. The checker must report
// the violation on the mixed cluster, and only in output partitions the
// old node leads (the consequence KIP-1228 documents), while the cluster
// of new nodes stays exactly-once.
func TestMixedVersionClusterExactlyOnce(t *testing.T) {
	for _, mixed := range []bool{true, false} {
		name := "all new"
		opts := []broker.Opt{broker.LateMarkerCopiesOnNextTransaction(lateCopyBound)}
		if mixed {
			name = "node 2 old"
			opts = append(opts, broker.OldNodes(oldNode))
		}
		t.Run(name, func(t *testing.T) {
			if !mixed {
				c := pipelineCluster(t, opts...)
				prepareMixedCluster(t, c)
				requireExactlyOnce(t, runPipelineOn(t, c, eos.Faults{AbortEvery: 2}, heldTxns), true, "deliberate_abort")
				return
			}
			// A violation needs a late copy to meet a transaction that
			// then ends the other way; on a loaded machine a run can
			// pass without one (CI once went four attempts without).
			// Each attempt is a fresh cluster; the checker must see the
			// violation in one of them, and only where the old node
			// leads.
			const attempts = 8
			var sum eos.Summary
			var c *broker.Cluster
			for i := range attempts {
				c = pipelineCluster(t, opts...)
				prepareMixedCluster(t, c)
				sum = runPipelineOn(t, c, eos.Faults{AbortEvery: 2}, heldTxns)
				if !sum.OK {
					break
				}
				t.Logf("attempt %d: no late marker met an open transaction that then ended the other way", i+1)
			}
			// A late COMMIT copy commits what transaction N+1 wrote
			// there so far (N+1 then aborts: duplicates); a late ABORT
			// copy aborts it (N+1 then commits its acknowledgements:
			// missing outputs). Both can only happen where the old node
			// leads.
			require.False(t, sum.OK, "a late marker must have met an open transaction at the old node")
			require.Positive(t, sum.Duplicates+sum.Missing)
			violated := map[int32]bool{}
			for p := range sum.DuplicatesByPartition {
				violated[p] = true
			}
			for p := range sum.MissingByPartition {
				violated[p] = true
			}
			require.NotEmpty(t, violated)
			for p := range violated {
				leader, err := c.Leader("output", p)
				require.NoError(t, err)
				require.Equal(t, int32(oldNode), leader, "a violation in output partition %d, which a new node leads", p)
			}
			t.Logf("violations only where the old node leads: duplicates %v, missing %v", sum.DuplicatesByPartition, sum.MissingByPartition)
		})
	}
}
