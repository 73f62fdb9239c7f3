package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// sample is one run of one contender.
type sample struct {
	Rate       float64 `json:"records_per_s,omitempty"`
	Records    int     `json:"records,omitempty"` // counted by the rate
	Seconds    float64 `json:"seconds,omitempty"`
	P50        float64 `json:"commit_p50_ms,omitempty"`
	P99        float64 `json:"commit_p99_ms,omitempty"`
	Commits    int     `json:"commits,omitempty"`
	Aborts     int64   `json:"aborts,omitempty"`
	Dups       int64   `json:"duplicates,omitempty"`
	Allocs     float64 `json:"client_allocs_per_record,omitempty"`
	AllocBytes float64 `json:"client_bytes_per_record,omitempty"`
	ClientCPU  float64 `json:"client_cpu_ns_per_record,omitempty"`
	BrokerCPU  float64 `json:"broker_cpu_ns_per_record,omitempty"`
	BrokerHeap float64 `json:"broker_heap_bytes_per_record,omitempty"`
	// LedgerPollMs is what resolving against the claim ledger added to a
	// Poll of the kshare pipeline with a ledger, on average.
	LedgerPollMs float64 `json:"ledger_ms_per_poll,omitempty"`
	// Requests counts the requests the bundled broker received per 1000
	// records, by API name (the nodes' own markers included).
	Requests map[string]float64 `json:"broker_requests_per_1000_records,omitempty"`
}

// results holds every contender's samples, one per round, by key.
type results map[string][]sample

func (r results) add(key string, s sample) { r[key] = append(r[key], s) }

// medianOf is the median of a metric over key's rounds.
func (r results) medianOf(key string, metric func(sample) float64) float64 {
	xs := make([]float64, 0, len(r[key]))
	for _, s := range r[key] {
		xs = append(xs, metric(s))
	}
	return median(xs)
}

// pairedRatio is the median over rounds of a's metric over b's in the same
// round: alternating contenders share each round's conditions (the load of
// the machine), so the ratio of a round is fairer than the ratio of
// medians taken from different rounds.
func (r results) pairedRatio(a, b string, metric func(sample) float64) (float64, bool) {
	as, bs := r[a], r[b]
	n := min(len(as), len(bs))
	if n == 0 {
		return 0, false
	}
	xs := make([]float64, 0, n)
	for i := range n {
		if d := metric(bs[i]); d != 0 {
			xs = append(xs, metric(as[i])/d)
		}
	}
	if len(xs) == 0 {
		return 0, false
	}
	return median(xs), true
}

// target is a bound a ratio should meet.
type target struct {
	atLeast bool
	bound   float64
}

func (t target) String() string {
	if t.bound == 0 {
		return ""
	}
	if t.atLeast {
		return fmt.Sprintf(">= %.2gx", t.bound)
	}
	return fmt.Sprintf("<= %.2gx", t.bound)
}

func (t target) met(ratio float64) *bool {
	if t.bound == 0 {
		return nil
	}
	ok := ratio >= t.bound
	if !t.atLeast {
		ok = ratio <= t.bound
	}
	return &ok
}

// row is one line of the table.
type row struct {
	Section string  `json:"section"`
	What    string  `json:"what"`
	Value   string  `json:"value"`
	Against string  `json:"against"`
	Ratio   float64 `json:"ratio"`
	Target  string  `json:"target,omitempty"`
	Met     *bool   `json:"met,omitempty"`
}

// metWord says whether the row met its target: "yes", no, or nothing
// without a target.
func (r row) metWord(no string) string {
	switch {
	case r.Met == nil:
		return ""
	case *r.Met:
		return "yes"
	}
	return no
}

// report is what a run prints.
type report struct {
	Machine  machine  `json:"machine"`
	Settings settings `json:"settings"`
	Rows     []row    `json:"rows"`
	Samples  results  `json:"samples"`
}

// metric picks a figure of a sample and formats it.
type metric struct {
	get    func(sample) float64
	format func(float64) string
}

var (
	rate       = metric{func(s sample) float64 { return s.Rate }, func(v float64) string { return fmt.Sprintf("%.0f rec/s", v) }}
	p50        = metric{func(s sample) float64 { return s.P50 }, func(v float64) string { return fmt.Sprintf("p50 %.2f ms", v) }}
	p99        = metric{func(s sample) float64 { return s.P99 }, func(v float64) string { return fmt.Sprintf("p99 %.2f ms", v) }}
	allocs     = metric{func(s sample) float64 { return s.Allocs }, func(v float64) string { return fmt.Sprintf("%.1f allocs/rec", v) }}
	allocBytes = metric{func(s sample) float64 { return s.AllocBytes }, func(v float64) string { return fmt.Sprintf("%.0f B/rec", v) }}
	ledgerPoll = metric{func(s sample) float64 { return s.LedgerPollMs }, func(v float64) string { return fmt.Sprintf("%.2f ms/poll", v) }}
	heapPerRec = metric{func(s sample) float64 { return s.BrokerHeap }, func(v float64) string { return fmt.Sprintf("%.0f B/rec", v) }}
)

// compare adds a row comparing key a with key b on m, if both ran.
func (rep *report) compare(section, what, a, b string, m metric, t target) {
	ratio, ok := rep.Samples.pairedRatio(a, b, m.get)
	if !ok {
		return
	}
	rep.Rows = append(rep.Rows, row{
		Section: section, What: what, Ratio: ratio, Target: t.String(), Met: t.met(ratio),
		Value:   m.format(rep.Samples.medianOf(a, m.get)),
		Against: m.format(rep.Samples.medianOf(b, m.get)),
	})
}

// against adds a row comparing a with a fixed value.
func (rep *report) against(section, what, a string, m metric, value float64, label string, t target) {
	if len(rep.Samples[a]) == 0 {
		return
	}
	v := rep.Samples.medianOf(a, m.get)
	ratio := v / value
	rep.Rows = append(rep.Rows, row{
		Section: section, What: what, Ratio: ratio, Target: t.String(), Met: t.met(ratio),
		Value: m.format(v), Against: label,
	})
}

// print writes the table.
func (rep *report) print(w io.Writer) {
	m := rep.Machine
	fmt.Fprintf(w, "kshare bench: %s, %d cores (GOMAXPROCS %d), %s %s; load %s -> %s; %d s; %d rounds, medians\n\n",
		m.CPU, m.Cores, m.GOMAXPROCS, m.Go, m.OS, m.LoadBefore, m.LoadAfter, m.Seconds, rep.Settings.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "section\tcomparison\tvalue\tagainst\tratio\ttarget\tmet")
	for _, r := range rep.Rows {
		met := r.metWord("NO")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2fx\t%s\t%s\n", r.Section, r.What, r.Value, r.Against, r.Ratio, r.Target, met)
	}
	tw.Flush()
	fmt.Fprintln(w, "\n(targets are for reading: the command never fails on a ratio)")
}

// markdown returns the table as a Markdown table (docs/performance.md).
func (rep *report) markdown() string {
	var b strings.Builder
	b.WriteString("| section | comparison | value | against | ratio | target | met |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Rows {
		met := r.metWord("**no**")
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.2fx | %s | %s |\n", r.Section, r.What, r.Value, r.Against, r.Ratio, r.Target, met)
	}
	return b.String()
}
