package eos

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/broker"
)

func TestReadCommittedFindsDuplicatesMissingAndUnknown(t *testing.T) {
	c, err := broker.NewCluster(broker.Nodes(2))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seeds := c.Bootstrap()

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	_, err = kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, "out")
	require.NoError(t, err)

	const n = 500
	require.NoError(t, WriteInput(ctx, seeds, "out", n, slog.New(slog.DiscardHandler)))
	check, err := ReadCommitted(ctx, seeds, "out", n, nil)
	require.NoError(t, err)
	require.True(t, check.OK(), check.String())
	require.Equal(t, n, check.Outputs)
	require.Nil(t, check.DuplicatesByPartition)

	// The extra copy carries the id as its key, as a pipeline's output
	// does, so it lands in the partition of the first copy.
	produced := cl.ProduceSync(ctx,
		&kgo.Record{Topic: "out", Key: []byte(ID(7)), Value: []byte(ID(7))},
		&kgo.Record{Topic: "out", Value: []byte("not-an-id")},
	)
	require.NoError(t, produced.FirstErr())
	check, err = ReadCommitted(ctx, seeds, "out", n+3, map[string]bool{ID(n + 2): true})
	require.NoError(t, err)
	require.False(t, check.OK())
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
	require.Equal(t, 1, check.Archived, "a missing id known to be archived is reported as such")
	require.Equal(t, 1, check.Unknown)
}
