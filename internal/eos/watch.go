package eos

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// startOffsets returns the group's share-partition start offsets of
// topic: every record below one is acknowledged, rejected or archived.
func startOffsets(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	return StartOffsets(ctx, adm, group, topic)
}

// StartOffsets returns, for each partition of topic the share group has
// started, the offset below which every record is acknowledged, rejected
// or archived. It is the share-partition start offset the group
// describes, except where that is known to be stale: Kafka 4.4 persists
// the start offset one state write behind (after a partition's last
// acknowledgement it stays below it until something else is written
// there), while the lag it describes is current; a partition with no lag
// is done up to its last stable offset.
func StartOffsets(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	described, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("share-group offsets of %s: %w", group, err)
	}
	var stable kadm.ListedOffsets
	out := map[int32]int64{}
	for p, o := range described[group].Offsets[topic] {
		if o.Err != nil || o.StartOffset < 0 {
			continue
		}
		out[p] = o.StartOffset
		if o.Lag != 0 {
			continue
		}
		if stable == nil {
			if stable, err = adm.ListCommittedOffsets(ctx, topic); err != nil {
				return nil, fmt.Errorf("last stable offsets of %s: %w", topic, err)
			}
		}
		if l, ok := stable.Lookup(topic, p); ok && l.Err == nil && l.Offset > o.StartOffset {
			out[p] = l.Offset
		}
	}
	return out, nil
}

// watcher follows a running pipeline: it polls the group's start offsets
// until every input is acknowledged, and reports progress about once a
// second, saying what the run waits for when nothing moved.
type watcher struct {
	adm      *kadm.Client
	group    string
	in       *Input
	stats    *runStats
	log      *slog.Logger
	progress func(Progress) // nil: no reports
	labels   [3]string      // what Committed and Aborted count (Progress.Labels)
	// counts returns Committed and Aborted for a report.
	counts func() (committed, aborted int64)
	// outputs returns Outputs for a report (nil: stats.outputs).
	outputs func() int64
	// idle says why nothing moved when no known wait explains it.
	idle func() string
	// fail stops the run with an error: the cluster stopped answering.
	fail func(error)
	// busy, if set, holds the end of a run whose inputs are all
	// acknowledged while an injected fault has yet to show its effect.
	busy func() bool
}

// unansweredLimit is how long the group's start offsets may go unanswered
// before the run stops with an error: a cluster that has gone away must
// not look like a run that is merely slow, and a broker that restarts
// (its coordinators unavailable until it is back) must not stop the run.
var unansweredLimit = time.Minute

// watch returns once every input is acknowledged, with nil, or when ctx
// ends, with ctx's error.
func (w *watcher) watch(ctx context.Context, start time.Time) error {
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	lastReport, lastMoved := time.Now(), time.Now()
	var last Progress
	var failingSince time.Time
	acknowledged := 0
	for {
		offsets, err := startOffsets(ctx, w.adm, w.group, w.in.Topic)
		switch {
		case err == nil:
			failingSince = time.Time{}
			if acknowledged = w.in.CountAcknowledged(offsets); acknowledged >= w.in.N && (w.busy == nil || !w.busy()) {
				return nil
			}
		case ctx.Err() == nil:
			w.log.Debug("describing share-group offsets", "err", err)
			if failingSince.IsZero() {
				failingSince = time.Now()
			} else if d := time.Since(failingSince); d >= unansweredLimit && w.fail != nil {
				w.fail(fmt.Errorf("the cluster has not answered for %v: %w", d.Round(time.Second), err))
				return err
			}
		}
		if now := time.Now(); w.progress != nil && now.Sub(lastReport) >= time.Second {
			p := w.report(now.Sub(start), acknowledged)
			if p.Outputs != last.Outputs || p.Acknowledged != last.Acknowledged || p.Committed != last.Committed || p.Aborted != last.Aborted {
				lastMoved = now
			} else if p.Waiting = w.stats.waits.describe(now); p.Waiting == "" {
				p.Waiting = fmt.Sprintf("nothing moved for %.1fs: %s", now.Sub(lastMoved).Seconds(), w.idle())
			}
			lastReport, last = now, p
			w.progress(p)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

func (w *watcher) report(elapsed time.Duration, acknowledged int) Progress {
	committed, aborted := w.counts()
	outputs := w.stats.outputs.Load()
	if w.outputs != nil {
		outputs = w.outputs()
	}
	return Progress{
		Elapsed:      elapsed,
		Inputs:       w.in.N,
		Outputs:      outputs,
		Acknowledged: int64(acknowledged),
		Committed:    committed,
		Aborted:      aborted,
		Labels:       w.labels,
	}
}
