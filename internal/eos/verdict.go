package eos

import (
	"fmt"
	"strings"
	"time"
)

// The verdicts of a run, and the exit codes the examples end with.
const (
	// VerdictOK: every input was output exactly once in the committed
	// output and acknowledged, except those the run rejected or archived
	// on purpose, which are counted and shown.
	VerdictOK = "OK"
	// VerdictFailed: the run broke exactly-once, or did not do its job:
	// duplicates, lost inputs, inputs archived after failures, outputs that
	// should not exist, nothing written.
	VerdictFailed = "FAILED"
	// VerdictIncomplete: the run was stopped (interrupted, -max-duration)
	// before every input was acknowledged, and nothing it processed broke
	// exactly-once.
	VerdictIncomplete = "INCOMPLETE"
	// VerdictError: the run could not be carried out or met an error it
	// cannot handle (a fatal SDK error that no fault explains, a cluster
	// without KIP-1289); only the -json document uses it.
	VerdictError = "ERROR"
)

// Exit codes of the examples.
const (
	ExitOK         = 0 // exactly-once: OK
	ExitFailed     = 1 // exactly-once: FAILED
	ExitError      = 2 // bad flags, setup failed, a fatal error stopped the run
	ExitIncomplete = 3 // exactly-once: INCOMPLETE
)

// Result is the part of a run's summary that both pipelines share: the
// check, how the run ended and the verdict. Build it with NewResult, which
// fills Verdict, Reason and OK in, so that the JSON report carries them.
type Result struct {
	Check
	// StoppedBy says why the run stopped before every input was
	// acknowledged ("interrupted", "-max-duration 3s"), empty if it did
	// not.
	StoppedBy      string        `json:"stopped_by,omitempty"`
	Elapsed        time.Duration `json:"-"`
	ElapsedSeconds float64       `json:"elapsed_seconds"`
	// RecordsPerSec is the inputs processed per second of the run: what
	// it did, not what it was given.
	RecordsPerSec float64 `json:"records_per_second"`
	Verdict       string  `json:"verdict"`          // VerdictOK, VerdictFailed or VerdictIncomplete
	Reason        string  `json:"reason,omitempty"` // the verdict's parenthesis
	OK            bool    `json:"ok"`
}

// newResult judges check, the verification of a run that took elapsed and
// stopped early for stoppedBy (empty: it did not).
func NewResult(check Check, stoppedBy string, elapsed time.Duration) Result {
	r := Result{Check: check, StoppedBy: stoppedBy, Elapsed: elapsed, ElapsedSeconds: elapsed.Seconds()}
	if elapsed > 0 {
		r.RecordsPerSec = float64(check.Processed) / elapsed.Seconds()
	}
	r.Verdict, r.Reason = judge(check, stoppedBy, elapsed)
	r.OK = r.Verdict == VerdictOK
	return r
}

// judge returns the verdict on a run and the reason that goes with it. A
// violation fails the run even when it stopped early; a run stopped early
// without one is incomplete; a run that acknowledged everything must have
// written every input exactly once.
func judge(c Check, stoppedBy string, elapsed time.Duration) (verdict, reason string) {
	var failed []string
	add := func(n int, what string) {
		if n > 0 {
			failed = append(failed, fmt.Sprintf("%d %s", n, what))
		}
	}
	if c.Inputs == 0 {
		failed = append(failed, "no inputs")
	}
	if c.Outputs == 0 && c.Unacknowledged == 0 && c.Rejected < c.Inputs {
		failed = append(failed, "nothing was written")
	}
	add(c.Duplicates, "duplicates")
	add(c.Missing, "missing")
	add(c.EndUnknown, "passed by the start offset with no output and no end in the share state")
	add(c.ArchivedByFailure, "archived at the delivery limit after failures")
	add(c.RejectedOutput, "outputs of rejected inputs")
	add(c.Unknown, "unknown outputs")
	add(c.StaleCommits, "commits by a worker stopped past its locks")
	if c.DeadLetterTopic != "" {
		add(c.DeadLetterMissing, "rejected inputs without a dead-letter copy")
		add(c.DeadLetterDuplicates, "duplicate dead-letter copies")
		add(c.DeadLetterWrong, "wrong dead-letter copies")
	}
	if c.Unacknowledged > 0 && stoppedBy == "" {
		add(c.Unacknowledged, "inputs not acknowledged")
	}
	switch {
	case len(failed) > 0:
		return VerdictFailed, strings.Join(failed, ", ")
	case c.Unacknowledged > 0:
		return VerdictIncomplete, fmt.Sprintf("stopped by %s after %.1fs: %d of %d inputs processed, none lost or duplicated so far",
			stoppedBy, elapsed.Seconds(), c.Processed, c.Inputs)
	}
	var onPurpose []string
	if c.Rejected > 0 {
		onPurpose = append(onPurpose, fmt.Sprintf("%d rejected on purpose", c.Rejected))
	}
	if c.DeadLetterTopic != "" && c.DeadLetters > 0 {
		onPurpose = append(onPurpose, fmt.Sprintf("%d dead-lettered", c.DeadLetters))
	}
	if c.ArchivedOnPurpose > 0 {
		onPurpose = append(onPurpose, fmt.Sprintf("%d archived after deliberate aborts", c.ArchivedOnPurpose))
	}
	return VerdictOK, strings.Join(onPurpose, ", ")
}

// Line is the verdict line a run ends with: "exactly-once: OK",
// "exactly-once: FAILED (...)" or "exactly-once: INCOMPLETE (...)".
func (r Result) Line() string {
	if r.Reason == "" {
		return "exactly-once: " + r.Verdict
	}
	return "exactly-once: " + r.Verdict + " (" + r.Reason + ")"
}

// ExitCode is the exit code that goes with the verdict.
func (r Result) ExitCode() int {
	switch r.Verdict {
	case VerdictOK:
		return ExitOK
	case VerdictIncomplete:
		return ExitIncomplete
	}
	return ExitFailed
}

// rows returns the table rows of the result that both pipelines print,
// outputs named as outputsName.
func (r Result) rows(outputsName string) [][2]string {
	rows := [][2]string{
		{"inputs", fmt.Sprint(r.Inputs)},
		{outputsName, fmt.Sprint(r.Outputs)},
		{"inputs processed (output or rejected)", fmt.Sprint(r.Processed)},
		{"inputs acknowledged (below start offsets)", fmt.Sprint(r.Acknowledged)},
		{"duplicates", fmt.Sprint(r.Duplicates)},
		{"missing (acknowledged, no output)", fmt.Sprint(r.Missing)},
		{"rejected on purpose", fmt.Sprint(r.Rejected)},
		{"archived after failures (delivery limit)", fmt.Sprint(r.ArchivedByFailure)},
		{"archived after deliberate aborts", fmt.Sprint(r.ArchivedOnPurpose)},
		{"outputs of rejected inputs", fmt.Sprint(r.RejectedOutput)},
		{"unknown outputs", fmt.Sprint(r.Unknown)},
		{"archived inputs known from", r.ShareState},
	}
	if r.DeadLetterTopic != "" {
		rows = append(rows,
			[2]string{"dead-letter copies (" + r.DeadLetterTopic + ")", fmt.Sprint(r.DeadLetters)},
			[2]string{"rejected inputs without a dead-letter copy", fmt.Sprint(r.DeadLetterMissing)},
			[2]string{"duplicate or wrong dead-letter copies", fmt.Sprint(r.DeadLetterDuplicates + r.DeadLetterWrong)},
		)
	}
	if r.EndUnknown > 0 {
		rows = append(rows, [2]string{"no output, end unknown", fmt.Sprint(r.EndUnknown)})
	}
	if r.StoppedBy != "" {
		rows = append(rows, [2]string{"stopped by", r.StoppedBy})
	}
	return append(rows,
		[2]string{"elapsed", fmt.Sprintf("%.1fs", r.ElapsedSeconds)},
		[2]string{"throughput", fmt.Sprintf("%.0f inputs processed/s", r.RecordsPerSec)},
	)
}
