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
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
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
	names := make([]string, 0, len(s.Faults))
	for name := range s.Faults {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rows = append(rows, [2]string{"fault: " + name, fmt.Sprint(s.Faults[name])})
	}
	if len(s.MissingSample) > 0 {
		rows = append(rows, [2]string{"missing (sample)", fmt.Sprint(s.MissingSample)})
	}
	if len(s.DuplicateSample) > 0 {
		rows = append(rows, [2]string{"duplicated (sample)", fmt.Sprint(s.DuplicateSample)})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, s.Verdict())
	return err
}
