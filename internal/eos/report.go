package eos

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
)

// Report is what Run and RunCheckpoint return: a summary that prints as a
// table ending with its verdict line, or as JSON.
type Report interface {
	WriteTable(w io.Writer) error
	// Outcome returns the verdict and the figures both pipelines share.
	Outcome() Result
}

// Outcome implements Report.
func (r Result) Outcome() Result { return r }

// WriteReport writes sum to w: as one indented JSON document when asJSON
// is set (its "verdict" and "ok" fields carry the verdict), as
// sum.WriteTable's table otherwise. The error is the first failed encoding
// or write.
func WriteReport(w io.Writer, sum Report, asJSON bool) error {
	if !asJSON {
		return sum.WriteTable(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sum)
}

// writeTable prints rows, then a row per fault in name order and the
// check's samples, as an aligned two-column table, and ends with the
// verdict line of r. The error is the first failed write to w.
func writeTable(w io.Writer, rows [][2]string, faults map[string]int64, r Result) error {
	names := make([]string, 0, len(faults))
	for name := range faults {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rows = append(rows, [2]string{"fault: " + name, fmt.Sprint(faults[name])})
	}
	if len(r.MissingSample) > 0 {
		rows = append(rows, [2]string{"missing (sample)", fmt.Sprint(r.MissingSample)})
	}
	if len(r.DuplicateSample) > 0 {
		rows = append(rows, [2]string{"duplicated (sample)", fmt.Sprint(r.DuplicateSample)})
	}
	if len(r.MissingByPartition) > 0 {
		rows = append(rows, [2]string{"missing by output partition", fmt.Sprint(r.MissingByPartition)})
	}
	if len(r.DuplicatesByPartition) > 0 {
		// fmt prints maps sorted by key.
		rows = append(rows, [2]string{"duplicate copies by output partition", fmt.Sprint(r.DuplicatesByPartition)})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, r.Line())
	return err
}
