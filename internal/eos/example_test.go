package eos_test

import (
	"fmt"
	"time"

	"github.com/kshare-go/kshare/internal/eos"
)

// NewResult judges what the verification found: a violation fails the
// run, a run stopped early without one is incomplete, and only a run that
// output and acknowledged every input is OK. Each verdict has its exit
// code.
func ExampleNewResult() {
	for _, c := range []struct {
		check     eos.Check
		stoppedBy string
	}{
		{check: eos.Check{Inputs: 100, Outputs: 100, Acknowledged: 100}},
		{check: eos.Check{Inputs: 100, Outputs: 101, Acknowledged: 100, Duplicates: 1}},
		{check: eos.Check{Inputs: 100, Acknowledged: 100, ArchivedByFailure: 100}},
		{check: eos.Check{Inputs: 100, Outputs: 40, Processed: 40, Acknowledged: 30, Unacknowledged: 70}, stoppedBy: "Ctrl-C (SIGINT)"},
	} {
		r := eos.NewResult(c.check, c.stoppedBy, 2*time.Second)
		fmt.Println(r.ExitCode(), r.Line())
	}
	// Output:
	// 0 exactly-once: OK
	// 1 exactly-once: FAILED (1 duplicates)
	// 1 exactly-once: FAILED (nothing was written, 100 archived at the delivery limit after failures)
	// 3 exactly-once: INCOMPLETE (stopped by Ctrl-C (SIGINT) after 2.0s: 40 of 100 inputs processed, none lost or duplicated so far)
}
