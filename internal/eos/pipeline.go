package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Config describes one consume-transform-produce run.
type Config struct {
	// Seeds are the cluster's bootstrap addresses.
	Seeds []string
	// Input is the topic of input records, created with InputPartitions
	// partitions; Output, created alike, receives one output per input.
	Input  string
	Output string
	// Group is the share group the workers consume Input in.
	Group string

	// InputPartitions is the partition count of both topics (default 6).
	InputPartitions int32
	// Records is how many input records the run writes and processes.
	Records int
	// Workers is how many worker instances run at once (default 4).
	Workers int
	// TxnSize caps the records of one transaction (default 500).
	TxnSize int
	// TxnTimeout is each worker's transaction timeout; a killed worker's
	// open transaction is aborted when a new instance fences it or when it
	// times out.
	TxnTimeout time.Duration
	// LockDuration is set as the group's share.record.lock.duration.ms.
	LockDuration time.Duration
	// DeliveryLimit is set as the group's share.delivery.count.limit
	// (default 10, the most Kafka allows): a record delivered that often
	// without being acknowledged is archived.
	DeliveryLimit int
	// Faults selects the faults injected while the run runs.
	Faults Faults
	// TxnHold keeps every transaction open this long after producing its
	// output and before committing, as a slow transform would: it widens
	// the window in which a late marker can meet an open transaction.
	TxnHold time.Duration
	// MaxDuration bounds the run; past it the run stops and reports what
	// it has.
	MaxDuration time.Duration
	// Logger receives the run's log lines (default: discard).
	Logger *slog.Logger
	// Progress, if set, is called about once a second.
	Progress func(Progress)
}

// Faults selects what the run injects while it runs. Each enabled fault
// fires every Interval, in turn.
type Faults struct {
	// KillWorker kills a worker in the middle of a transaction: its
	// connections drop and nothing is committed; a new instance with the
	// same transactional id takes over.
	KillWorker bool
	// CoordinatorMoves moves a __transaction_state and a
	// __share_group_state partition to another node.
	CoordinatorMoves bool
	// Zombie starts a second instance of a worker with the same
	// transactional id; the older one must be fenced.
	Zombie bool
	// SlowWorker makes a worker wait past its locks before committing, so
	// that staging fails and the transaction aborts.
	SlowWorker bool
	// AbortEvery aborts every n-th transaction of each worker on purpose
	// (0: never).
	AbortEvery int
	// Interval is the pause between two faults (default 100ms).
	Interval time.Duration
	// MaxPerKind bounds how often each fault fires (coordinator moves:
	// ten times as often). Bounded faults keep every record's deliveries
	// under the delivery limit, so that no record is archived and any
	// missing output is a real loss (default 3).
	MaxPerKind int
}

// Any reports whether any fault is enabled.
func (f Faults) Any() bool {
	return f.KillWorker || f.CoordinatorMoves || f.Zombie || f.SlowWorker || f.AbortEvery > 0
}

// Progress is the state of a run, reported once a second.
type Progress struct {
	Elapsed      time.Duration // since the pipeline started
	Acknowledged int64         // input records whose share state is final
	Inputs       int           // input records in all
	Committed    int64         // transactions committed so far
	Aborted      int64         // transactions aborted so far
}

// Summary is the outcome of a run: what the read_committed check found,
// the run's counters and timings, and the faults injected, by name. The
// JSON names are those of the report that examples/ctp writes.
type Summary struct {
	Check
	TxnCommitted    int64            `json:"transactions_committed"`
	TxnAborted      int64            `json:"transactions_aborted"`
	Redelivered     int64            `json:"records_redelivered"`
	Unacknowledged  int64            `json:"inputs_not_acknowledged"`
	Elapsed         time.Duration    `json:"-"`
	ElapsedSeconds  float64          `json:"elapsed_seconds"`
	RecordsPerSec   float64          `json:"records_per_second"`
	CommitP50Millis float64          `json:"commit_latency_p50_ms"`
	CommitP99Millis float64          `json:"commit_latency_p99_ms"`
	Faults          map[string]int64 `json:"faults_injected"`
	WorkerErrors    int64            `json:"worker_restarts"`
}

// OK reports whether the run was exactly-once: every input id seen once in
// the committed output and every input record acknowledged.
func (s Summary) OK() bool { return s.Check.OK() && s.Unacknowledged == 0 }

// Verdict is the last line a run prints.
func (s Summary) Verdict() string {
	if s.OK() {
		return "exactly-once: OK"
	}
	why := s.Check.String()
	if s.Check.OK() {
		why = ""
	}
	if s.Unacknowledged > 0 {
		if why != "" {
			why += ", "
		}
		why += fmt.Sprintf("%d inputs not acknowledged", s.Unacknowledged)
	}
	return "exactly-once: FAILED (" + why + ")"
}

// runStats is shared by the workers and the fault injector.
type runStats struct {
	committed, aborted, redelivered, restarts atomic.Int64
	faults                                    sync.Map // name -> *atomic.Int64
	// archived holds the ids of records whose delivery at the group's
	// limit ended in a transaction that did not commit.
	archived sync.Map

	mu        sync.Mutex
	latencies []time.Duration
}

func (s *runStats) fault(name string) {
	v, _ := s.faults.LoadOrStore(name, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (s *runStats) archivedIDs() map[string]bool {
	out := map[string]bool{}
	s.archived.Range(func(k, _ any) bool {
		out[k.(string)] = true
		return true
	})
	return out
}

func (s *runStats) commitLatency(d time.Duration) {
	s.mu.Lock()
	s.latencies = append(s.latencies, d)
	s.mu.Unlock()
}

func (s *runStats) percentile(p float64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.latencies) == 0 {
		return 0
	}
	sorted := append([]time.Duration(nil), s.latencies...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return sorted[int(p*float64(len(sorted)-1))]
}

func (c *Config) defaults() {
	if c.InputPartitions <= 0 {
		c.InputPartitions = 6
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.TxnSize <= 0 {
		c.TxnSize = 500
	}
	if c.TxnTimeout <= 0 {
		c.TxnTimeout = 10 * time.Second
	}
	if c.LockDuration <= 0 {
		c.LockDuration = 5 * time.Second
	}
	if c.DeliveryLimit <= 0 {
		c.DeliveryLimit = 10
	}
	if c.Faults.MaxPerKind <= 0 {
		c.Faults.MaxPerKind = 3
	}
	if c.Faults.Interval <= 0 {
		c.Faults.Interval = 100 * time.Millisecond
	}
	if c.MaxDuration <= 0 {
		c.MaxDuration = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Run sets up the topics and the group, writes the input, runs the
// pipeline until every input record is acknowledged (or MaxDuration or ctx
// ends), and checks the committed output. An error means the run could not
// be carried out; a run that breaks exactly-once returns a Summary whose OK
// is false.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg.defaults()
	log := cfg.Logger
	admin, err := kgo.NewClient(kgo.SeedBrokers(cfg.Seeds...))
	if err != nil {
		return Summary{}, fmt.Errorf("admin client: %w", err)
	}
	defer admin.Close()
	if err := setup(ctx, admin, cfg); err != nil {
		return Summary{}, err
	}
	log.Info("writing input", "records", cfg.Records, "topic", cfg.Input)
	if err := WriteInput(ctx, cfg.Seeds, cfg.Input, cfg.Records, log); err != nil {
		return Summary{}, err
	}
	ends, err := inputEnds(ctx, admin, cfg.Input)
	if err != nil {
		return Summary{}, err
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.MaxDuration)
	defer cancel()
	stats := &runStats{}
	start := time.Now()
	pool := newWorkerPool(cfg, stats)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pool.run(runCtx)
	}()
	if cfg.Faults.Any() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			injectFaults(runCtx, cfg, admin, pool, stats)
		}()
	}
	acked, waitErr := waitAcknowledged(runCtx, admin, cfg, ends, stats, start)
	cancel()
	wg.Wait()
	elapsed := time.Since(start)
	if waitErr != nil && !errors.Is(waitErr, context.DeadlineExceeded) {
		return Summary{}, waitErr
	}

	verifyCtx, cancelVerify := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelVerify()
	check, err := ReadCommitted(verifyCtx, cfg.Seeds, cfg.Output, cfg.Records, stats.archivedIDs())
	if err != nil {
		return Summary{}, err
	}
	sum := Summary{
		Check:           check,
		TxnCommitted:    stats.committed.Load(),
		TxnAborted:      stats.aborted.Load(),
		Redelivered:     stats.redelivered.Load(),
		Unacknowledged:  int64(cfg.Records) - acked,
		Elapsed:         elapsed,
		ElapsedSeconds:  elapsed.Seconds(),
		RecordsPerSec:   float64(cfg.Records) / elapsed.Seconds(),
		CommitP50Millis: float64(stats.percentile(0.50)) / float64(time.Millisecond),
		CommitP99Millis: float64(stats.percentile(0.99)) / float64(time.Millisecond),
		Faults:          map[string]int64{},
		WorkerErrors:    stats.restarts.Load(),
	}
	stats.faults.Range(func(k, v any) bool {
		sum.Faults[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return sum, nil
}

// setup creates the topics and sets the group's configs: earliest reset,
// so records written before the group existed are delivered, and the lock
// duration.
func setup(ctx context.Context, cl *kgo.Client, cfg Config) error {
	adm := kadm.NewClient(cl)
	for _, t := range []struct {
		name       string
		partitions int32
	}{{cfg.Input, cfg.InputPartitions}, {cfg.Output, cfg.InputPartitions}} {
		resp, err := adm.CreateTopic(ctx, t.partitions, 1, nil, t.name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerrTopicExists) {
			return fmt.Errorf("create topic %s: %w", t.name, err)
		}
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = cfg.Group
	for name, value := range map[string]string{
		"share.auto.offset.reset":       "earliest",
		"share.record.lock.duration.ms": fmt.Sprint(cfg.LockDuration.Milliseconds()),
		"share.delivery.count.limit":    fmt.Sprint(cfg.DeliveryLimit),
	} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = name, kmsg.StringPtr(value)
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("group configs of %s: %w", cfg.Group, err)
	}
	for _, r := range resp.Resources {
		if err := kerrFor(r.ErrorCode, r.ErrorMessage); err != nil {
			return fmt.Errorf("group configs of %s: %w", cfg.Group, err)
		}
	}
	return nil
}

func inputEnds(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// waitAcknowledged polls the group's share-partition start offsets until
// every input record is acknowledged (or archived), reporting progress; it
// returns how many are.
func waitAcknowledged(ctx context.Context, cl *kgo.Client, cfg Config, ends map[int32]int64, stats *runStats, start time.Time) (int64, error) {
	adm := kadm.NewClient(cl)
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	var acked int64
	lastReport := time.Now()
	for {
		described, err := adm.DescribeShareGroupOffsets(ctx, cfg.Group)
		if err == nil {
			acked = 0
			d := described[cfg.Group]
			for p, end := range ends {
				if o, ok := d.Offsets.Lookup(cfg.Input, p); ok && o.Err == nil && o.StartOffset >= 0 {
					acked += min(o.StartOffset, end)
				}
			}
			if acked >= int64(cfg.Records) {
				return acked, nil
			}
		} else if ctx.Err() == nil {
			cfg.Logger.Debug("describing share-group offsets", "err", err)
		}
		if cfg.Progress != nil && time.Since(lastReport) >= time.Second {
			lastReport = time.Now()
			cfg.Progress(Progress{
				Elapsed:      time.Since(start),
				Acknowledged: acked,
				Inputs:       cfg.Records,
				Committed:    stats.committed.Load(),
				Aborted:      stats.aborted.Load(),
			})
		}
		select {
		case <-ctx.Done():
			return acked, ctx.Err()
		case <-ticker.C:
		}
	}
}
