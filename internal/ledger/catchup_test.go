package ledger_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/ledger"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
)

// rangesOfReference is RangesOf as it was before the fast path: the last
// type given for an offset wins, only accept and reject are kept, runs
// of one type merged.
func rangesOfReference(offsets []int64, types []int8) []ledger.Range {
	last := make(map[int64]int8, len(offsets))
	for i, o := range offsets {
		last[o] = types[i]
	}
	var sorted []int64
	for o, t := range last {
		if t == ledger.TypeAccept || t == ledger.TypeReject {
			sorted = append(sorted, o)
		}
	}
	slices.Sort(sorted)
	var out []ledger.Range
	for _, o := range sorted {
		t := last[o]
		if n := len(out); n > 0 && out[n-1].Last == o-1 && out[n-1].Type == t {
			out[n-1].Last = o
			continue
		}
		out = append(out, ledger.Range{First: o, Last: o, Type: t})
	}
	return out
}

// RangesOf answers as the reference does, on sorted unique offsets (the
// fast path), sorted offsets with repeats, and unsorted ones.
func TestRangesOfMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		n := rng.IntN(20)
		offs := make([]int64, n)
		typs := make([]int8, n)
		base := int64(rng.IntN(5))
		for j := range offs {
			switch i % 3 {
			case 0: // sorted, unique
				base += 1 + int64(rng.IntN(2))
				offs[j] = base
			case 1: // sorted, may repeat
				base += int64(rng.IntN(2))
				offs[j] = base
			default:
				offs[j] = int64(rng.IntN(12))
			}
			typs[j] = int8(rng.IntN(5)) // 0..4: gap, accept, release, reject, renew
		}
		in := slices.Clone(offs)
		it := slices.Clone(typs)
		want := rangesOfReference(offs, typs)
		got := ledger.RangesOf(offs, typs)
		require.Equal(t, want, got, "offsets %v types %v", in, it)
		require.Equal(t, in, offs, "RangesOf must not change its input")
		require.Equal(t, it, typs, "RangesOf must not change its input")
	}
}

// ledgerHolds makes a fault hook that holds every ListOffsets and Fetch
// of topic (by name or id) until release is closed, and counts those it
// held.
func ledgerHolds(ctx context.Context, topic string, id [16]byte, release <-chan struct{}, held *atomic.Int32) broker.FaultHook {
	return func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		hit := false
		switch r := req.(type) {
		case *kmsg.ListOffsetsRequest:
			for _, t := range r.Topics {
				hit = hit || t.Topic == topic
			}
		case *kmsg.FetchRequest:
			for _, t := range r.Topics {
				hit = hit || t.Topic == topic || t.TopicID == id
			}
		}
		if hit {
			held.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return broker.FaultAction{}
	}
}

// While CatchUp waits for the network (here: an open transaction that
// wrote a claim before its mark), Lookup, Claimed, PartitionOf, Stats,
// Prune, PruneGroup and Truncate are not held up by it (mu is released),
// and none of them corrupts what CatchUp then reads (run with -race).
func TestResolverUsableDuringCatchUp(t *testing.T) {
	c := bundled.Cluster(t, broker.ShareTxnAPIs(false))
	ctx := testkit.Context(t)
	cl := testkit.Client(t, c.Bootstrap())
	r := ledger.NewResolver(cl, "claims", "g", testkit.Logger())
	n, err := r.Ensure(ctx, true, 4)
	require.NoError(t, err)
	w := testkit.Client(t, c.Bootstrap(), kgo.TransactionalID("w"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	in := ledger.Input{Group: "g", TopicID: inputID, Partition: 1}
	part := r.PartitionOf(in)
	require.Equal(t, in.LedgerPartition(n), part)
	first := ledger.Claim{Group: "g", TopicID: inputID, Partition: 1, TransactionalID: "w", Ranges: []ledger.Range{{First: 0, Last: 4, Type: ledger.TypeAccept}}}
	writeInTxn(ctx, t, w, true, claimRecord(t, "claims", n, first))
	all := make([]int32, n)
	for i := range all {
		all[i] = int32(i)
	}
	require.NoError(t, r.CatchUp(ctx, all))

	// An open transaction's claim holds the next CatchUp back.
	require.NoError(t, w.BeginTransaction())
	late := ledger.Claim{Group: "g", TopicID: inputID, Partition: 1, TransactionalID: "w", Ranges: []ledger.Range{{First: 5, Last: 9, Type: ledger.TypeReject}}}
	require.NoError(t, w.ProduceSync(ctx, claimRecord(t, "claims", n, late)).FirstErr())
	done := make(chan error, 1)
	go func() { done <- r.CatchUp(ctx, all) }()

	var wg sync.WaitGroup
	others := make(chan string, 16)
	run := func(name string, f func()) {
		wg.Go(func() { f(); others <- name })
	}
	run("Lookup", func() { _, _ = r.Lookup(in, 2) })
	run("Claimed", func() { _ = r.Claimed(in, 0, 100) })
	run("PartitionOf", func() { _ = r.PartitionOf(in) })
	run("Stats", func() { _ = r.Stats() })
	run("Prune", func() { r.Prune(ledger.Input{Group: "g", TopicID: inputID, Partition: 3}, 0) })
	run("PruneGroup", func() { _ = r.PruneGroup(ctx, "g") }) // the group does not exist: an error, nothing changes
	run("Truncate", func() { _ = r.Truncate(ctx) })
	for range 7 {
		select {
		case name := <-others:
			t.Logf("%s returned while CatchUp waits", name)
		case err := <-done:
			t.Fatalf("CatchUp returned (%v) while a transaction that wrote before its mark was open", err)
		case <-ctx.Done():
			t.Fatal("a Resolver call waited for CatchUp's network wait")
		}
	}
	wg.Wait()
	select {
	case err := <-done:
		t.Fatalf("CatchUp returned (%v) while the transaction was open", err)
	default:
	}
	require.NoError(t, w.EndTransaction(ctx, kgo.TryCommit))
	require.NoError(t, <-done)
	typ, ok := r.Lookup(in, 7)
	require.True(t, ok, "the claim committed after the mark was read")
	require.Equal(t, ledger.TypeReject, typ)
	require.Equal(t, []ledger.Range{{First: 0, Last: 4, Type: ledger.TypeAccept}, {First: 5, Last: 9, Type: ledger.TypeReject}}, r.Claimed(in, 0, 100))
}

// A CatchUp whose ctx ends while the ledger's leader holds its requests
// returns ErrAbortable, promptly, and leaves the Resolver usable: the
// next CatchUp reads on.
func TestCatchUpCtxEndsWhileRequestsHeld(t *testing.T) {
	c := bundled.Cluster(t, broker.ShareTxnAPIs(false))
	ctx := testkit.Context(t)
	cl := testkit.Client(t, c.Bootstrap())
	r := ledger.NewResolver(cl, "claims", "g", testkit.Logger())
	n, err := r.Ensure(ctx, true, 2)
	require.NoError(t, err)
	md, err := kadm.NewClient(cl).ListTopics(ctx, "claims")
	require.NoError(t, err)
	id := md["claims"].ID

	release := make(chan struct{})
	var held atomic.Int32
	stop := c.InjectFaults(ledgerHolds(ctx, "claims", id, release, &held))
	defer stop()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.CatchUp(cctx, []int32{0, 1}) }()
	testkit.Eventually(ctx, t, "the ledger requests are held", func() bool { return held.Load() >= 2 })
	cancel()
	err = <-done
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
	stop()
	close(release)

	w := testkit.Client(t, c.Bootstrap(), kgo.TransactionalID("w"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	in := ledger.Input{Group: "g", TopicID: inputID, Partition: 0}
	writeInTxn(ctx, t, w, true, claimRecord(t, "claims", n, ledger.Claim{Group: "g", TopicID: inputID, Partition: 0, TransactionalID: "w", Ranges: []ledger.Range{{First: 3, Last: 3, Type: ledger.TypeAccept}}}))
	require.NoError(t, r.CatchUp(ctx, []int32{0, 1}))
	_, ok := r.Lookup(in, 3)
	require.True(t, ok)
}

// Several ledger partitions on one leader, each truncated by another
// reader past this reader's position: one CatchUp over all of them skips
// each to its log start (OFFSET_OUT_OF_RANGE in a multi-partition Fetch)
// and reads the claims after it.
func TestCatchUpOutOfRangeSeveralPartitions(t *testing.T) {
	c := bundled.Cluster(t, broker.ShareTxnAPIs(false))
	ctx := testkit.Context(t)
	cl := testkit.Client(t, c.Bootstrap())
	slow := ledger.NewResolver(cl, "claims", "g", testkit.Logger())
	n, err := slow.Ensure(ctx, true, 4)
	require.NoError(t, err)
	all := []int32{0, 1, 2, 3}
	require.NoError(t, slow.CatchUp(ctx, all)) // positions 0

	w := testkit.Client(t, c.Bootstrap(), kgo.TransactionalID("w"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	// Claims of inputs 0..7 on their ledger partitions, in two rounds:
	// the first is truncated away, the second kept.
	var inputs []ledger.Input
	for p := range int32(8) {
		inputs = append(inputs, ledger.Input{Group: "g", TopicID: inputID, Partition: p})
	}
	claim := func(p int32, first int64) *kgo.Record {
		return claimRecord(t, "claims", n, ledger.Claim{Group: "g", TopicID: inputID, Partition: p, TransactionalID: "w", Ranges: []ledger.Range{{First: first, Last: first, Type: ledger.TypeAccept}}})
	}
	for p := range int32(8) {
		writeInTxn(ctx, t, w, true, claim(p, 0))
	}
	fast := ledger.NewResolver(testkit.Client(t, c.Bootstrap()), "claims", "g", testkit.Logger())
	_, err = fast.Ensure(ctx, false, 0)
	require.NoError(t, err)
	require.NoError(t, fast.CatchUp(ctx, all))
	for _, in := range inputs {
		fast.Prune(in, 1) // offset 0 of every input is done with
	}
	require.NoError(t, fast.Truncate(ctx))
	for p := range int32(8) {
		writeInTxn(ctx, t, w, true, claim(p, 1))
	}
	require.NoError(t, slow.CatchUp(ctx, all), "a reader below another's truncation skips ahead on every partition")
	for _, in := range inputs {
		_, ok := slow.Lookup(in, 1)
		require.True(t, ok, "claim of input %d after the truncation read", in.Partition)
	}
}
