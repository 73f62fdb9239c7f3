package eos

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/broker"
)

func TestSinkCheckFindsDuplicatesMissingAndUnknown(t *testing.T) {
	sink := newCommittedSink(10)
	sink.Commit([]string{ID(0), ID(1), ID(2), ID(5), ID(6)})
	sink.Commit([]string{ID(5), ID(8), ID(9), "not-an-id"})
	require.Equal(t, int64(9), sink.total())

	in := testInput(10, 0)
	check := sink.check(in, allAcknowledged(in), Endings{Archived: map[string]Archive{ID(7): ArchivedByFailure}})
	require.Equal(t, 10, check.Inputs)
	require.Equal(t, 9, check.Outputs)
	require.Equal(t, 1, check.Duplicates)
	require.Equal(t, []string{ID(5)}, check.DuplicateSample)
	require.Equal(t, 2, check.Missing)
	require.Equal(t, []string{ID(3) + ".." + ID(4)}, check.MissingSample)
	require.Equal(t, 1, check.ArchivedByFailure, "a missing id known to be archived is reported as such")
	require.Equal(t, 1, check.Unknown)

	sum := CheckpointSummary{Result: NewResult(check, "", time.Second)}
	require.Equal(t, "exactly-once: FAILED (1 duplicates, 2 missing, 1 archived at the delivery limit after failures, 1 unknown outputs)", sum.Line())
	var table strings.Builder
	require.NoError(t, sum.WriteTable(&table))
	require.True(t, strings.HasSuffix(table.String(), sum.Line()+"\n"), table.String())
	require.Contains(t, table.String(), "missing (sample)")
}

func TestSinkCheckOKAndUnacknowledged(t *testing.T) {
	sink := newCommittedSink(3)
	sink.Commit([]string{ID(2), ID(0), ID(1)})
	in := testInput(3, 0)
	sum := CheckpointSummary{Result: NewResult(sink.check(in, allAcknowledged(in), Endings{}), "", time.Second)}
	require.True(t, sum.OK)
	require.Equal(t, "exactly-once: OK", sum.Line())
	sum = CheckpointSummary{Result: NewResult(sink.check(in, map[int32]int64{0: 1}, Endings{}), "", time.Second)}
	require.False(t, sum.OK)
	require.Equal(t, "exactly-once: FAILED (2 inputs not acknowledged)", sum.Line())
}

func TestRunCheckpointRejectsBadConfig(t *testing.T) {
	ctx := context.Background()
	valid := CheckpointConfig{Seeds: []string{"127.0.0.1:1"}, Input: "in", Group: "g", Records: 1}
	for name, mutate := range map[string]func(*CheckpointConfig){
		"no seeds":          func(c *CheckpointConfig) { c.Seeds = nil },
		"no group":          func(c *CheckpointConfig) { c.Group = "" },
		"no records":        func(c *CheckpointConfig) { c.Records = 0 },
		"negative schedule": func(c *CheckpointConfig) { c.LongEvery = -1 },
		"fail every one":    func(c *CheckpointConfig) { c.FailEvery = 1 },
		"reject every one":  func(c *CheckpointConfig) { c.RejectEvery = 1 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := valid
			mutate(&cfg)
			_, err := RunCheckpoint(ctx, cfg, nil)
			require.ErrorContains(t, err, "checkpoint config")
		})
	}
}

// drainKinds returns the kinds and ids of the messages in a reader's inbox.
func drainKinds(r *readerTask) []readerMsg {
	var out []readerMsg
	for _, m := range r.box.drain() {
		out = append(out, readerMsg{kind: m.kind, id: m.id})
	}
	return out
}

func TestCheckpointCoordinatorDecidesInOrder(t *testing.T) {
	const lock = 2 * time.Second
	cfg := CheckpointConfig{FailEvery: 3, LongEvery: 2, LockDuration: lock}
	cfg.defaults()
	stats := &checkpointStats{}
	readers := []*readerTask{
		newReaderTask(0, cfg, stats, nil, nil),
		newReaderTask(1, cfg, stats, nil, nil),
	}
	c := &checkpointCoordinator{cfg: cfg, readers: readers, stats: stats}
	t0 := time.Now()
	var queue []*inFlight
	for id := int64(1); id <= 6; id++ {
		queue = append(queue, c.trigger(id, t0))
	}
	for _, r := range readers {
		require.Len(t, drainKinds(r), 6, "a barrier per checkpoint")
	}
	declined := errors.New("lock expired")
	answers := []snapshotResult{
		{reader: 0, id: 1}, {reader: 1, id: 1}, // empty
		{reader: 0, id: 2, records: 5}, {reader: 1, id: 2}, // 1st with records: fails on purpose
		{reader: 0, id: 3, records: 5, declined: declined}, {reader: 1, id: 3, records: 1}, // declined
		{reader: 0, id: 4, records: 1}, {reader: 1, id: 4, records: 1}, // 2nd: long
		{reader: 0, id: 5, records: 1}, {reader: 1, id: 5}, // 3rd: completes
		{reader: 0, id: 6, records: 1}, // 4th, but reader 1 has not answered
	}
	for _, a := range answers {
		c.answer(queue, a)
	}

	queue = c.decideReady(queue, t0)
	want := []readerMsg{{kind: msgComplete, id: 1}, {kind: msgAbort, id: 2}, {kind: msgAbort, id: 3}}
	for _, r := range readers {
		require.Equal(t, want, drainKinds(r))
	}
	require.Len(t, queue, 3, "the long checkpoint 4 waits, and 5 and 6 behind it")

	queue = c.decideReady(queue, t0.Add(2*lock))
	want = []readerMsg{{kind: msgComplete, id: 4}, {kind: msgComplete, id: 5}}
	for _, r := range readers {
		require.Equal(t, want, drainKinds(r))
	}
	require.Len(t, queue, 1, "checkpoint 6 waits for reader 1")

	c.answer(queue, snapshotResult{reader: 1, id: 6})
	queue = c.decideReady(queue, t0.Add(2*lock))
	require.Empty(t, queue)
	for _, r := range readers {
		require.Equal(t, []readerMsg{{kind: msgAbort, id: 6}}, drainKinds(r), "the 4th checkpoint with records fails on purpose")
	}
	require.Equal(t, int64(3), stats.completed.Load())
	require.Equal(t, int64(2), stats.completedWithRecords.Load())
	require.Equal(t, int64(2), stats.longCompleted.Load(), "4, and 5 that waited behind it")
	require.Equal(t, int64(2), stats.failedOnPurpose.Load())
	require.Equal(t, int64(1), stats.declined.Load())
}

// A slow snapshot is offered to every reader at once, from the first
// barrier after a checkpoint with records was decided (or a commit), and
// again at each barrier until one reader takes it; one that is taken is
// held by the run until its checkpoint is decided.
func TestCheckpointCoordinatorOffersTheStallUntilTaken(t *testing.T) {
	cfg := CheckpointConfig{SlowSnapshots: 1}
	cfg.defaults()
	stats := &checkpointStats{}
	readers := []*readerTask{
		newReaderTask(0, cfg, stats, nil, nil),
		newReaderTask(1, cfg, stats, nil, nil),
	}
	c := &checkpointCoordinator{cfg: cfg, readers: readers, stats: stats}
	stalls := func() []bool {
		var out []bool
		for _, r := range readers {
			for _, m := range r.box.drain() {
				out = append(out, m.stall)
			}
		}
		return out
	}
	c.trigger(0, time.Now())
	require.Equal(t, []bool{false, false}, stalls(), "no stall before the pipeline has shown that it works")
	c.seq = 1 // a checkpoint with records was decided
	queue := []*inFlight{c.trigger(1, time.Now())}
	require.Equal(t, []bool{true, true}, stalls(), "offered to every reader")
	queue = append(queue, c.trigger(2, time.Now()))
	require.Equal(t, []bool{false, false}, stalls(), "one offer at a time")

	c.answer(queue, snapshotResult{reader: 0, id: 1})
	c.answer(queue, snapshotResult{reader: 1, id: 1}) // neither had records
	queue = append(queue, c.trigger(3, time.Now()))
	require.Equal(t, []bool{true, true}, stalls(), "offered again")

	require.True(t, stats.stallClaim.CompareAndSwap(false, true), "the first reader with records takes it")
	require.False(t, stats.stallClaim.CompareAndSwap(false, true), "and only one")
	stats.stalling.Add(1)
	c.answer(queue, snapshotResult{reader: 1, id: 3, stalled: true, records: 5, declined: errors.New("lock expired")})
	c.answer(queue, snapshotResult{reader: 0, id: 3})
	c.trigger(4, time.Now())
	require.Equal(t, []bool{false, false}, stalls(), "SlowSnapshots reached")
	c.answer(queue, snapshotResult{reader: 0, id: 2})
	c.answer(queue, snapshotResult{reader: 1, id: 2})
	require.Equal(t, int64(1), stats.stalling.Load(), "the run waits for the stalled checkpoint")
	queue = c.decideReady(queue, time.Now())
	require.Empty(t, queue)
	require.Zero(t, stats.stalling.Load(), "its checkpoint is decided: declined")
	require.Equal(t, int64(1), stats.declined.Load())
}

// idleReader is a source reader that only waits: the run's progress then
// depends on nothing but the cluster.
type idleReader struct{}

func (idleReader) Poll(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}
func (idleReader) SnapshotState(context.Context, int64) error            { return nil }
func (idleReader) NotifyCheckpointComplete(context.Context, int64) error { return nil }
func (idleReader) NotifyCheckpointAborted(context.Context, int64) error  { return nil }
func (idleReader) Close(context.Context) error                           { return nil }

// A cluster that goes away during a run stops the run with an error once
// its group's offsets have gone unanswered for a while, in both pipelines
// (they share the watcher): empty checkpoints that complete without a
// cluster must not make the run look merely slow until -max-duration.
func TestRunStopsWhenTheClusterStopsAnswering(t *testing.T) {
	defer func(old time.Duration) { unansweredLimit = old }(unansweredLimit)
	unansweredLimit = time.Second
	c, err := broker.NewCluster()
	require.NoError(t, err)
	started := make(chan struct{}, 4)
	cfg := CheckpointConfig{Seeds: c.Bootstrap(), Input: "in", Group: "g", Records: 10, Readers: 1, MaxDuration: time.Minute}
	done := make(chan error, 1)
	go func() {
		_, err := RunCheckpoint(context.Background(), cfg, func(context.Context, Reader) (SourceReader, error) {
			started <- struct{}{}
			return idleReader{}, nil
		})
		done <- err
	}()
	<-started
	c.Close()
	err = <-done
	require.ErrorContains(t, err, "the cluster has not answered for")
}
