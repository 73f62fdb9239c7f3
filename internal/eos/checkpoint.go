package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// CheckpointConfig describes one run of the checkpointing pipeline: a
// simulated stream-processing source whose readers (share consumers in
// transactional mode) acknowledge their input through an acknowledger
// when a checkpoint completes.
type CheckpointConfig struct {
	Seeds []string
	Input string // created with InputPartitions partitions
	Group string
	// Ledger is the claim ledger topic the readers commit through ("":
	// KIP-1289).
	Ledger string
	// ReplicationFactor is that of the topics the run creates (0 or -1:
	// the cluster's default).
	ReplicationFactor int16

	InputPartitions int32
	Records         int
	// RejectEvery makes every RejectEvery-th input record poison, which
	// the readers must reject (0: none); see Config.RejectEvery.
	RejectEvery int
	Readers     int
	// Interval is how often the checkpoint coordinator triggers a
	// checkpoint (default 100ms); a tick comes to nothing while the last
	// checkpoint is not answered by every reader.
	Interval time.Duration
	// LongEvery makes checkpoints take longer than the lock duration to
	// complete, so that their acknowledgements stay staged past their
	// first lock: the consumer must renew the locks, or the records would
	// go to other readers. Counting only checkpoints that hold records and
	// were not declined, the 2nd is long, then every LongEvery-th (0:
	// none).
	LongEvery int
	// FailEvery fails checkpoints on purpose: the coordinator declares
	// them failed and every reader aborts them. Counting as for
	// LongEvery, the 1st fails, then every FailEvery-th (0: none; 1 is
	// refused, since no checkpoint would ever complete).
	FailEvery int
	// SlowSnapshots is how many times a reader stalls past its locks
	// before taking a snapshot, so that staging fails, it declines and the
	// checkpoint fails. The first stall comes at the first snapshot with
	// records, the next ones a few checkpoints apart (0: never).
	SlowSnapshots int
	// LockDuration is set as the group's share.record.lock.duration.ms
	// (default 2s). Apache Kafka refuses values under its
	// group.share.min.record.lock.duration.ms (15s by default).
	LockDuration time.Duration
	// DeliveryLimit is set as the group's share.delivery.count.limit
	// (default 10).
	DeliveryLimit int
	// TxnTimeout is each acknowledger's transaction timeout (default 10s);
	// it also bounds each commit or abort of a checkpoint.
	TxnTimeout time.Duration
	// MaxDuration bounds the run; past it the run stops and reports what
	// it has (default 10 minutes).
	MaxDuration time.Duration
	// Logger receives the run's log lines (default: discard).
	Logger *slog.Logger
	// Progress, if set, is called about once a second; its Committed and
	// Aborted count checkpoints completed and failed.
	Progress func(Progress)
}

func (c *CheckpointConfig) defaults() {
	if c.InputPartitions <= 0 {
		c.InputPartitions = 6
	}
	if c.Readers <= 0 {
		c.Readers = 4
	}
	if c.Interval <= 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.LockDuration <= 0 {
		c.LockDuration = 2 * time.Second
	}
	if c.DeliveryLimit <= 0 {
		c.DeliveryLimit = 10
	}
	if c.TxnTimeout <= 0 {
		c.TxnTimeout = 10 * time.Second
	}
	if c.MaxDuration <= 0 {
		c.MaxDuration = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *CheckpointConfig) validate() error {
	switch {
	case len(c.Seeds) == 0:
		return errors.New("no seed brokers")
	case c.Input == "" || c.Group == "":
		return errors.New("input topic and group are required")
	case c.Records <= 0:
		return fmt.Errorf("records %d is not positive", c.Records)
	case c.RejectEvery < 0 || c.RejectEvery == 1:
		return fmt.Errorf("RejectEvery %d: must be 0 (none) or at least 2", c.RejectEvery)
	case c.LongEvery < 0 || c.FailEvery < 0 || c.SlowSnapshots < 0:
		return errors.New("LongEvery, FailEvery and SlowSnapshots must not be negative")
	case c.FailEvery == 1:
		return errors.New("FailEvery 1 would fail every checkpoint: the run could never finish")
	}
	return nil
}

// RunCheckpoint sets up the input topic and the group, writes the input,
// runs cfg.Readers source readers made by newReader under a checkpoint
// coordinator until every input record is acknowledged, and checks the
// committed sink: every input id in it exactly once.
//
// As with Run, a run that ctx or MaxDuration stops early (setup and input
// included) still reports
// (StoppedBy, verdict INCOMPLETE unless it found a violation), and an
// error means the run could not be carried out: a bad config, a cluster
// that refused the setup, a reader that could not start, or a reader
// method that failed with an error other than kshare.ErrAbortable (a
// fenced acknowledger, a cluster without KIP-1289). The run is then
// stopped at once and not checked.
func RunCheckpoint(ctx context.Context, cfg CheckpointConfig, newReader NewReader) (CheckpointSummary, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return CheckpointSummary{}, fmt.Errorf("checkpoint config: %w", err)
	}
	run := newRunScope(ctx, cfg.MaxDuration)
	admin, in, err := prepare(run.run, cfg.Seeds, groupSetup{
		topics:        []string{cfg.Input},
		partitions:    cfg.InputPartitions,
		group:         cfg.Group,
		lockDuration:  cfg.LockDuration,
		deliveryLimit: cfg.DeliveryLimit,
		replication:   cfg.ReplicationFactor,
	}, cfg.Input, cfg.Records, cfg.RejectEvery, cfg.Logger)
	if err != nil {
		if r, stopped := run.stoppedInSetup(cfg.Records, err); stopped {
			return CheckpointSummary{Result: r}, nil
		}
		return CheckpointSummary{}, err
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	state, stateWhy := followShareState(run.run, cfg.Seeds, adm, cfg.Group, in)
	defer state.stop()

	stats := &checkpointStats{}
	sink := newCommittedSink(cfg.Records)
	results := make(chan snapshotResult)
	tasks := make([]*readerTask, cfg.Readers)
	for i := range tasks {
		tasks[i] = newReaderTask(i, cfg, stats, sink, results)
	}
	coord := &checkpointCoordinator{cfg: cfg, readers: tasks, stats: stats, results: results}
	for _, t := range tasks {
		run.spawn(func(ctx context.Context) {
			if err := t.run(ctx, newReader); err != nil {
				run.fail(fmt.Errorf("reader %d: %w", t.index, err))
			}
		})
	}
	run.spawn(coord.run)
	w := &watcher{
		adm: adm, group: cfg.Group, in: in, stats: &stats.runStats, log: cfg.Logger, progress: cfg.Progress,
		labels:  [3]string{"checkpoints", "completed", "failed"},
		outputs: sink.total,
		counts: func() (int64, int64) {
			return stats.completed.Load(), stats.failedOnPurpose.Load() + stats.declined.Load()
		},
		idle: func() string {
			if stats.polled.Load() == 0 {
				return fmt.Sprintf("no record delivered yet; %d readers are joining the share group or waiting for an assignment", len(tasks))
			}
			return fmt.Sprintf("no injected fault explains it; %d readers waiting for records or checkpoints", len(tasks))
		},
		fail: run.fail,
		busy: func() bool { return stats.stalling.Load() > 0 },
	}
	elapsed, stoppedBy, err := run.end(w.watch(run.ctx, run.start))
	if err != nil {
		return CheckpointSummary{}, err
	}
	result, err := checkAndJudge(ctx, elapsed, stoppedBy, func(ctx context.Context) (Check, error) {
		return finalCheck(ctx, adm, cfg.Group, cfg.Input, func(ctx context.Context, start map[int32]int64) (Check, error) {
			return sink.check(in, start, state.endings(ctx, adm, in, stats.archivedValues(), stateWhy)), nil
		})
	})
	if err != nil {
		return CheckpointSummary{}, err
	}
	return stats.summary(cfg, result), nil
}
