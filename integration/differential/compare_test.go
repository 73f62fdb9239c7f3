package differential_test

import "fmt"

// knownDifference is one step whose answer is allowed to differ between
// the real Kafka and the bundled broker, with the answer each must give.
// Both answers are exact, so an entry that stops matching (a difference
// fixed, or a Kafka that changed) fails the test until the list and
// docs/differences.md are brought up to date.
type knownDifference struct {
	scenario, step string
	kafka, bundled string
	// why is the one-line reason; docs/differences.md has the full one
	// under the heading named by scenario/step.
	why string
}

// id is how docs/differences.md names the entry.
func (d knownDifference) id() string { return d.scenario + "/" + d.step }

// compareTranscripts returns every mismatch between the two transcripts of
// a scenario that known does not allow, and every entry of known for the
// scenario that did not occur (stale entries). An empty result means the
// targets agree up to the listed differences.
func compareTranscripts(scenario string, kafka, bundled *transcript, known []knownDifference) []string {
	allowed := make(map[string]knownDifference)
	for _, d := range known {
		if d.scenario == scenario {
			allowed[d.step] = d
		}
	}
	var problems []string
	used := make(map[string]bool)
	check := func(step string) {
		kv, kok := kafka.value(step)
		bv, bok := bundled.value(step)
		if !kok {
			kv = "<step not reached>"
		}
		if !bok {
			bv = "<step not reached>"
		}
		d, listed := allowed[step]
		switch {
		case kv == bv && listed:
			used[step] = true
			problems = append(problems, fmt.Sprintf("%s/%s: listed as a known difference but both answered %q; remove it from knownDifferences and docs/differences.md", scenario, step, kv))
		case kv == bv:
		case listed && d.kafka == kv && d.bundled == bv:
			used[step] = true
		case listed:
			used[step] = true
			problems = append(problems, fmt.Sprintf("%s/%s: known difference changed:\n\tkafka   %q (listed %q)\n\tbundled %q (listed %q)", scenario, step, kv, d.kafka, bv, d.bundled))
		default:
			problems = append(problems, fmt.Sprintf("%s/%s differs:\n\tkafka   %s\n\tbundled %s", scenario, step, kv, bv))
		}
	}
	seen := make(map[string]bool)
	for _, tr := range []*transcript{kafka, bundled} {
		for _, e := range tr.entries {
			if !seen[e.step] {
				seen[e.step] = true
				check(e.step)
			}
		}
	}
	for _, d := range known {
		if d.scenario == scenario && !used[d.step] && !seen[d.step] {
			problems = append(problems, fmt.Sprintf("%s/%s: listed as a known difference but the scenario has no such step", scenario, d.step))
		}
	}
	return problems
}
