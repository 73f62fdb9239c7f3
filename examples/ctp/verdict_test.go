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
)

// The verdict must fail every run that did not do its job. These runs
// break the pipeline on purpose, each in one way, on a fresh bundled
// cluster; the unit tests of package eos cover every branch of the
// verdict, these show that real runs reach them.

// brokenRun runs loop with cfg (seeds, topics and group filled in) on a
// fresh cluster, after prepare, if not nil, has set the cluster up.
func brokenRun(t *testing.T, cfg eos.Config, loop eos.WorkerFunc, prepare func(ctx context.Context, cl *kgo.Client)) eos.Summary {
	t.Helper()
	c, err := broker.NewCluster(broker.Nodes(1))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg.Seeds = c.Bootstrap()
	cfg.Input, cfg.Output, cfg.Group = "input", "output", "broken"
	cfg.Workers = 2
	cfg.MaxDuration = time.Minute
	if prepare != nil {
		cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Seeds...))
		require.NoError(t, err)
		defer cl.Close()
		prepare(ctx, cl)
	}
	sum, err := eos.Run(ctx, cfg, loop)
	require.NoError(t, err)
	t.Logf("%s", sum.Line())
	return sum
}

func createTopic(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) {
	t.Helper()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 6, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
}

// TestVerdictNothingWritten: workers that write their output to the wrong
// topic acknowledge every input and write nothing the check can see.
func TestVerdictNothingWritten(t *testing.T) {
	sum := brokenRun(t, eos.Config{Records: 500}, func(ctx context.Context, w eos.Worker) error {
		w.Output = "elsewhere"
		return runWorker(ctx, w)
	}, func(ctx context.Context, cl *kgo.Client) { createTopic(ctx, t, cl, "elsewhere") })
	require.Equal(t, eos.VerdictFailed, sum.Verdict)
	require.Equal(t, eos.ExitFailed, sum.ExitCode())
	require.Zero(t, sum.Outputs)
	require.Equal(t, 500, sum.Acknowledged)
	require.Equal(t, 500, sum.Missing)
	require.Contains(t, sum.Reason, "nothing was written")
}

// TestVerdictDuplicates: input records that carry ids already in the
// input (written before the run) are output again.
func TestVerdictDuplicates(t *testing.T) {
	sum := brokenRun(t, eos.Config{Records: 500}, runWorker, func(ctx context.Context, cl *kgo.Client) {
		createTopic(ctx, t, cl, "input")
		var extra []*kgo.Record
		for i := range 10 {
			extra = append(extra, &kgo.Record{Topic: "input", Value: []byte(eos.ID(i))})
		}
		require.NoError(t, cl.ProduceSync(ctx, extra...).FirstErr())
	})
	require.Equal(t, eos.VerdictFailed, sum.Verdict)
	require.Equal(t, eos.ExitFailed, sum.ExitCode())
	require.Equal(t, 10, sum.Duplicates)
	require.Contains(t, sum.Reason, "10 duplicates")
}

// TestVerdictArchivedByFailure: every transaction is held past its
// records' locks, so each fails; after the group's two deliveries every
// input is archived without having been processed.
func TestVerdictArchivedByFailure(t *testing.T) {
	sum := brokenRun(t, eos.Config{
		Records:       200,
		LockDuration:  time.Second,
		TxnHold:       1500 * time.Millisecond,
		DeliveryLimit: 2,
	}, runWorker, nil)
	require.Equal(t, eos.VerdictFailed, sum.Verdict)
	require.Equal(t, eos.ExitFailed, sum.ExitCode())
	require.Zero(t, sum.Outputs)
	require.Equal(t, 200, sum.ArchivedByFailure)
	require.Zero(t, sum.Missing, "each archived input is accounted for")
	require.Contains(t, sum.Reason, "nothing was written, 200 archived at the delivery limit after failures")
}
