// Command ctp is kshare's main job: an exactly-once share-group
// consume-transform-produce pipeline, run under faults, with a verification
// report.
//
// The pipeline is worker.go: each worker is a share consumer in
// transactional mode and a transactional producer that copy input records
// to the output in transactions that also carry the acknowledgements of
// their input. Read it to see how to write such a loop; everything else
// (setting up, injecting faults, verifying) is the harness in
// internal/eos.
//
// With no flags it starts a 3-node bundled cluster in this process, creates
// an input topic (6 partitions) and an output topic, writes -records input
// records with unique ids and runs -consumers workers, in transactions of
// up to -txn-size records. While it runs it kills a worker in the middle of
// a transaction, moves __transaction_state and __share_group_state
// leadership, starts a zombie worker with a reused transactional id, and
// makes a worker so slow that its locks expire.
//
// It prints progress on stderr about once a second and ends with a table
// on stdout and a verdict line: "exactly-once: OK" (exit 0), "exactly-once:
// FAILED (...)" (exit 1) or, stopped early by Ctrl-C or -max-duration,
// "exactly-once: INCOMPLETE (...)" (exit 3). A run that cannot be carried
// out, or that meets a fatal error no injected fault explains (a cluster
// without KIP-1289, say), exits 2 at once with the error on stderr. Run it
// with -h for every flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/kshare-go/kshare/internal/eos"
)

func main() {
	os.Exit(eos.Main(command(), os.Args[1:], os.Stdout, os.Stderr))
}

// command is ctp as eos.Main runs it: the common flags of the examples
// plus the transaction size, the consumers and the faults.
func command() eos.Command {
	var (
		consumers, txnSize, abortEvery int
		txnHold                        time.Duration
		deadLetter                     string
	)
	return eos.Command{
		Name:     "ctp",
		Synopsis: "Usage: go run ./examples/ctp [flags]",
		Description: `
Runs an exactly-once share-group consume-transform-produce pipeline: workers
(a share consumer in transactional mode and a transactional producer each,
see examples/ctp/worker.go) copy every input record to an output topic in
transactions that also carry the input's acknowledgements. With -faults (the
default) it kills a worker in the middle of a transaction, moves the
__transaction_state and __share_group_state coordinators, starts a zombie
worker with a reused transactional id, and makes a worker stall past its
locks; with -ledger also the faults of the claim ledger's race: a worker
killed between its commit and its acknowledgements, a share consumer whose
connections (and share sessions) drop while its transaction is open, and a
worker stopped before or after writing its claims until its locks have run out (its
commit must fail). At the end a read_committed reader checks that every input was output
exactly once, and the group that every input was acknowledged.`,
		LockDuration: 5 * time.Second,
		Define: func(fs *flag.FlagSet) func() error {
			fs.IntVar(&consumers, "consumers", 4, "`workers` running at once, at least 1")
			fs.IntVar(&txnSize, "txn-size", 500, "records per transaction at most, at least 1 (also each partition leader's records per fetch)")
			fs.IntVar(&abortEvery, "abort-every", 0, "with -faults, abort every `n`-th transaction of each worker on purpose (0: none; else at least 2)")
			fs.StringVar(&deadLetter, "dlq", "", "dead-letter `topic`: each record the pipeline rejects (see -reject-every) is copied there, with\nheaders saying where it came from and why, in the transaction that rejects it; the verdict checks\nthat every rejected input has exactly one committed copy (created if missing)")
			fs.DurationVar(&txnHold, "txn-hold", 0, "hold every transaction open this long before committing, as a slow transform would (0: none); the transaction timeout is 10s plus this")
			return func() error {
				return errors.Join(
					eos.CheckPositive("consumers", consumers),
					eos.CheckPositive("txn-size", txnSize),
					eos.CheckEvery("abort-every", abortEvery),
					eos.CheckDuration("txn-hold", txnHold, 0),
				)
			}
		},
		Header: func(f eos.Flags, _ []string) string {
			return fmt.Sprintf("%d records, %d workers, transactions of up to %d, lock %v, faults %v",
				f.Records, consumers, txnSize, f.LockDuration, f.Faults)
		},
		Run: func(ctx context.Context, f eos.Flags, env eos.Env) (eos.Report, error) {
			suffix := fmt.Sprint(time.Now().UnixNano())
			cfg := eos.Config{
				Seeds:             env.Seeds,
				Input:             "ctp-input-" + suffix,
				Output:            "ctp-output-" + suffix,
				Group:             "ctp-" + suffix,
				Ledger:            f.Ledger,
				ReplicationFactor: int16(f.ReplicationFactor),
				DeadLetterTopic:   deadLetter,
				Records:           f.Records,
				RejectEvery:       f.RejectEvery,
				Workers:           consumers,
				TxnSize:           txnSize,
				TxnHold:           txnHold,
				LockDuration:      f.LockDuration,
				MaxDuration:       f.MaxDuration,
				Logger:            env.Logger,
				Progress:          env.Progress,
			}
			if f.Faults {
				cfg.Faults = eos.Faults{KillWorker: true, CoordinatorMoves: true, Zombie: true, SlowWorker: true, AbortEvery: abortEvery,
					KillAfterCommit: true, DropSession: true, PausePastLock: true}
			}
			return eos.Run(ctx, cfg, runWorker)
		},
	}
}
