package differential_test

import "fmt"

// Example compares two transcripts of one scenario the way the test does:
// an allowed difference passes when both answers are the listed ones, any
// other mismatch is reported.
func Example() {
	kafka, bundled := &transcript{}, &transcript{}
	for _, tr := range []*transcript{kafka, bundled} {
		tr.add("create an existing topic", "TOPIC_ALREADY_EXISTS")
	}
	kafka.add("commit retried after an abort", "INVALID_TXN_STATE")
	bundled.add("commit retried after an abort", "PRODUCER_FENCED")
	kafka.add("offset out of range", "hwm=-1")
	bundled.add("offset out of range", "hwm=5")

	known := []knownDifference{{
		scenario: "example", step: "commit retried after an abort",
		kafka: "INVALID_TXN_STATE", bundled: "PRODUCER_FENCED",
		why: "deliberate (DESIGN.md 4)",
	}}
	for _, problem := range compareTranscripts("example", kafka, bundled, known) {
		fmt.Println(problem)
	}
	// Output:
	// example/offset out of range differs:
	//	kafka   hwm=-1
	//	bundled hwm=5
}
