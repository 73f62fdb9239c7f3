//go:build review

package user

import (
	"os"
	"testing"
)

// TestCountTopic is a manual helper: KSHARE_REVIEW_SEEDS and
// KSHARE_REVIEW_TOPIC name a topic whose committed values it counts.
func TestCountTopic(t *testing.T) {
	seeds, topic := os.Getenv("KSHARE_REVIEW_SEEDS"), os.Getenv("KSHARE_REVIEW_TOPIC")
	if seeds == "" {
		t.Skip("manual helper: set KSHARE_REVIEW_SEEDS and KSHARE_REVIEW_TOPIC")
	}
	values := readCommitted(t, seeds, topic)
	seen := map[string]int{}
	dups := 0
	for _, v := range values {
		seen[v]++
		if seen[v] == 2 {
			dups++
		}
	}
	if out := os.Getenv("KSHARE_REVIEW_DUMP"); out != "" {
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range values {
			f.WriteString(v + "\n")
		}
		f.Close()
	}
	t.Logf("%s: %d committed records, %d distinct, %d values seen more than once", topic, len(values), len(seen), dups)
}
