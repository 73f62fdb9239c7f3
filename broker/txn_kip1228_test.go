package broker

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// txnCommittedThenNext commits transaction N of a fresh TV2 producer on
// topic/0 and opens transaction N+1 there. It returns the producer id, the
// epoch of N+1 (the epoch N's markers carry) and the offsets of N+1's
// first record.
func txnCommittedThenNext(t *testing.T, c *Cluster, id, topic string) (pid int64, epoch int16, nextFirst int64) {
	t.Helper()
	pid, e := txnInitOK(t, c, id)
	require.NoError(t, txnProduce(t, c, 12, id, topic, 0, pid, e, 0, "n-1", "n-2"))
	resp := txnEnd(t, c, txnCoordinatorNode(t, c, id), 5, id, pid, e, true)
	require.NoError(t, txnErr(resp.ErrorCode))
	epoch = resp.ProducerEpoch
	require.Equal(t, e+1, epoch)
	nextFirst, _ = txnOffsets(t, c, topic, 0)
	require.NoError(t, txnProduce(t, c, 12, id, topic, 0, pid, epoch, 0, "n+1"))
	if c.cfg.lateCopiesOnNext > 0 && c.cfg.legacyMarkerValidation {
		return pid, epoch, nextFirst // the copy that N+1's write called has already ended it
	}
	_, lso := txnOffsets(t, c, topic, 0)
	require.Equal(t, nextFirst, lso, "transaction N+1 is open and holds the LSO")
	return pid, epoch, nextFirst
}

// KIP-1228 case 1: a late TV2 marker (a copy of N's commit) reaching the
// leader after N+1 began is refused, writes nothing and leaves N+1 intact.
func TestTxnKIP1228LateMarkerRefused(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "late", 1)
	const id = "late"
	pid, epoch, nextFirst := txnCommittedThenNext(t, c, id, "late")
	coordEpoch := txnShardEpoch(t, c, id)
	end, _ := txnOffsets(t, c, "late", 0)
	markers := txnMarkersIn(t, c, "late", 0)

	err := txnMarker(t, c, 2, txnVersion2, "late", 0, pid, epoch, true, coordEpoch)
	require.ErrorIs(t, err, kerr.InvalidProducerEpoch)
	end2, lso := txnOffsets(t, c, "late", 0)
	require.Equal(t, end, end2, "nothing written")
	require.Equal(t, nextFirst, lso, "transaction N+1 is still open")
	require.Equal(t, markers, txnMarkersIn(t, c, "late", 0))

	resp := txnEnd(t, c, txnCoordinatorNode(t, c, id), 5, id, pid, epoch, true)
	require.NoError(t, txnErr(resp.ErrorCode), "N+1 still commits")
	end3, lso3 := txnOffsets(t, c, "late", 0)
	require.Equal(t, end3, lso3)
	require.Equal(t, append(markers, fmt.Sprintf("COMMIT@%d", epoch+1)), txnMarkersIn(t, c, "late", 0))
}

// KIP-1228 case 2: a duplicate TV2 marker with no open transaction is an
// already-written marker: success, written once.
func TestTxnKIP1228DuplicateMarkerWrittenOnce(t *testing.T) {
	c := newTestCluster(t, Nodes(2))
	createTopic(t, c, "dup", 1)
	const id = "dup"
	pid, e := txnInitOK(t, c, id)
	require.NoError(t, txnProduce(t, c, 12, id, "dup", 0, pid, e, 0, "a"))
	resp := txnEnd(t, c, txnCoordinatorNode(t, c, id), 5, id, pid, e, true)
	require.NoError(t, txnErr(resp.ErrorCode))
	end, _ := txnOffsets(t, c, "dup", 0)

	for i := 0; i < 3; i++ {
		require.NoError(t, txnMarker(t, c, 2, txnVersion2, "dup", 0, pid, resp.ProducerEpoch, true, txnShardEpoch(t, c, id)))
	}
	end2, lso := txnOffsets(t, c, "dup", 0)
	require.Equal(t, end, end2, "the duplicates wrote nothing")
	require.Equal(t, end2, lso)
	require.Equal(t, []string{fmt.Sprintf("COMMIT@%d", e+1)}, txnMarkersIn(t, c, "dup", 0))
}

// KIP-1228 case 3: v0/v1 requests and TV0/TV1 markers keep the legacy rule
// (markerEpoch >= current): an equal epoch is written even with a
// transaction open, an older one is refused. A TV2 marker in a v2 request
// is held to the strict rule for contrast.
func TestTxnKIP1228LegacyRuleForOldMarkers(t *testing.T) {
	cases := []struct {
		name    string
		version int16
		tv      int8
	}{
		{"v0", 0, 0},
		{"v1", 1, 0},
		{"v2-tv0", 2, 0},
		{"v2-tv1", 2, 1},
	}
	c := newTestCluster(t, Nodes(2))
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topic := fmt.Sprintf("legacy-%d", i)
			createTopic(t, c, topic, 1)
			id := "legacy-" + tc.name
			pid, e := txnInitOK(t, c, id)
			require.NoError(t, txnProduce(t, c, 12, id, topic, 0, pid, e, 0, "open"))
			coordEpoch := txnShardEpoch(t, c, id)
			end, lso := txnOffsets(t, c, topic, 0)
			require.Less(t, lso, end)

			require.ErrorIs(t, txnMarker(t, c, 2, txnVersion2, topic, 0, pid, e, true, coordEpoch), kerr.InvalidProducerEpoch,
				"strict rule: equal epoch with an open transaction")
			require.ErrorIs(t, txnMarker(t, c, tc.version, tc.tv, topic, 0, pid, e-1, true, coordEpoch), kerr.InvalidProducerEpoch,
				"legacy rule: an older epoch is refused")
			end2, _ := txnOffsets(t, c, topic, 0)
			require.Equal(t, end, end2)

			require.NoError(t, txnMarker(t, c, tc.version, tc.tv, topic, 0, pid, e, true, coordEpoch),
				"legacy rule: an equal epoch is accepted")
			end3, lso3 := txnOffsets(t, c, topic, 0)
			require.Equal(t, end+1, end3, "the marker was written")
			require.Equal(t, end3, lso3)
			require.Equal(t, []string{fmt.Sprintf("COMMIT@%d", e)}, txnMarkersIn(t, c, topic, 0))
		})
	}
}

// KIP-1228 case 4: under LegacyMarkerValidation the late TV2 marker of case
// 1 is accepted and ends transaction N+1 behind the coordinator's back: the
// gap the KIP closes.
func TestTxnKIP1228LegacyValidationAcceptsLateMarker(t *testing.T) {
	c := newTestCluster(t, Nodes(3), LegacyMarkerValidation(true))
	createTopic(t, c, "gap", 1)
	const id = "gap"
	pid, epoch, _ := txnCommittedThenNext(t, c, id, "gap")
	end, _ := txnOffsets(t, c, "gap", 0)

	require.NoError(t, txnMarker(t, c, 2, txnVersion2, "gap", 0, pid, epoch, true, txnShardEpoch(t, c, id)))
	end2, lso := txnOffsets(t, c, "gap", 0)
	require.Equal(t, end+1, end2, "the late marker was written")
	require.Equal(t, end2, lso, "and committed N+1's record early")
	require.Equal(t, "Ongoing", txnDescribe(t, c, id).State, "while the coordinator still has N+1 open")
}

// TestTxnLateMarkerCopies uses the LateMarkerCopies switch (a copy 500ms
// late) and LateMarkerCopiesOnNextTransaction (a copy when N+1 first
// writes to the partition): the copy of N's commit marker arrives while
// N+1 is open. Strict leaders refuse it; with LegacyMarkerValidation it is
// written, the fault KIP-1228 guards against.
func TestTxnLateMarkerCopies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		copies Opt
		legacy bool
	}{
		{"fixed delay, strict", LateMarkerCopies(500 * time.Millisecond), false},
		{"fixed delay, legacy", LateMarkerCopies(500 * time.Millisecond), true},
		{"on the next transaction, strict", LateMarkerCopiesOnNextTransaction(time.Minute), false},
		{"on the next transaction, legacy", LateMarkerCopiesOnNextTransaction(time.Minute), true},
	} {
		legacy := tc.legacy
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, Nodes(2), tc.copies, LegacyMarkerValidation(legacy))
			createTopic(t, c, "copies", 1)
			const id = "copies"

			var mu sync.Mutex
			var copies []bool // per marker request seen for the topic: was N+1 open at the leader?
			stop := c.ObserveRequests(func(_ int32, req kmsg.Request) {
				wr, ok := req.(*kmsg.WriteTxnMarkersRequest)
				if !ok || len(wr.Markers) == 0 || len(wr.Markers[0].Topics) == 0 || wr.Markers[0].Topics[0].Topic != "copies" {
					return
				}
				ps := c.partitionOf("copies", 0).producers[wr.Markers[0].ProducerID]
				mu.Lock()
				copies = append(copies, ps != nil && ps.txnFirst >= 0)
				mu.Unlock()
			})
			defer stop()

			pid, epoch, nextFirst := txnCommittedThenNext(t, c, id, "copies")
			end := nextFirst + 1 // N+1's one record, before any copy
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(copies) == 2
			}, 10*time.Second, 10*time.Millisecond, "the original marker request and its late copy")
			require.NoError(t, c.do(func() {})) // the copy is handled in the loop turn that observed it
			mu.Lock()
			require.Equal(t, []bool{true, true}, copies, "both arrived while a transaction was open (N, then N+1)")
			mu.Unlock()

			end2, lso := txnOffsets(t, c, "copies", 0)
			if legacy {
				require.Equal(t, end+1, end2, "the late copy was written")
				require.Equal(t, end2, lso, "N+1 ended early")
				return
			}
			require.Equal(t, end, end2, "the late copy was refused")
			require.Equal(t, nextFirst, lso, "N+1 is intact")
			require.NoError(t, txnErr(txnEnd(t, c, txnCoordinatorNode(t, c, id), 5, id, pid, epoch, false).ErrorCode))
			_, lso2 := txnOffsets(t, c, "copies", 0)
			require.Greater(t, lso2, nextFirst)
			require.NoError(t, c.do(func() {
				require.Len(t, c.partitionOf("copies", 0).abortedIn(nextFirst, nextFirst), 1, "N+1 was aborted by its own marker")
			}))
		})
	}
}

// TestTxnKAFKA21181 reproduces KAFKA-21181's sequence with raw requests:
// transaction N commits on coordinator A, __transaction_state moves to B,
// N+1's data goes through B (the leader's implicit add), and the producer,
// which had no reason to look the coordinator up again, sends
// EndTxn(COMMIT) to A.
func TestTxnKAFKA21181(t *testing.T) {
	for _, legacy := range []bool{true, false} {
		t.Run(fmt.Sprintf("legacyStaleCoordinator=%v", legacy), func(t *testing.T) {
			opts := []Opt{Nodes(3)}
			if legacy {
				opts = append(opts, LegacyStaleCoordinator(time.Hour))
			}
			c := newTestCluster(t, opts...)
			createTopic(t, c, "k21181", 1)
			const id = "k21181"
			a := txnCoordinatorNode(t, c, id)
			pid, e := txnInitOK(t, c, id)
			require.NoError(t, txnProduce(t, c, 12, id, "k21181", 0, pid, e, 0, "n"))
			n := txnEnd(t, c, a, 5, id, pid, e, true)
			require.NoError(t, txnErr(n.ErrorCode))
			epoch := n.ProducerEpoch

			b := txnOtherNode(c, a)
			require.NoError(t, c.MoveLeader(wire.TransactionStateTopic, c.CoordinatorPartition(coordinatorTxn, id), b))
			require.NoError(t, txnProduce(t, c, 12, id, "k21181", 0, pid, epoch, 0, "n+1"))
			require.Equal(t, "Ongoing", txnDescribe(t, c, id).State, "B has N+1 open")
			end, lso := txnOffsets(t, c, "k21181", 0)
			require.Less(t, lso, end)

			stale := txnEnd(t, c, a, 5, id, pid, epoch, true)
			if legacy {
				require.ErrorIs(t, txnErr(stale.ErrorCode), kerr.InvalidTxnState,
					"A answers from its cache: COMPLETE_COMMIT + COMMIT at the current epoch")
				require.Equal(t, "Ongoing", txnDescribe(t, c, id).State, "N+1 stays open on B")
				end2, lso2 := txnOffsets(t, c, "k21181", 0)
				require.Equal(t, end, end2)
				require.Equal(t, lso, lso2)
				return
			}
			require.ErrorIs(t, txnErr(stale.ErrorCode), kerr.NotCoordinator, "A checks its leadership first")
			resp := txnEnd(t, c, b, 5, id, pid, epoch, true)
			require.NoError(t, txnErr(resp.ErrorCode), "the commit succeeds on B")
			require.Equal(t, epoch+1, resp.ProducerEpoch)
			end2, lso2 := txnOffsets(t, c, "k21181", 0)
			require.Equal(t, end2, lso2)
			require.Equal(t, "CompleteCommit", txnDescribe(t, c, id).State)
		})
	}
}
