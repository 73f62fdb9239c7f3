package eos

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// committedSink is the pipeline's output: the ids of every checkpoint
// whose acknowledgements committed, counted. Output of a checkpoint that
// failed never reaches it, so it holds exactly what a downstream system
// would have committed.
type committedSink struct {
	mu     sync.Mutex
	counts map[string]int
	n      int64
}

func newCommittedSink(capacity int) *committedSink {
	return &committedSink{counts: make(map[string]int, capacity)}
}

func (s *committedSink) commit(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.counts[id]++
	}
	s.n += int64(len(ids))
}

func (s *committedSink) total() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// check compares the sink with the ids ID(0)..ID(inputs-1); a missing id
// among archived counts as Archived, not Missing.
func (s *committedSink) check(inputs int, archived map[string]bool) Check {
	s.mu.Lock()
	defer s.mu.Unlock()
	check := checkCounts(s.counts, inputs, archived)
	check.Outputs = int(s.n)
	return check
}

// checkpointStats is shared by the readers and the coordinator. The
// embedded runStats keeps redeliveries, archived ids, faults and commit
// latencies as in the consume-transform-produce run.
type checkpointStats struct {
	runStats
	completed, completedWithRecords                atomic.Int64
	failedOnPurpose, declined, longCompleted       atomic.Int64
	readerCommits, commitFailures, releaseFailures atomic.Int64
	stagedRedelivered, heldPastLock                atomic.Int64
	// staged maps the id of every record in a staged checkpoint that is
	// not being resolved yet to its reader: such a record must not be
	// delivered again.
	staged sync.Map
}

// CheckpointSummary is the outcome of a checkpoint run. Check describes
// the committed sink.
type CheckpointSummary struct {
	Check
	CheckpointsCompleted int64 `json:"checkpoints_completed"`
	// CompletedWithRecords counts the completed checkpoints that held
	// records; the others were empty.
	CompletedWithRecords int64 `json:"checkpoints_completed_with_records"`
	// CheckpointsFailed = FailedOnPurpose + DeclinedByReader.
	CheckpointsFailed int64 `json:"checkpoints_failed"`
	FailedOnPurpose   int64 `json:"checkpoints_failed_on_purpose"`
	DeclinedByReader  int64 `json:"checkpoints_declined_by_a_reader"`
	// LongCheckpoints counts completed checkpoints with records that took
	// longer than the lock duration; RecordsHeldPastLock counts records
	// committed longer than the lock duration after they were staged.
	LongCheckpoints     int64 `json:"checkpoints_longer_than_lock"`
	RecordsHeldPastLock int64 `json:"records_committed_after_lock_duration"`
	LockDurationMillis  int64 `json:"lock_duration_ms"`
	ReaderCommits       int64 `json:"reader_commits"`
	CommitFailures      int64 `json:"reader_commits_failed"`
	ReleaseFailures     int64 `json:"reader_releases_failed"`
	Redelivered         int64 `json:"records_redelivered"`
	// StagedRedelivered counts records delivered again while their
	// checkpoint was staged and undecided: a lock that was not renewed.
	StagedRedelivered int64            `json:"staged_records_redelivered"`
	Unacknowledged    int64            `json:"inputs_not_acknowledged"`
	Elapsed           time.Duration    `json:"-"`
	ElapsedSeconds    float64          `json:"elapsed_seconds"`
	RecordsPerSec     float64          `json:"records_per_second"`
	CommitP50Millis   float64          `json:"checkpoint_commit_latency_p50_ms"`
	CommitP99Millis   float64          `json:"checkpoint_commit_latency_p99_ms"`
	Faults            map[string]int64 `json:"faults_injected"`
}

func (s *checkpointStats) summary(cfg CheckpointConfig, check Check, unacked int64, elapsed time.Duration) CheckpointSummary {
	sum := CheckpointSummary{
		Check:                check,
		CheckpointsCompleted: s.completed.Load(),
		CompletedWithRecords: s.completedWithRecords.Load(),
		FailedOnPurpose:      s.failedOnPurpose.Load(),
		DeclinedByReader:     s.declined.Load(),
		LongCheckpoints:      s.longCompleted.Load(),
		RecordsHeldPastLock:  s.heldPastLock.Load(),
		LockDurationMillis:   cfg.LockDuration.Milliseconds(),
		ReaderCommits:        s.readerCommits.Load(),
		CommitFailures:       s.commitFailures.Load(),
		ReleaseFailures:      s.releaseFailures.Load(),
		Redelivered:          s.redelivered.Load(),
		StagedRedelivered:    s.stagedRedelivered.Load(),
		Unacknowledged:       unacked,
		Elapsed:              elapsed,
		ElapsedSeconds:       elapsed.Seconds(),
		RecordsPerSec:        float64(cfg.Records) / elapsed.Seconds(),
		CommitP50Millis:      float64(s.percentile(0.50)) / float64(time.Millisecond),
		CommitP99Millis:      float64(s.percentile(0.99)) / float64(time.Millisecond),
		Faults:               map[string]int64{},
	}
	sum.CheckpointsFailed = sum.FailedOnPurpose + sum.DeclinedByReader
	s.faults.Range(func(k, v any) bool {
		sum.Faults[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return sum
}

// OK reports whether the run was exactly-once: every input id in the
// committed sink once and every input record acknowledged.
func (s CheckpointSummary) OK() bool { return s.Check.OK() && s.Unacknowledged == 0 }

// Verdict is the last line a run prints, worded as for the
// consume-transform-produce run.
func (s CheckpointSummary) Verdict() string {
	return Summary{Check: s.Check, Unacknowledged: s.Unacknowledged}.Verdict()
}

// WriteTable prints the summary as an aligned two-column table, ending
// with the verdict line.
func (s CheckpointSummary) WriteTable(w io.Writer) error {
	rows := [][2]string{
		{"inputs", fmt.Sprint(s.Inputs)},
		{"committed outputs (sink)", fmt.Sprint(s.Outputs)},
		{"duplicates", fmt.Sprint(s.Duplicates)},
		{"missing", fmt.Sprint(s.Missing)},
		{"archived (delivery limit)", fmt.Sprint(s.Archived)},
		{"unknown outputs", fmt.Sprint(s.Unknown)},
		{"inputs not acknowledged", fmt.Sprint(s.Unacknowledged)},
		{"checkpoints completed", fmt.Sprintf("%d (%d with records)", s.CheckpointsCompleted, s.CompletedWithRecords)},
		{"checkpoints failed", fmt.Sprintf("%d (%d on purpose, %d declined by a reader)", s.CheckpointsFailed, s.FailedOnPurpose, s.DeclinedByReader)},
		{"checkpoints longer than the lock", fmt.Sprintf("%d (lock %dms, %d records committed after it)", s.LongCheckpoints, s.LockDurationMillis, s.RecordsHeldPastLock)},
		{"reader commits", fmt.Sprintf("%d (%d failed)", s.ReaderCommits, s.CommitFailures)},
		{"reader releases failed", fmt.Sprint(s.ReleaseFailures)},
		{"records redelivered", fmt.Sprint(s.Redelivered)},
		{"staged records redelivered", fmt.Sprint(s.StagedRedelivered)},
		{"elapsed", fmt.Sprintf("%.1fs", s.ElapsedSeconds)},
		{"throughput", fmt.Sprintf("%.0f records/s", s.RecordsPerSec)},
		{"checkpoint commit latency p50", fmt.Sprintf("%.1f ms", s.CommitP50Millis)},
		{"checkpoint commit latency p99", fmt.Sprintf("%.1f ms", s.CommitP99Millis)},
	}
	return writeTable(w, rows, s.Faults, s.Check, s.Verdict())
}
