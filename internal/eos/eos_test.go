package eos

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

func TestReadCommittedFindsDuplicatesMissingAndUnknown(t *testing.T) {
	seeds, cl, ctx := testCluster(t, broker.Nodes(2))
	_, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, "out")
	require.NoError(t, err)

	// The input written to "out" is its own output: exactly once.
	const n = 500
	in, err := WriteInput(ctx, seeds, "out", n, 0, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	check, err := ReadCommitted(ctx, seeds, "out", in, allAcknowledged(in), Endings{}, time.Second)
	require.NoError(t, err)
	require.Equal(t, VerdictOK, NewResult(check, "", time.Second).Verdict)
	require.Equal(t, n, check.Outputs)
	require.Equal(t, n, check.Acknowledged)
	require.Nil(t, check.DuplicatesByPartition)
	require.Nil(t, check.MissingByPartition)

	// The extra copy carries the id as its key, as a pipeline's output
	// does, so it lands in the partition of the first copy.
	produced := cl.ProduceSync(ctx,
		&kgo.Record{Topic: "out", Key: []byte(ID(7)), Value: []byte(ID(7))},
		&kgo.Record{Topic: "out", Value: []byte("not-an-id")},
	)
	require.NoError(t, produced.FirstErr())
	bigger := testInput(n+3, 0)
	check, err = ReadCommitted(ctx, seeds, "out", bigger, allAcknowledged(bigger), Endings{Archived: map[string]Archive{ID(n + 2): ArchivedByFailure}}, time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, check.Duplicates)
	require.Equal(t, []string{ID(7)}, check.DuplicateSample)
	var copyPartition int32 = -1
	for _, r := range produced { // results arrive in completion order
		if string(r.Record.Value) == ID(7) {
			copyPartition = r.Record.Partition
		}
	}
	require.Equal(t, map[int32]int{copyPartition: 2}, check.DuplicatesByPartition,
		"both copies are attributed to the partition holding them")
	require.Equal(t, 2, check.Missing)
	missing := 0
	for p, n := range check.MissingByPartition {
		require.True(t, p >= 0 && p < 3, "partition %d", p)
		missing += n
	}
	require.Equal(t, 2, missing, "each missing id is counted at the partition its key hashes to")
	require.Equal(t, 1, check.ArchivedByFailure, "a missing id known to be archived is reported as such")
	require.Equal(t, 1, check.Unknown)
	require.Equal(t, VerdictFailed, NewResult(check, "", time.Second).Verdict)
}

// TestReadCommittedWaitsForOpenTransactions: a transaction left open hides
// what was committed after it from a read_committed reader; the verifier
// waits for it to end instead of reporting those outputs missing, and
// fails, naming the partition, if it never does.
func TestReadCommittedWaitsForOpenTransactions(t *testing.T) {
	c, err := broker.NewCluster(broker.Nodes(1))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seeds := c.Bootstrap()
	txn, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID("open"), kgo.DefaultProduceTopic("out"), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer txn.Close()
	require.NoError(t, txn.BeginTransaction())
	require.NoError(t, txn.ProduceSync(ctx, &kgo.Record{Value: []byte(ID(0))}).FirstErr())

	in := testInput(1, 0)
	_, err = ReadCommitted(ctx, seeds, "out", in, allAcknowledged(in), Endings{}, 300*time.Millisecond)
	require.ErrorContains(t, err, "still has an open transaction")

	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = txn.EndTransaction(context.Background(), kgo.TryCommit)
	}()
	check, err := ReadCommitted(ctx, seeds, "out", in, allAcknowledged(in), Endings{}, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, check.Outputs, "the output committed after the wait is seen")
}

// The share-state watch learns how the broker ended each input from
// __share_group_state: records accepted, rejected, and released until the
// delivery limit archived them, each with the state the broker gave it,
// and nothing for records still in flight.
func TestShareStateWatchLearnsHowInputsEnded(t *testing.T) {
	c, err := broker.NewCluster(broker.Nodes(2), broker.GroupConfigDefault("share.auto.offset.reset", "earliest"),
		broker.GroupConfigDefault("share.delivery.count.limit", "2"))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seeds := c.Bootstrap()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	_, err = adm.CreateTopic(ctx, 1, 1, nil, "in")
	require.NoError(t, err)
	in, err := WriteInput(ctx, seeds, "in", 12, 0, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	w, why := followShareState(ctx, seeds, adm, "g", in)
	require.Empty(t, why)
	defer w.stop()

	cons, err := shareconsumer.New(shareconsumer.SeedBrokers(seeds...), shareconsumer.Group("g"), shareconsumer.Topics("in"),
		shareconsumer.Mode(shareconsumer.Explicit))
	require.NoError(t, err)
	defer cons.Close(ctx)
	decide := func(recs []*kgo.Record) {
		for _, r := range recs {
			typ := kshare.AckAccept
			switch idx := indexOf(string(r.Value)); {
			case idx >= 9: // left in flight
				continue
			case idx >= 6:
				typ = kshare.AckRelease
			case idx >= 3:
				typ = kshare.AckReject
			}
			require.NoError(t, cons.Ack(r, typ))
		}
		require.NoError(t, cons.Commit(ctx))
	}
	for deliveries := 0; deliveries < 2; {
		recs, err := cons.Poll(ctx)
		require.NoError(t, err)
		for _, r := range recs {
			if indexOf(string(r.Value)) == 6 {
				deliveries++
			}
		}
		decide(recs)
	}
	ended, err := w.ended(ctx, adm, in)
	require.NoError(t, err)
	for i := range 12 {
		want := map[bool]int8{true: stateAcknowledged}[i < 3]
		if i >= 3 && i < 9 {
			want = stateArchived
		}
		require.Equal(t, want, ended[i], "input %d", i)
	}
}

// indexOf returns i for ID(i).
func indexOf(id string) int {
	var i int
	fmt.Sscanf(id, "id-%d", &i)
	return i
}

// testCluster starts a bundled cluster with opts and returns its seeds, a
// client of it and a context of a minute; the test closes them.
func testCluster(t *testing.T, opts ...broker.Opt) ([]string, *kgo.Client, context.Context) {
	t.Helper()
	c, err := broker.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return c.Bootstrap(), cl, ctx
}
