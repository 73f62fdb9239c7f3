package eos

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testInput places n inputs round-robin on 3 partitions, every
// rejectEvery-th poison, as WriteInput would have.
func testInput(n, rejectEvery int) *Input {
	in := &Input{Topic: "in", N: n, RejectEvery: rejectEvery, partition: make([]int32, n), offset: make([]int64, n), sorted: map[int32][]int64{}}
	for i := range n {
		p := int32(i % 3)
		in.partition[i], in.offset[i] = p, int64(i/3)
		in.sorted[p] = append(in.sorted[p], in.offset[i])
	}
	return in
}

// allAcknowledged returns start offsets past every input of in.
func allAcknowledged(in *Input) map[int32]int64 {
	out := make(map[int32]int64, len(in.sorted))
	for p, offs := range in.sorted {
		out[p] = offs[len(offs)-1] + 1
	}
	return out
}

// outputsOf counts one output per input value of in, except for poison
// inputs and those skip rejects.
func outputsOf(in *Input, skip func(i int) bool) (map[string]int, int) {
	counts := map[string]int{}
	n := 0
	for i := range in.N {
		if in.Poison(i) || (skip != nil && skip(i)) {
			continue
		}
		counts[in.Value(i)]++
		n++
	}
	return counts, n
}

// TestVerdictForEveryOutcome drives the verdict through the check that
// produces it: every wrong outcome of a run must give FAILED (exit 1) or,
// stopped early without a violation, INCOMPLETE (exit 3); only a run that
// output and acknowledged everything is OK (exit 0).
func TestVerdictForEveryOutcome(t *testing.T) {
	const n = 30
	type outcome struct {
		name      string
		in        *Input
		counts    func(in *Input) (map[string]int, int)
		start     func(in *Input) map[int32]int64
		archived  map[string]Archive
		stoppedBy string
		verdict   string
		exit      int
		reason    string // a part of the reason
	}
	exact := func(in *Input) (map[string]int, int) { return outputsOf(in, nil) }
	cases := []outcome{
		{name: "exactly once", counts: exact, verdict: VerdictOK, exit: ExitOK},
		{
			name:   "nothing written, everything archived after failures",
			counts: func(*Input) (map[string]int, int) { return map[string]int{}, 0 },
			archived: func() map[string]Archive {
				a := map[string]Archive{}
				for i := range n {
					a[ID(i)] = ArchivedByFailure
				}
				return a
			}(),
			verdict: VerdictFailed, exit: ExitFailed, reason: "nothing was written, 30 archived at the delivery limit after failures",
		},
		{
			name:    "nothing written, acknowledged without output",
			counts:  func(*Input) (map[string]int, int) { return map[string]int{}, 0 },
			verdict: VerdictFailed, exit: ExitFailed, reason: "nothing was written, 30 missing",
		},
		{
			name: "duplicates",
			counts: func(in *Input) (map[string]int, int) {
				c, k := exact(in)
				c[ID(4)]++
				c[ID(7)] += 2
				return c, k + 3
			},
			verdict: VerdictFailed, exit: ExitFailed, reason: "3 duplicates",
		},
		{
			name: "missing",
			counts: func(in *Input) (map[string]int, int) {
				return outputsOf(in, func(i int) bool { return i == 3 || i == 4 })
			},
			verdict: VerdictFailed, exit: ExitFailed, reason: "2 missing",
		},
		{
			name:     "archived by failure",
			counts:   func(in *Input) (map[string]int, int) { return outputsOf(in, func(i int) bool { return i == 5 }) },
			archived: map[string]Archive{ID(5): ArchivedByFailure},
			verdict:  VerdictFailed, exit: ExitFailed, reason: "1 archived at the delivery limit after failures",
		},
		{
			name:     "archived after deliberate aborts",
			counts:   func(in *Input) (map[string]int, int) { return outputsOf(in, func(i int) bool { return i == 5 }) },
			archived: map[string]Archive{ID(5): ArchivedOnPurpose},
			verdict:  VerdictOK, exit: ExitOK, reason: "1 archived after deliberate aborts",
		},
		{name: "poison rejected on purpose", in: testInput(n, 10), counts: exact, verdict: VerdictOK, exit: ExitOK, reason: "3 rejected on purpose"},
		{
			name: "output of a poison input",
			in:   testInput(n, 10),
			counts: func(in *Input) (map[string]int, int) {
				c, k := exact(in)
				c[in.Value(9)]++
				return c, k + 1
			},
			verdict: VerdictFailed, exit: ExitFailed, reason: "1 outputs of rejected inputs",
		},
		{
			name: "unknown output",
			counts: func(in *Input) (map[string]int, int) {
				c, k := exact(in)
				c["not-an-id"]++
				return c, k + 1
			},
			verdict: VerdictFailed, exit: ExitFailed, reason: "1 unknown outputs",
		},
		{
			name:      "incomplete",
			counts:    func(in *Input) (map[string]int, int) { return outputsOf(in, func(i int) bool { return i >= 15 }) },
			start:     func(*Input) map[int32]int64 { return map[int32]int64{0: 5, 1: 5, 2: 5} },
			stoppedBy: "max duration 3s",
			verdict:   VerdictIncomplete, exit: ExitIncomplete, reason: "stopped by max duration 3s after 3.0s: 15 of 30 inputs processed",
		},
		{
			name: "incomplete with a duplicate",
			counts: func(in *Input) (map[string]int, int) {
				c, k := outputsOf(in, func(i int) bool { return i >= 15 })
				c[ID(0)]++
				return c, k + 1
			},
			start:     func(*Input) map[int32]int64 { return map[int32]int64{0: 5, 1: 5, 2: 5} },
			stoppedBy: "Ctrl-C (SIGINT)",
			verdict:   VerdictFailed, exit: ExitFailed, reason: "1 duplicates",
		},
		{
			name:      "incomplete with an acknowledged input lost",
			counts:    func(in *Input) (map[string]int, int) { return outputsOf(in, func(i int) bool { return i >= 14 }) },
			start:     func(*Input) map[int32]int64 { return map[int32]int64{0: 5, 1: 5, 2: 5} },
			stoppedBy: "Ctrl-C (SIGINT)",
			verdict:   VerdictFailed, exit: ExitFailed, reason: "1 missing",
		},
		{
			name:    "not acknowledged without being stopped",
			counts:  exact,
			start:   func(*Input) map[int32]int64 { return map[int32]int64{0: 10, 1: 10, 2: 9} },
			verdict: VerdictFailed, exit: ExitFailed, reason: "1 inputs not acknowledged",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if in == nil {
				in = testInput(n, 0)
			}
			start := allAcknowledged(in)
			if tc.start != nil {
				start = tc.start(in)
			}
			counts, outputs := tc.counts(in)
			r := NewResult(checkCounts(counts, outputs, in, start, Endings{Archived: tc.archived}), tc.stoppedBy, 3*time.Second)
			require.Equal(t, tc.verdict, r.Verdict, r.Line())
			require.Equal(t, tc.exit, r.ExitCode())
			require.Equal(t, tc.verdict == VerdictOK, r.OK)
			require.Contains(t, r.Reason, tc.reason)
			require.True(t, strings.HasPrefix(r.Line(), "exactly-once: "+tc.verdict), r.Line())
		})
	}
}

func TestIncompleteThroughputCountsWhatWasProcessed(t *testing.T) {
	in := testInput(300, 0)
	// 60 inputs output and acknowledged, but the start offsets stay
	// behind a record still locked: only 30 are below them.
	counts, outputs := outputsOf(in, func(i int) bool { return i >= 60 })
	r := NewResult(checkCounts(counts, outputs, in, map[int32]int64{0: 10, 1: 10, 2: 10}, Endings{}), "Ctrl-C (SIGINT)", 2*time.Second)
	require.Equal(t, VerdictIncomplete, r.Verdict)
	require.Equal(t, 30, r.Acknowledged)
	require.Equal(t, 270, r.Unacknowledged)
	require.Equal(t, 60, r.Processed)
	require.InDelta(t, 30, r.RecordsPerSec, 0.001, "60 inputs processed in 2s, not 300")
	require.Zero(t, r.Missing, "inputs not yet acknowledged are not missing")
	require.Contains(t, r.Reason, "60 of 300 inputs processed")
}

func TestCheckSamplesMissingRunsAndDuplicates(t *testing.T) {
	in := testInput(12, 0)
	counts, outputs := outputsOf(in, func(i int) bool { return i == 3 || i == 4 || i == 9 })
	counts[ID(6)]++
	c := checkCounts(counts, outputs+1, in, allAcknowledged(in), Endings{})
	require.Equal(t, []string{ID(3) + ".." + ID(4), ID(9)}, c.MissingSample)
	require.Equal(t, []string{ID(6)}, c.DuplicateSample)
	require.Equal(t, 12, c.Acknowledged)
}

// An input with no output is lost only when the broker acknowledged it:
// when the share state was followed, one the broker archived counts as
// archived after a failure (even if no worker saw it at the limit), one
// whose end the state does not show is counted as such, and both fail
// the run; without the share state every one of them is missing.
func TestCheckLearnsArchivedInputsFromTheBroker(t *testing.T) {
	in := testInput(12, 0)
	counts, outputs := outputsOf(in, func(i int) bool { return i == 3 || i == 4 || i == 9 })
	onPurpose := map[string]Archive{ID(4): ArchivedOnPurpose}

	withBroker := Endings{Archived: onPurpose, Broker: map[int]int8{3: stateArchived, 4: stateArchived, 9: stateAcknowledged}}
	c := checkCounts(counts, outputs, in, allAcknowledged(in), withBroker)
	require.Equal(t, 1, c.ArchivedByFailure, "the broker archived input 3 and no worker saw it")
	require.Equal(t, 1, c.ArchivedOnPurpose, "input 4, archived after a deliberate abort")
	require.Equal(t, 1, c.Missing, "the broker acknowledged input 9 without an output")
	require.Equal(t, []string{ID(9)}, c.MissingSample)
	require.Equal(t, "broker", c.ShareState)
	r := NewResult(c, "", time.Second)
	require.Equal(t, VerdictFailed, r.Verdict)
	require.Equal(t, "1 missing, 1 archived at the delivery limit after failures", r.Reason)

	unknown := Endings{Broker: map[int]int8{3: stateArchived, 4: stateArchived}}
	c = checkCounts(counts, outputs, in, allAcknowledged(in), unknown)
	require.Equal(t, 1, c.EndUnknown)
	require.Zero(t, c.Missing)
	require.Contains(t, NewResult(c, "", time.Second).Reason, "1 passed by the start offset with no output and no end in the share state")

	c = checkCounts(counts, outputs, in, allAcknowledged(in), Endings{Archived: onPurpose, BrokerWhy: "the test"})
	require.Equal(t, 2, c.Missing, "without the broker's view, every unexplained input is missing")
	require.Equal(t, "workers only: the test", c.ShareState)
}
