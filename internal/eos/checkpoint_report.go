package eos

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// checkpointStats is shared by the readers and the coordinator. The
// embedded runStats keeps reader commits (committed), acknowledged
// records, redeliveries, archived inputs, faults and commit latencies as
// in the consume-transform-produce run.
type checkpointStats struct {
	runStats
	completed, completedWithRecords          atomic.Int64
	failedOnPurpose, declined, longCompleted atomic.Int64
	commitFailures, releaseFailures          atomic.Int64
	stagedRedelivered, heldPastLock          atomic.Int64
	// stallClaim is taken by the first reader with records that meets a
	// barrier offering a slow snapshot; stalling counts the slow
	// snapshots whose checkpoint is not decided yet: the run does not
	// end under one, or a run whose other readers finished the input
	// meanwhile would never see the stalled reader decline.
	stallClaim atomic.Bool
	stalling   atomic.Int64
	// staged maps the id of every record in a staged checkpoint that is
	// not being resolved yet to its reader: such a record must not be
	// delivered again.
	staged sync.Map
}

// CheckpointSummary is the outcome of a checkpoint run. Its Check
// describes the committed sink.
type CheckpointSummary struct {
	Result
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
	CommitP50Millis   float64          `json:"checkpoint_commit_latency_p50_ms"`
	CommitP99Millis   float64          `json:"checkpoint_commit_latency_p99_ms"`
	Faults            map[string]int64 `json:"faults_injected"`
}

func (s *checkpointStats) summary(cfg CheckpointConfig, r Result) CheckpointSummary {
	sum := CheckpointSummary{
		Result:               r,
		CheckpointsCompleted: s.completed.Load(),
		CompletedWithRecords: s.completedWithRecords.Load(),
		FailedOnPurpose:      s.failedOnPurpose.Load(),
		DeclinedByReader:     s.declined.Load(),
		LongCheckpoints:      s.longCompleted.Load(),
		RecordsHeldPastLock:  s.heldPastLock.Load(),
		LockDurationMillis:   cfg.LockDuration.Milliseconds(),
		ReaderCommits:        s.committed.Load(),
		CommitFailures:       s.commitFailures.Load(),
		ReleaseFailures:      s.releaseFailures.Load(),
		Redelivered:          s.redelivered.Load(),
		StagedRedelivered:    s.stagedRedelivered.Load(),
		CommitP50Millis:      s.percentileMillis(0.50),
		CommitP99Millis:      s.percentileMillis(0.99),
		Faults:               s.faultCounts(),
	}
	sum.CheckpointsFailed = sum.FailedOnPurpose + sum.DeclinedByReader
	return sum
}

// WriteTable prints the summary as an aligned two-column table, ending
// with the verdict line.
func (s CheckpointSummary) WriteTable(w io.Writer) error {
	rows := append(s.rows("committed outputs (sink)"),
		[2]string{"checkpoints completed", fmt.Sprintf("%d (%d with records)", s.CheckpointsCompleted, s.CompletedWithRecords)},
		[2]string{"checkpoints failed", fmt.Sprintf("%d (%d on purpose, %d declined by a reader)", s.CheckpointsFailed, s.FailedOnPurpose, s.DeclinedByReader)},
		[2]string{"checkpoints longer than the lock", fmt.Sprintf("%d (lock %dms, %d records committed after it)", s.LongCheckpoints, s.LockDurationMillis, s.RecordsHeldPastLock)},
		[2]string{"reader commits", fmt.Sprintf("%d (%d failed)", s.ReaderCommits, s.CommitFailures)},
		[2]string{"reader releases failed", fmt.Sprint(s.ReleaseFailures)},
		[2]string{"records redelivered", fmt.Sprint(s.Redelivered)},
		[2]string{"staged records redelivered", fmt.Sprint(s.StagedRedelivered)},
		[2]string{"checkpoint commit latency p50", fmt.Sprintf("%.1f ms", s.CommitP50Millis)},
		[2]string{"checkpoint commit latency p99", fmt.Sprintf("%.1f ms", s.CommitP99Millis)},
	)
	return writeTable(w, rows, s.Faults, s.Result)
}
