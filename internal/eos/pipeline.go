package eos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kshare-go/kshare/internal/kgoclient"
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
	// Ledger is the claim ledger topic the workers commit through ("":
	// KIP-1289).
	Ledger string
	// ReplicationFactor is that of the topics the run creates (0 or -1:
	// the cluster's default).
	ReplicationFactor int16
	// DeadLetterTopic, if set, is where the workers write the dead-letter
	// copy of each record they reject, in the transaction that rejects
	// it (Worker.DeadLetter); the verification checks that each rejected
	// input has exactly one committed copy there.
	DeadLetterTopic string

	// InputPartitions is the partition count of both topics (default 6).
	InputPartitions int32
	// Records is how many input records the run writes and processes.
	Records int
	// RejectEvery makes every RejectEvery-th input record poison: a value
	// the transform must refuse and the worker must acknowledge with
	// REJECT, so that it is archived on purpose and has no output (0:
	// none).
	RejectEvery int
	// Workers is how many worker instances run at once (default 4).
	Workers int
	// TxnSize caps the records of one transaction (default 500).
	TxnSize int
	// TxnTimeout is each worker's transaction timeout (default 10s plus
	// TxnHold); a killed worker's open transaction is aborted when a new
	// instance fences it or when it times out.
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
	// Logger receives the run's log lines (default: discard). Records
	// that an injected fault explains are logged at INFO with the fault's
	// name.
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
	// The faults of the claim ledger's race (Config.Ledger set; without
	// a ledger they do nothing). KillAfterCommit kills a worker once its
	// commit is answered and before its consumer sends the
	// acknowledgements: the records come back, and the ledger must settle
	// them. DropSession drops the connections of a worker's share
	// consumer while its transaction is open (Kafka then releases what
	// the session holds): the renewal before EndTxn must fail, or find
	// the records held again. PausePastLock stops a worker once its
	// claims are durable, writes of its consumer included (as a stopped
	// process), until its locks have run out, and then lets it go on:
	// its commit must fail (a commit is a violation the verdict counts).
	KillAfterCommit, DropSession, PausePastLock bool
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
	return f.KillWorker || f.CoordinatorMoves || f.Zombie || f.SlowWorker || f.AbortEvery > 0 ||
		f.KillAfterCommit || f.DropSession || f.PausePastLock
}

// ledger reports whether any fault of the claim ledger's race is enabled.
func (f Faults) ledger() bool { return f.KillAfterCommit || f.DropSession || f.PausePastLock }

// Summary is the outcome of a consume-transform-produce run: the verdict
// on what the read_committed check found, the run's counters and timings,
// and the faults injected, by name. The JSON names are those of the
// report that examples/ctp writes.
type Summary struct {
	Result
	TxnCommitted    int64            `json:"transactions_committed"`
	TxnAborted      int64            `json:"transactions_aborted"`
	Redelivered     int64            `json:"records_redelivered"`
	CommitP50Millis float64          `json:"commit_latency_p50_ms"`
	CommitP99Millis float64          `json:"commit_latency_p99_ms"`
	Faults          map[string]int64 `json:"faults_injected"`
}

// WriteTable prints the summary as an aligned two-column table, ending with
// the verdict line.
func (s Summary) WriteTable(w io.Writer) error {
	rows := append(s.rows("outputs seen (read_committed)"),
		[2]string{"transactions committed", fmt.Sprint(s.TxnCommitted)},
		[2]string{"transactions aborted", fmt.Sprint(s.TxnAborted)},
		[2]string{"records redelivered", fmt.Sprint(s.Redelivered)},
		[2]string{"commit latency p50", fmt.Sprintf("%.1f ms", s.CommitP50Millis)},
		[2]string{"commit latency p99", fmt.Sprintf("%.1f ms", s.CommitP99Millis)},
	)
	return writeTable(w, rows, s.Faults, s.Result)
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
		// A transform that holds every transaction open gets the time
		// to commit it.
		c.TxnTimeout = 10*time.Second + c.TxnHold
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

func (c *Config) validate() error {
	switch {
	case len(c.Seeds) == 0:
		return errors.New("no seed brokers")
	case c.Input == "" || c.Output == "" || c.Group == "":
		return errors.New("input topic, output topic and group are required")
	case c.Records <= 0:
		return fmt.Errorf("records %d is not positive", c.Records)
	case c.RejectEvery < 0 || c.RejectEvery == 1:
		return fmt.Errorf("RejectEvery %d: must be 0 (none) or at least 2", c.RejectEvery)
	case c.Faults.AbortEvery < 0 || c.Faults.AbortEvery == 1:
		return fmt.Errorf("AbortEvery %d: must be 0 (never) or at least 2, or no transaction would ever commit", c.Faults.AbortEvery)
	case c.TxnHold < 0:
		return fmt.Errorf("TxnHold %v is negative", c.TxnHold)
	}
	return nil
}

// settleMargin is how long past the transaction timeout the verification
// waits for a transaction left open to be aborted by its coordinator.
const settleMargin = 5 * time.Second

// Run sets up the topics and the group, writes the input, runs loop in
// cfg.Workers slots while injecting cfg.Faults until every input record is
// acknowledged, and checks the committed output with a read_committed
// reader.
//
// When ctx ends or MaxDuration passes first, Run stops the workers and
// still checks what they did: the summary's StoppedBy says why (ctx's
// cause, if it has one) and its verdict is INCOMPLETE unless that check
// found a violation. MaxDuration counts from the start, setup and input
// included: a run stopped before its workers started reports INCOMPLETE
// with nothing processed and is not checked. An error means the run could not be carried out: a
// bad config, a cluster that refused the setup, or a worker that stopped
// with an error that no injected fault explains (a fatal SDK error, for
// example on a cluster without KIP-1289); the run is then stopped at once
// and not checked.
func Run(ctx context.Context, cfg Config, loop WorkerFunc) (Summary, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return Summary{}, fmt.Errorf("pipeline config: %w", err)
	}
	var logs *faultHandler
	cfg.Logger, logs = faultLogger(cfg.Logger)
	run := newRunScope(ctx, cfg.MaxDuration)
	admin, in, err := prepare(run.run, cfg.Seeds, groupSetup{
		topics:        deadLetterTopic([]string{cfg.Input, cfg.Output}, cfg.DeadLetterTopic),
		partitions:    cfg.InputPartitions,
		group:         cfg.Group,
		lockDuration:  cfg.LockDuration,
		deliveryLimit: cfg.DeliveryLimit,
		replication:   cfg.ReplicationFactor,
	}, cfg.Input, cfg.Records, cfg.RejectEvery, cfg.Logger)
	if err != nil {
		if r, stopped := run.stoppedInSetup(cfg.Records, err); stopped {
			return Summary{Result: r}, nil
		}
		return Summary{}, err
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	state, stateWhy := followShareState(run.run, cfg.Seeds, adm, cfg.Group, in)
	defer state.stop()

	if cfg.Ledger != "" && cfg.Faults.ledger() {
		// Before any worker's client exists: the faults act on its
		// connections.
		kgoclient.InjectFaults.Store(true)
		ledgerFaultHooks()
	}
	stats := &runStats{}
	pool := newWorkerPool(cfg, loop, stats, logs, run.fail)
	run.spawn(pool.run)
	if cfg.Faults.Any() {
		run.spawn(func(ctx context.Context) { injectFaults(ctx, cfg, admin, pool) })
	}
	w := &watcher{
		adm: adm, group: cfg.Group, in: in, stats: stats, log: cfg.Logger, progress: cfg.Progress,
		labels: [3]string{"transactions", "committed", "aborted"},
		counts: func() (int64, int64) { return stats.committed.Load(), stats.aborted.Load() },
		idle:   pool.idle,
		fail:   run.fail,
	}
	elapsed, stoppedBy, err := run.end(w.watch(run.ctx, run.start))
	if err != nil {
		return Summary{}, err
	}
	result, err := checkAndJudge(ctx, elapsed, stoppedBy, func(ctx context.Context) (Check, error) {
		return finalCheck(ctx, adm, cfg.Group, cfg.Input, func(ctx context.Context, start map[int32]int64) (Check, error) {
			ends := state.endings(ctx, adm, in, stats.archivedValues(), stateWhy)
			c, err := ReadCommitted(ctx, cfg.Seeds, cfg.Output, in, start, ends, cfg.TxnTimeout+settleMargin)
			if err != nil {
				return c, err
			}
			c.StaleCommits = int(stats.staleCommits.Load())
			if cfg.DeadLetterTopic != "" {
				c.DeadLetterTopic = cfg.DeadLetterTopic
				c.DeadLetterCheck, err = checkDeadLetters(ctx, cfg.Seeds, cfg.DeadLetterTopic, cfg.Group, in, start, ends, cfg.TxnTimeout+settleMargin)
			}
			return c, err
		})
	})
	if err != nil {
		return Summary{}, err
	}
	return Summary{
		Result:          result,
		TxnCommitted:    stats.committed.Load(),
		TxnAborted:      stats.aborted.Load(),
		Redelivered:     stats.redelivered.Load(),
		CommitP50Millis: stats.percentileMillis(0.50),
		CommitP99Millis: stats.percentileMillis(0.99),
		Faults:          stats.faultCounts(),
	}, nil
}

// deadLetterTopic returns topics with the dead-letter topic, if any.
func deadLetterTopic(topics []string, dlq string) []string {
	if dlq == "" {
		return topics
	}
	return append(topics, dlq)
}
