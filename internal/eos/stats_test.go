package eos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWaitsDescribeWhatTheRunWaitsFor(t *testing.T) {
	var w waits
	now := time.Now()
	require.Empty(t, w.describe(now))
	w.add("expired locks of killed worker 2", 3, now.Add(2100*time.Millisecond))
	slow := w.add("slow worker 1, stalled past its locks", 500, now.Add(time.Second))
	w.add("a wait that is over", 0, now.Add(-time.Second))
	require.Equal(t, "waiting for slow worker 1, stalled past its locks (500 records), 1.0 s left; expired locks of killed worker 2 (3 records), 2.1 s left", w.describe(now))
	w.done(slow)
	require.Equal(t, "waiting for expired locks of killed worker 2 (3 records), 2.1 s left", w.describe(now))
	require.Empty(t, w.describe(now.Add(3*time.Second)), "over once its time has passed")
}

func TestProgressLineSaysWhatItCounts(t *testing.T) {
	p := Progress{Elapsed: 5 * time.Second, Inputs: 100000, Outputs: 21533, Acknowledged: 21533, Committed: 66, Aborted: 1,
		Labels: [3]string{"transactions", "committed", "aborted"}}
	require.Equal(t, "  5.0s  output 21533  acknowledged 21533/100000  transactions committed 66 aborted 1", p.String())
	p.Waiting = "waiting for x, 1.0 s left"
	require.Equal(t, "  5.0s  output 21533  acknowledged 21533/100000  transactions committed 66 aborted 1  | waiting for x, 1.0 s left", p.String())
}

func TestArchiveFailureOutranksPurpose(t *testing.T) {
	var s runStats
	s.noteArchived("a", ArchivedOnPurpose)
	s.noteArchived("a", ArchivedByFailure)
	s.noteArchived("b", ArchivedByFailure)
	s.noteArchived("b", ArchivedOnPurpose)
	require.Equal(t, map[string]Archive{"a": ArchivedByFailure, "b": ArchivedByFailure}, s.archivedValues())
}
