package main

import (
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestMedianAndPercentile(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond
	}
	if got := percentile(ds, 50); got != 50*time.Millisecond {
		t.Errorf("p50 = %v", got)
	}
	if got := percentile(ds, 99); got != 99*time.Millisecond {
		t.Errorf("p99 = %v", got)
	}
	if got := percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %v", got)
	}
}

// TestPairedRatio: a ratio pairs each round's samples (the median of the
// rounds' ratios), so a round on a slow machine counts against both.
func TestPairedRatio(t *testing.T) {
	r := results{}
	for _, v := range [][2]float64{{100, 200}, {30, 60}, {500, 400}} {
		r.add("a", sample{Rate: v[0]})
		r.add("b", sample{Rate: v[1]})
	}
	got, ok := r.pairedRatio("a", "b", rate.get)
	if !ok || got != 0.5 {
		t.Errorf("paired ratio = %v, %v; want 0.5 (ratios 0.5, 0.5, 1.25)", got, ok)
	}
	if _, ok := r.pairedRatio("a", "missing", rate.get); ok {
		t.Error("a ratio against nothing")
	}
	if m := r.medianOf("a", rate.get); m != 100 {
		t.Errorf("median of a = %v", m)
	}
}

func TestTargets(t *testing.T) {
	for _, tc := range []struct {
		t     target
		ratio float64
		met   bool
	}{
		{target{true, 0.8}, 0.8, true}, {target{true, 0.8}, 0.79, false},
		{target{false, 1.5}, 1.5, true}, {target{false, 1.5}, 1.51, false},
	} {
		if got := tc.t.met(tc.ratio); got == nil || *got != tc.met {
			t.Errorf("%v met by %v: %v, want %v", tc.t, tc.ratio, got, tc.met)
		}
	}
	if (target{}).met(3) != nil || (target{}).String() != "" {
		t.Error("no target: nothing to meet")
	}
}

func TestReportMarksMissedTargets(t *testing.T) {
	rep := &report{Samples: results{}}
	rep.Samples.add("x", sample{Rate: 50})
	rep.Samples.add("y", sample{Rate: 100})
	rep.compare("s", "x vs y", "x", "y", rate, target{true, 0.8})
	rep.compare("s", "never ran", "x", "z", rate, target{true, 0.8})
	if len(rep.Rows) != 1 || rep.Rows[0].Met == nil || *rep.Rows[0].Met {
		t.Fatalf("rows %+v: want one row, target missed", rep.Rows)
	}
	var b strings.Builder
	rep.print(&b)
	if !strings.Contains(b.String(), "NO") || !strings.Contains(rep.markdown(), "**no**") {
		t.Errorf("a missed target must show: %s\n%s", b.String(), rep.markdown())
	}
}

func TestRotate(t *testing.T) {
	xs := []int{1, 2, 3}
	for r, want := range [][]int{{1, 2, 3}, {2, 3, 1}, {3, 1, 2}, {1, 2, 3}} {
		got := rotate(xs, r)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("rotate(%v, %d) = %v, want %v", xs, r, got, want)
			}
		}
	}
}

// TestSeenCountsDuplicates: the exactly-once check counts an input
// committed twice, and a key that is no input, as wrong.
func TestSeenCountsDuplicates(t *testing.T) {
	s := newSeen(100)
	if !s.mark(7) || s.mark(7) {
		t.Fatal("the first mark is new, the second is not")
	}
	s.mark(-1)
	s.mark(100)
	if s.count.Load() != 1 || s.dups.Load() != 3 {
		t.Errorf("count %d dups %d, want 1 and 3", s.count.Load(), s.dups.Load())
	}
	if keyIndex(recordKey(42)) != 42 || keyIndex([]byte("short")) != -1 {
		t.Error("record keys do not round-trip")
	}
}

func TestVerdict(t *testing.T) {
	eos := pipelineContender{name: "eos", eos: true}
	alo := pipelineContender{name: "alo"}
	if eos.verdict(sample{Dups: 1}) == nil {
		t.Error("an exactly-once pipeline that duplicated passed")
	}
	if eos.verdict(sample{}) != nil || alo.verdict(sample{Dups: 5}) != nil {
		t.Error("a sound run failed")
	}
}

// TestValuesDoNotRepeat: neighbouring records' values start at different
// offsets of the random pool, so a batch of them does not compress.
func TestValuesDoNotRepeat(t *testing.T) {
	seen := map[*byte]int{}
	for i := range 1000 {
		v := value(i, 1024)
		if len(v) != 1024 || cap(v) != 1024 {
			t.Fatalf("value %d: len %d cap %d", i, len(v), cap(v))
		}
		if j, dup := seen[&v[0]]; dup {
			t.Fatalf("values %d and %d start at the same place", j, i)
		}
		seen[&v[0]] = i
	}
}

// TestTxnBatch: the floor's hand-built batch decodes, with a valid CRC,
// as a transactional batch of n records.
func TestTxnBatch(t *testing.T) {
	raw := txnBatch(77, 3, 5, []byte("value"))
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		t.Fatal(err)
	}
	if b.NumRecords != 5 || b.ProducerID != 77 || b.ProducerEpoch != 3 || b.Attributes&0x10 == 0 || b.Magic != 2 {
		t.Errorf("batch %+v", b)
	}
	if int(b.Length) != len(raw)-12 || binary.BigEndian.Uint32(raw[17:]) != crc32.Checksum(raw[21:], castagnoli) {
		t.Error("length or CRC wrong")
	}
}

func TestParseStats(t *testing.T) {
	st, err := parseStats("stats 1000 2000 0:30 78:5\n")
	if err != nil {
		t.Fatal(err)
	}
	if st.heap != 1000 || st.cpu != 2000 || len(st.requests) != 2 || st.requests[0] != 30 || st.requests[78] != 5 {
		t.Fatalf("parsed %+v", st)
	}
	if st, err := parseStats("stats 1 2"); err != nil || len(st.requests) != 0 {
		t.Fatalf("kfake's line: %+v, %v", st, err)
	}
	for _, bad := range []string{"", "error unknown command", "stats 1", "stats x 2", "stats 1 2 0=3", "stats 1 2 a:3", "stats 1 2 0:b", "stats 1 2 40000:1"} {
		if _, err := parseStats(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	before := brokerStats{requests: map[int16]int64{0: 10, 78: 4}}
	after := brokerStats{requests: map[int16]int64{0: 30, 78: 4, 26: 2}}
	got := requestsPer1000(before, after, 4000)
	if len(got) != 2 || got["Produce"] != 5 || got["EndTxn"] != 0.5 {
		t.Fatalf("per 1000 records: %v", got)
	}
}
