package eos_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/eos"
)

// Run a consume-transform-produce pipeline on a bundled cluster, with
// workers killed mid-transaction, and check that it stayed exactly-once.
// It needs a minute or so, so it is compiled but not run by go test.
func Example() {
	c, err := broker.NewCluster(broker.Nodes(3))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	sum, err := eos.Run(context.Background(), eos.Config{
		Seeds:       c.Bootstrap(),
		Input:       "in",
		Output:      "out",
		Group:       "ctp",
		Records:     10_000,
		Faults:      eos.Faults{KillWorker: true, Interval: 200 * time.Millisecond},
		MaxDuration: 2 * time.Minute,
	})
	if err != nil {
		fmt.Println("the run could not be carried out:", err)
		return
	}
	if err := sum.WriteTable(os.Stdout); err != nil {
		fmt.Println(err)
	}
}

// Verdict says whether the run was exactly-once and, if not, why.
func ExampleSummary_Verdict() {
	sum := eos.Summary{Check: eos.Check{Inputs: 100, Outputs: 101, Duplicates: 1}}
	fmt.Println(sum.Verdict())
	sum = eos.Summary{Check: eos.Check{Inputs: 100, Outputs: 100}}
	fmt.Println(sum.Verdict())
	// Output:
	// exactly-once: FAILED (1 duplicates, 0 missing, 0 unknown)
	// exactly-once: OK
}
