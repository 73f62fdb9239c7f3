// Command checkpoint runs a simulated stream-processing source that
// acknowledges its share-group input through kshare's acknowledger when a
// checkpoint completes, the way a Flink source reader would in
// notifyCheckpointComplete, and verifies that the committed output holds
// every input exactly once.
//
// The pipeline is reader.go: each source reader is a share consumer in
// transactional mode with its own acknowledger (transactional id). Read it
// to see how to write such a reader; the stream processor around it (the
// checkpoint coordinator, the sink) and the verification are the harness
// in internal/eos.
//
// With no flags it starts a 3-node bundled cluster in this process,
// creates an input topic (6 partitions), writes -records input records with
// unique ids, and runs -consumers source readers. Every
// -checkpoint-interval a checkpoint coordinator triggers a checkpoint:
// each reader snapshots its output and stages the acknowledgements of the
// records behind it (Stage); once every reader has snapshotted, the
// checkpoint completes and each reader commits its acknowledgements
// (CommitCheckpoint). Only then does the reader's output for the
// checkpoint enter the committed sink, an in-memory map the run verifies
// at the end. A failed checkpoint is aborted (AbortCheckpoint): the output
// is dropped and the records come back to be processed again.
//
// The faults are scheduled on checkpoints that hold records, so that they
// land however fast the readers are. The first checkpoint with records
// that was not declined fails on purpose, then every -fail-every-th. By
// default (-faults), from then on every barrier offers a stall to all
// readers until one with records takes it: it stalls past its locks, so
// that staging fails and it declines the checkpoint (a second stall
// follows a few checkpoints later if there is still input); the run does
// not end while a stalled checkpoint is undecided, even when the other
// readers finished the input meanwhile. Independently of -faults, the second checkpoint with
// records, then every -long-every-th, takes longer than the group's lock
// duration (-lock-duration) to complete, and those behind it wait too: the
// consumers renew the staged records' locks, and the run reports any
// staged record delivered again.
//
// It prints progress on stderr about once a second and ends with a table
// on stdout and a verdict line, exactly as examples/ctp does, with the
// same exit codes (0 OK, 1 FAILED, 2 could not run, 3 INCOMPLETE). Run it
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

// command is checkpoint as eos.Main runs it: the common flags of the
// examples plus the readers and the checkpoint schedule.
func command() eos.Command {
	var (
		consumers, failEvery, longEvery int
		interval                        time.Duration
	)
	return eos.Command{
		Name:     "checkpoint",
		Synopsis: "Usage: go run ./examples/checkpoint [flags]",
		Description: `
Runs a simulated stream-processing source: source readers (a share consumer
in transactional mode and an acknowledger each, see
examples/checkpoint/reader.go) stage the acknowledgements of what they
processed when a checkpoint is triggered and commit them when it completes;
only then does their output enter the committed sink. With -faults (the
default) a reader stalls past its locks before a snapshot (it declines the
checkpoint) and checkpoints fail on purpose (-fail-every); checkpoints also
take longer than the lock duration (-long-every), so that staged locks must
be renewed. At the end the run checks that the sink holds every input
exactly once, and the group that every input was acknowledged.`,
		LockDuration: 2 * time.Second,
		Define: func(fs *flag.FlagSet) func() error {
			fs.IntVar(&consumers, "consumers", 4, "source `readers` running at once (a share consumer and an acknowledger each), at least 1")
			fs.DurationVar(&interval, "checkpoint-interval", 100*time.Millisecond, "time between checkpoints, positive; a checkpoint not answered by every reader yet makes the next ticks wait")
			fs.IntVar(&failEvery, "fail-every", 7, "with -faults, fail the 1st checkpoint with records on purpose, then every `n`-th (0: none; else at least 2)")
			fs.IntVar(&longEvery, "long-every", 10, "make the 2nd checkpoint with records, then every `n`-th, take longer than the lock duration (0: none)")
			return func() error {
				return errors.Join(
					eos.CheckPositive("consumers", consumers),
					eos.CheckDuration("checkpoint-interval", interval, 1),
					eos.CheckEvery("fail-every", failEvery),
					eos.CheckNotNegative("long-every", longEvery),
				)
			}
		},
		Header: func(f eos.Flags, _ []string) string {
			return fmt.Sprintf("%d records, %d readers, checkpoints every %v, lock %v, faults %v",
				f.Records, consumers, interval, f.LockDuration, f.Faults)
		},
		Run: func(ctx context.Context, f eos.Flags, env eos.Env) (eos.Report, error) {
			suffix := fmt.Sprint(time.Now().UnixNano())
			cfg := eos.CheckpointConfig{
				Seeds:             env.Seeds,
				Input:             "checkpoint-input-" + suffix,
				Group:             "checkpoint-" + suffix,
				Ledger:            f.Ledger,
				ReplicationFactor: int16(f.ReplicationFactor),
				Records:           f.Records,
				RejectEvery:       f.RejectEvery,
				Readers:           consumers,
				Interval:          interval,
				LongEvery:         longEvery,
				LockDuration:      f.LockDuration,
				MaxDuration:       f.MaxDuration,
				Logger:            env.Logger,
				Progress:          env.Progress,
			}
			if f.Faults {
				cfg.FailEvery = failEvery
				cfg.SlowSnapshots = 2
			}
			return eos.RunCheckpoint(ctx, cfg, newReader)
		},
	}
}
