package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CheckpointConfig describes one run of the checkpointing pipeline: a
// simulated stream-processing source whose readers (share consumers in
// transactional mode) acknowledge their input through an acknowledger
// when a checkpoint completes.
type CheckpointConfig struct {
	Seeds []string
	Input string // created with InputPartitions partitions
	Group string

	InputPartitions int32
	Records         int
	Readers         int
	// Interval is how often the checkpoint coordinator triggers a
	// checkpoint (default 100ms).
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
	Logger      *slog.Logger
	// Progress, if set, is called about once a second.
	Progress func(CheckpointProgress)
}

// CheckpointProgress is the state of a checkpoint run, reported once a
// second.
type CheckpointProgress struct {
	Elapsed      time.Duration
	Acknowledged int64 // input records whose share state is final
	Inputs       int
	Committed    int64 // outputs in the committed sink
	Completed    int64 // checkpoints completed
	Failed       int64 // checkpoints failed
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
	case c.LongEvery < 0 || c.FailEvery < 0 || c.SlowSnapshots < 0:
		return errors.New("LongEvery, FailEvery and SlowSnapshots must not be negative")
	case c.FailEvery == 1:
		return errors.New("FailEvery 1 would fail every checkpoint: the run could never finish")
	}
	return nil
}

// RunCheckpoint sets up the input topic and the group, writes the input,
// runs the checkpointing pipeline until every input record is acknowledged
// (or MaxDuration or ctx ends), and checks the committed sink: every input
// id in it exactly once. An error means the run could not be carried out
// (bad config, cluster unreachable, a reader fenced or unable to end a
// transaction); a run that breaks exactly-once returns a summary whose OK
// is false.
func RunCheckpoint(ctx context.Context, cfg CheckpointConfig) (CheckpointSummary, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return CheckpointSummary{}, fmt.Errorf("checkpoint config: %w", err)
	}
	log := cfg.Logger
	admin, err := kgo.NewClient(kgo.SeedBrokers(cfg.Seeds...))
	if err != nil {
		return CheckpointSummary{}, fmt.Errorf("admin client: %w", err)
	}
	defer admin.Close()
	if err := setupCheckpoint(ctx, admin, cfg); err != nil {
		return CheckpointSummary{}, err
	}
	log.Info("writing input", "records", cfg.Records, "topic", cfg.Input)
	if err := WriteInput(ctx, cfg.Seeds, cfg.Input, cfg.Records, log); err != nil {
		return CheckpointSummary{}, err
	}
	ends, err := inputEnds(ctx, admin, cfg.Input)
	if err != nil {
		return CheckpointSummary{}, err
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.MaxDuration)
	defer cancel()
	stats := &checkpointStats{}
	sink := newCommittedSink(cfg.Records)
	results := make(chan snapshotResult)
	readers := make([]*checkpointReader, cfg.Readers)
	for i := range readers {
		readers[i] = newCheckpointReader(i, cfg, stats, sink, results)
	}
	coord := &checkpointCoordinator{cfg: cfg, readers: readers, stats: stats, results: results}

	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		runError error
	)
	fail := func(err error) {
		errOnce.Do(func() { runError = err })
		cancel()
	}
	start := time.Now()
	for _, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.run(runCtx); err != nil {
				fail(fmt.Errorf("reader %d: %w", r.index, err))
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		coord.run(runCtx)
	}()
	lastReport := time.Now()
	acked, waitErr := waitInputAcknowledged(runCtx, kadm.NewClient(admin), cfg.Group, cfg.Input, ends, cfg.Records, log, func(acked int64) {
		if cfg.Progress == nil || time.Since(lastReport) < time.Second {
			return
		}
		lastReport = time.Now()
		cfg.Progress(CheckpointProgress{
			Elapsed:      time.Since(start),
			Acknowledged: acked,
			Inputs:       cfg.Records,
			Committed:    sink.total(),
			Completed:    stats.completed.Load(),
			Failed:       stats.failedOnPurpose.Load() + stats.declined.Load(),
		})
	})
	cancel()
	wg.Wait()
	elapsed := time.Since(start)
	if runError != nil {
		return CheckpointSummary{}, runError
	}
	if waitErr != nil && !errors.Is(waitErr, context.DeadlineExceeded) {
		return CheckpointSummary{}, waitErr
	}
	return stats.summary(cfg, sink.check(cfg.Records, stats.archivedIDs()), int64(cfg.Records)-acked, elapsed), nil
}

// setupCheckpoint creates the input topic and sets the group's configs:
// earliest reset, so records written before the group existed are
// delivered, the lock duration and the delivery limit.
func setupCheckpoint(ctx context.Context, cl *kgo.Client, cfg CheckpointConfig) error {
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, cfg.InputPartitions, 1, nil, cfg.Input)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerrTopicExists) {
		return fmt.Errorf("create topic %s: %w", cfg.Input, err)
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = cfg.Group
	for _, kv := range [][2]string{
		{"share.auto.offset.reset", "earliest"},
		{"share.record.lock.duration.ms", fmt.Sprint(cfg.LockDuration.Milliseconds())},
		{"share.delivery.count.limit", fmt.Sprint(cfg.DeliveryLimit)},
	} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = kv[0], kmsg.StringPtr(kv[1])
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	alterResp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("group configs of %s: %w", cfg.Group, err)
	}
	for _, r := range alterResp.Resources {
		if err := kerrFor(r.ErrorCode, r.ErrorMessage); err != nil {
			return fmt.Errorf("group configs of %s (lock duration %v, delivery limit %d): %w",
				cfg.Group, cfg.LockDuration, cfg.DeliveryLimit, err)
		}
	}
	return nil
}

// waitInputAcknowledged polls the group's share-partition start offsets of
// topic every 250ms until they reach ends (every input record acknowledged
// or archived), calling tick with the count after each poll. It returns
// how many records are acknowledged, with ctx's error if ctx ended first.
func waitInputAcknowledged(ctx context.Context, adm *kadm.Client, group, topic string, ends map[int32]int64, total int, log *slog.Logger, tick func(int64)) (int64, error) {
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	var acked int64
	for {
		described, err := adm.DescribeShareGroupOffsets(ctx, group)
		if err == nil {
			acked = 0
			d := described[group]
			for p, end := range ends {
				if o, ok := d.Offsets.Lookup(topic, p); ok && o.Err == nil && o.StartOffset >= 0 {
					acked += min(o.StartOffset, end)
				}
			}
			if acked >= int64(total) {
				return acked, nil
			}
		} else if ctx.Err() == nil {
			log.Debug("describing share-group offsets", "err", err)
		}
		tick(acked)
		select {
		case <-ctx.Done():
			return acked, ctx.Err()
		case <-ticker.C:
		}
	}
}
