package eos

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
)

// WriteTable prints the summary as an aligned two-column table, ending with
// the verdict line.
func (s Summary) WriteTable(w io.Writer) error {
	rows := [][2]string{
		{"inputs", fmt.Sprint(s.Inputs)},
		{"outputs seen (read_committed)", fmt.Sprint(s.Outputs)},
		{"duplicates", fmt.Sprint(s.Duplicates)},
		{"missing", fmt.Sprint(s.Missing)},
		{"archived (delivery limit)", fmt.Sprint(s.Archived)},
		{"unknown outputs", fmt.Sprint(s.Unknown)},
		{"inputs not acknowledged", fmt.Sprint(s.Unacknowledged)},
		{"transactions committed", fmt.Sprint(s.TxnCommitted)},
		{"transactions aborted", fmt.Sprint(s.TxnAborted)},
		{"records redelivered", fmt.Sprint(s.Redelivered)},
		{"worker restarts", fmt.Sprint(s.WorkerErrors)},
		{"elapsed", fmt.Sprintf("%.1fs", s.ElapsedSeconds)},
		{"throughput", fmt.Sprintf("%.0f records/s", s.RecordsPerSec)},
		{"commit latency p50", fmt.Sprintf("%.1f ms", s.CommitP50Millis)},
		{"commit latency p99", fmt.Sprintf("%.1f ms", s.CommitP99Millis)},
	}
	return writeTable(w, rows, s.Faults, s.Check, s.Verdict())
}

// writeTable prints rows, then a row per fault in name order and the
// check's samples, as an aligned two-column table, and ends with the
// verdict line. The error is the first failed write to w.
func writeTable(w io.Writer, rows [][2]string, faults map[string]int64, check Check, verdict string) error {
	names := make([]string, 0, len(faults))
	for name := range faults {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rows = append(rows, [2]string{"fault: " + name, fmt.Sprint(faults[name])})
	}
	if len(check.MissingSample) > 0 {
		rows = append(rows, [2]string{"missing (sample)", fmt.Sprint(check.MissingSample)})
	}
	if len(check.DuplicateSample) > 0 {
		rows = append(rows, [2]string{"duplicated (sample)", fmt.Sprint(check.DuplicateSample)})
	}
	if len(check.MissingByPartition) > 0 {
		rows = append(rows, [2]string{"missing by output partition", fmt.Sprint(check.MissingByPartition)})
	}
	if len(check.DuplicatesByPartition) > 0 {
		// fmt prints maps sorted by key.
		rows = append(rows, [2]string{"duplicate copies by output partition", fmt.Sprint(check.DuplicatesByPartition)})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, verdict)
	return err
}
