// Command ctp is kshare's main job: an exactly-once share-group
// consume-transform-produce pipeline, run under faults, with a verification
// report.
//
// With no flags it starts a 3-node bundled cluster in this process, creates
// an input topic (6 partitions) and an output topic, writes -records input
// records with unique ids, and runs -consumers workers, each a share
// consumer in transactional mode with its own transactional producer, that
// copy input records to the output in transactions of up to -txn-size
// records, committing each transaction's output together with the share
// acknowledgements of its input. While it runs it kills a worker in the
// middle of a transaction, moves __transaction_state and
// __share_group_state leadership, starts a zombie worker with a reused
// transactional id, and makes a worker so slow that its locks expire.
//
// It prints progress once a second and ends with a table and the line
// "exactly-once: OK" (exit 0) or "exactly-once: FAILED (...)" (exit 1).
//
// Usage:
//
//	go run ./examples/ctp [-brokers host:port,...] [-records N] [-consumers C]
//	                      [-txn-size B] [-faults=false] [-json]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/kshare-go/kshare/internal/eos"
)

func main() {
	ok, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctp:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run() (bool, error) {
	brokers := flag.String("brokers", "", "bootstrap servers of an external cluster (default: a 3-node bundled cluster in this process)")
	records := flag.Int("records", 100000, "input records")
	consumers := flag.Int("consumers", 4, "workers: share consumer + transactional producer each")
	txnSize := flag.Int("txn-size", 500, "records per transaction at most")
	faults := flag.Bool("faults", true, "inject faults while running")
	asJSON := flag.Bool("json", false, "print the summary as JSON")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	maxDuration := flag.Duration("max-duration", 15*time.Minute, "stop and report after this long")
	flag.Parse()

	logger, err := eos.LoggerFromFlag(*logLevel)
	if err != nil {
		return false, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	seeds, closeCluster, err := eos.ClusterFromFlag(*brokers, logger)
	if err != nil {
		return false, err
	}
	defer closeCluster()
	fmt.Fprintf(os.Stderr, "ctp: %d records, %d workers, transactions of up to %d, faults %v, brokers %s\n",
		*records, *consumers, *txnSize, *faults, strings.Join(seeds, ","))

	suffix := fmt.Sprint(time.Now().UnixNano())
	cfg := eos.Config{
		Seeds:       seeds,
		Input:       "ctp-input-" + suffix,
		Output:      "ctp-output-" + suffix,
		Group:       "ctp-" + suffix,
		Records:     *records,
		Workers:     *consumers,
		TxnSize:     *txnSize,
		MaxDuration: *maxDuration,
		Logger:      logger,
		Progress: func(p eos.Progress) {
			fmt.Fprintf(os.Stderr, "ctp: %5.1fs  acknowledged %d/%d  transactions committed %d aborted %d\n",
				p.Elapsed.Seconds(), p.Acknowledged, p.Inputs, p.Committed, p.Aborted)
		},
	}
	if *faults {
		cfg.Faults = eos.Faults{KillWorker: true, CoordinatorMoves: true, Zombie: true, SlowWorker: true}
	}
	sum, err := eos.Run(ctx, cfg)
	if err != nil {
		return false, err
	}
	if err := eos.WriteReport(os.Stdout, sum, *asJSON); err != nil {
		return false, err
	}
	return sum.OK(), nil
}
