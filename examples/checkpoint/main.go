// Command checkpoint runs a simulated stream-processing source that
// acknowledges its share-group input through kshare's acknowledger when a
// checkpoint completes, the way a Flink source reader would in
// notifyCheckpointComplete, and verifies that the committed output holds
// every input exactly once.
//
// With no flags it starts a 3-node bundled cluster in this process,
// creates an input topic (6 partitions), writes -records input records with
// unique ids, and runs -consumers source readers, each a share consumer in
// transactional mode with its own acknowledger (transactional id). Every
// -checkpoint-interval a checkpoint coordinator triggers a checkpoint: each
// reader snapshots its output and stages the acknowledgements of the
// records behind it (Stage); once every reader has snapshotted, the
// checkpoint completes and each reader commits its acknowledgements
// (CommitCheckpoint). Only then does the reader's output for the checkpoint
// enter the committed sink, an in-memory map the run verifies at the end.
// A failed checkpoint is aborted (AbortCheckpoint): the output is dropped
// and the records come back to be processed again.
//
// The faults are scheduled on checkpoints that hold records, so that they
// land however fast the readers are. By default (-faults) a reader stalls
// past its locks before its first snapshot with records, so that staging
// fails and it declines the checkpoint (a second stall follows a few
// checkpoints later if there is still input); the first checkpoint with
// records that was not declined fails on purpose, then every
// -fail-every-th. Independently of -faults, the second checkpoint with
// records, then every -long-every-th, takes longer than the group's lock
// duration (-lock-duration) to complete, and those behind it wait too: the
// consumers renew the staged records' locks, and the run reports any
// staged record delivered again.
//
// With -brokers it runs against an external cluster, which must support
// KIP-932 share groups, KIP-1289 transactional share acknowledgements and,
// for lock renewal, KIP-1222; the lock duration then defaults to 15s, the
// least Apache Kafka accepts by default.
//
// It prints progress once a second and ends with a table and the line
// "exactly-once: OK" (exit 0) or "exactly-once: FAILED (...)" (exit 1).
//
// Usage:
//
//	go run ./examples/checkpoint [-brokers host:port,...] [-records N] [-consumers C]
//	                             [-checkpoint-interval D] [-fail-every N] [-long-every N]
//	                             [-lock-duration D] [-faults=false] [-json]
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
		fmt.Fprintln(os.Stderr, "checkpoint:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run() (bool, error) {
	brokers := flag.String("brokers", "", "bootstrap servers of an external cluster (default: a 3-node bundled cluster in this process)")
	records := flag.Int("records", 100000, "input records")
	consumers := flag.Int("consumers", 4, "source readers: share consumer + acknowledger each")
	interval := flag.Duration("checkpoint-interval", 100*time.Millisecond, "time between checkpoints")
	failEvery := flag.Int("fail-every", 7, "with -faults, fail the 1st checkpoint with records on purpose, then every n-th (0: none)")
	longEvery := flag.Int("long-every", 10, "make the 2nd checkpoint with records, then every n-th, take longer than the lock duration (0: none)")
	lockDuration := flag.Duration("lock-duration", 2*time.Second, "the group's share.record.lock.duration.ms (default with -brokers: 15s, the least Apache Kafka allows by default)")
	faults := flag.Bool("faults", true, "fail checkpoints while running")
	asJSON := flag.Bool("json", false, "print the summary as JSON")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	maxDuration := flag.Duration("max-duration", 15*time.Minute, "stop and report after this long")
	flag.Parse()

	logger, err := eos.LoggerFromFlag(*logLevel)
	if err != nil {
		return false, err
	}
	switch {
	case *records <= 0:
		return false, fmt.Errorf("-records %d: must be positive", *records)
	case *consumers <= 0:
		return false, fmt.Errorf("-consumers %d: must be positive", *consumers)
	case *interval <= 0:
		return false, fmt.Errorf("-checkpoint-interval %v: must be positive", *interval)
	case *failEvery < 0 || *failEvery == 1:
		return false, fmt.Errorf("-fail-every %d: must be 0 (none) or at least 2", *failEvery)
	case *longEvery < 0:
		return false, fmt.Errorf("-long-every %d: must not be negative", *longEvery)
	case *lockDuration <= 0:
		return false, fmt.Errorf("-lock-duration %v: must be positive", *lockDuration)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	if len(eos.SplitBrokers(*brokers)) > 0 && !flagSet("lock-duration") {
		*lockDuration = externalLockDuration
	}
	seeds, closeCluster, err := eos.ClusterFromFlag(*brokers, logger)
	if err != nil {
		return false, err
	}
	defer closeCluster()
	fmt.Fprintf(os.Stderr, "checkpoint: %d records, %d readers, checkpoints every %v, lock %v, faults %v, brokers %s\n",
		*records, *consumers, *interval, *lockDuration, *faults, strings.Join(seeds, ","))

	suffix := fmt.Sprint(time.Now().UnixNano())
	cfg := eos.CheckpointConfig{
		Seeds:        seeds,
		Input:        "checkpoint-input-" + suffix,
		Group:        "checkpoint-" + suffix,
		Records:      *records,
		Readers:      *consumers,
		Interval:     *interval,
		LongEvery:    *longEvery,
		LockDuration: *lockDuration,
		MaxDuration:  *maxDuration,
		Logger:       logger,
		Progress: func(p eos.CheckpointProgress) {
			fmt.Fprintf(os.Stderr, "checkpoint: %5.1fs  acknowledged %d/%d  committed outputs %d  checkpoints completed %d failed %d\n",
				p.Elapsed.Seconds(), p.Acknowledged, p.Inputs, p.Committed, p.Completed, p.Failed)
		},
	}
	if *faults {
		cfg.FailEvery = *failEvery
		cfg.SlowSnapshots = 2
	}
	sum, err := eos.RunCheckpoint(ctx, cfg)
	if err != nil {
		return false, err
	}
	if err := eos.WriteReport(os.Stdout, sum, *asJSON); err != nil {
		return false, err
	}
	return sum.OK(), nil
}

// externalLockDuration is Apache Kafka's default
// group.share.min.record.lock.duration.ms: a group config below it is
// refused.
const externalLockDuration = 15 * time.Second

// flagSet reports whether the command line set the flag.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
