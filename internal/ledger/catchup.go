package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/retry"
)

// catchUpWait is how long one read_committed fetch of the ledger waits at
// the leader for data when the reader is not past the mark yet: an open
// transaction holds the last stable offset back until it ends.
const catchUpWait = 100 * time.Millisecond

// missingFor is how long the ledger's metadata must say that the topic
// does not exist, while reads fail, before CatchUp takes it for deleted
// (a broker that has just joined may not know it for a moment). It is
// the share consumer's wait for a missing subscribed topic.
var missingFor = 5 * time.Second

// Failure is how a CatchUp in progress has been failing: its last error
// and when its failures began. A round that succeeds ends it.
type Failure struct {
	Err   error
	Since time.Time
}

// Failing returns how the CatchUp in progress is failing, or nil while it
// is not (it is waiting for an open transaction, say, or none runs).
func (r *Resolver) Failing() *Failure { return r.failing.Load() }

// CatchUp reads the given ledger partitions until each one's position is
// past its high watermark as ListOffsets reports it during the call: call
// it after the records to resolve were acquired, so that a claim written
// before the acquisition is either read (its transaction committed) or
// known absent (it aborted; a read_committed fetch does not pass an open
// transaction's first offset until the transaction ends, so CatchUp waits
// for it).
//
// A Poll pays for CatchUp, so it costs one round trip when no claim is
// being written: the ListOffsets go straight to the partitions' leaders
// (no metadata request), beside the first Fetch, and a leader gets one
// request of each kind for all its partitions. A high watermark observed
// while the Fetch was in flight is still observed after the acquisition;
// if it is past what the Fetch returned, CatchUp fetches again. The mark
// is ListOffsets', not the Fetch answer's, because a leader that has just
// taken over answers ListOffsets with OFFSET_NOT_AVAILABLE until its high
// watermark has caught up, where a Fetch answer would give the lower one.
//
// Retriable errors are retried within ctx; ctx ending is
// kshare.ErrAbortable, anything else kshare.ErrUsage (the ledger cannot be
// read as configured).
func (r *Resolver) CatchUp(ctx context.Context, parts []int32) error {
	const op = "read claim ledger"
	if len(parts) == 0 {
		return nil
	}
	r.catchMu.Lock()
	defer r.catchMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	marks := make(map[int32]int64, len(parts))
	bo := retry.WithContext(ctx)
	wait := int32(0)
	failures := 0
	var missingSince time.Time
	defer r.failing.Store(nil)
	for {
		var list, fetch []int32
		for _, p := range parts {
			mark, known := marks[p]
			if !known {
				list = append(list, p)
			}
			if !known || r.readerLocked(p).next < mark {
				fetch = append(fetch, p)
			}
		}
		if len(fetch) == 0 {
			return nil
		}
		moved, err := r.roundLocked(ctx, list, fetch, wait, marks)
		if err != nil {
			d := bo.NextBackOff()
			var ke *kerr.Error
			if d < 0 || ctx.Err() != nil || (errors.As(err, &ke) && !ke.Retriable && ke != kerr.NotLeaderForPartition && ke != kerr.UnknownTopicOrPartition) {
				return r.classify(op, ctx, err)
			}
			failures++
			f := r.failing.Load()
			if f == nil {
				f = &Failure{Since: time.Now()}
			}
			r.failing.Store(&Failure{Err: err, Since: f.Since})
			lvl := slog.LevelDebug
			if failures >= 5 && failures&(failures-1) == 0 {
				lvl = slog.LevelWarn // it is not passing: the 5th, 8th, 16th...
			}
			r.logger.Log(ctx, lvl, "ledger read failed; retrying", "partitions", fetch, "failures", failures, "failing_for", time.Since(f.Since).Round(time.Millisecond), "err", err)
			switch rerr := r.refreshLocked(ctx); {
			case rerr == nil:
				missingSince = time.Time{}
			case errors.Is(rerr, kerr.UnknownTopicOrPartition):
				if missingSince.IsZero() {
					missingSince = time.Now()
				} else if time.Since(missingSince) >= missingFor {
					// Not a leader move: the topic is gone.
					return r.classify(op, ctx, fmt.Errorf("the ledger topic no longer exists (metadata has said so for %v): %w", time.Since(missingSince).Round(time.Millisecond), rerr))
				}
			default:
				r.logger.Debug("ledger metadata refresh failed", "err", rerr)
			}
			r.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
			r.mu.Lock()
			if ctx.Err() != nil {
				return r.classify(op, ctx, fmt.Errorf("%w (last error: %w)", ctx.Err(), err))
			}
			wait = 0
			continue
		}
		bo.Reset()
		failures = 0
		missingSince = time.Time{}
		r.failing.Store(nil)
		switch {
		case moved:
			wait = 0
		case len(list) == 0:
			// Every mark is known and no position moved: an open
			// transaction holds the last stable offset below a mark; wait
			// at the leader for it to end.
			if wait == 0 {
				r.logger.Debug("ledger read waits for an open transaction", "partitions", fetch)
			}
			wait = int32(catchUpWait / time.Millisecond)
		}
	}
}

// classify gives a CatchUp failure its class.
func (r *Resolver) classify(op string, ctx context.Context, err error) error {
	if ctx.Err() != nil || retry.IsContextErr(err) {
		return errs.Abortable(op, fmt.Errorf("ledger topic %q: %w", r.topic, err))
	}
	return errs.Usage(op, fmt.Errorf("ledger topic %q: %w", r.topic, err))
}

// readerLocked returns ledger partition p's reading state, made on first
// use.
func (r *Resolver) readerLocked(p int32) *partReader {
	pr := r.parts[p]
	if pr == nil {
		pr = &partReader{}
		r.parts[p] = pr
	}
	return pr
}

// refreshLocked reloads metadata with mu held (loadMetadata takes mu).
func (r *Resolver) refreshLocked(ctx context.Context) error {
	r.mu.Unlock()
	defer r.mu.Lock()
	return r.loadMetadata(ctx)
}

// leaderRound is what one round of CatchUp asks of one leader.
type leaderRound struct {
	leader      int32
	list, fetch []int32
	listed      *kmsg.ListOffsetsResponse
	fetched     *kmsg.FetchResponse
	listErr     error
	fetchErr    error
}

// roundLocked sends, to each leader at once, a ListOffsets of the list
// partitions (whose marks it records in marks) and a read_committed Fetch
// of the fetch partitions from their positions, waiting up to waitMillis
// for data, and indexes the claims that come back. moved reports whether
// a position moved; err is the first failure (what succeeded is kept).
func (r *Resolver) roundLocked(ctx context.Context, list, fetch []int32, waitMillis int32, marks map[int32]int64) (moved bool, err error) {
	rounds := make(map[int32]*leaderRound)
	of := func(p int32) (*leaderRound, error) {
		leader, ok := r.leaders[p]
		if !ok {
			return nil, fmt.Errorf("partition %d: no leader known: %w", p, kerr.LeaderNotAvailable)
		}
		lr := rounds[leader]
		if lr == nil {
			lr = &leaderRound{leader: leader}
			rounds[leader] = lr
		}
		return lr, nil
	}
	for _, p := range list {
		lr, err := of(p)
		if err != nil {
			return false, err
		}
		lr.list = append(lr.list, p)
	}
	for _, p := range fetch {
		lr, err := of(p)
		if err != nil {
			return false, err
		}
		lr.fetch = append(lr.fetch, p)
	}
	// The requests are built here, with mu held, and sent by the
	// goroutines without it, so that Lookup, Stats and PartitionOf do not
	// wait for the network (catchMu keeps other CatchUps out; the answers
	// are taken with mu held again).
	var wg sync.WaitGroup
	for _, lr := range rounds {
		br := r.cl.Broker(int(lr.leader))
		if len(lr.list) > 0 {
			req := r.listRequest(lr.list)
			wg.Go(func() { lr.listed, lr.listErr = req.RequestWith(ctx, br) })
		}
		req := r.fetchRequestLocked(lr.fetch, waitMillis)
		wg.Go(func() { lr.fetched, lr.fetchErr = req.RequestWith(ctx, br) })
	}
	r.mu.Unlock()
	wg.Wait()
	r.mu.Lock()
	note := func(e error) {
		if err == nil {
			err = e
		}
	}
	for _, lr := range rounds {
		if lr.listErr != nil {
			note(fmt.Errorf("list offsets of partitions %v: %w", lr.list, lr.listErr))
		} else if lr.listed != nil {
			note(r.takeMarks(lr.listed, lr.list, marks))
		}
		if lr.fetchErr != nil {
			note(fmt.Errorf("fetch of partitions %v: %w", lr.fetch, lr.fetchErr))
			continue
		}
		m, ferr := r.takeFetchLocked(ctx, lr.fetched, lr.fetch)
		moved = moved || m
		note(ferr)
	}
	return moved, err
}

// listRequest asks for the high watermarks of parts.
func (r *Resolver) listRequest(parts []int32) *kmsg.ListOffsetsRequest {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = r.topic
	for _, p := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = p, -1, -1 // -1: the latest offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// takeMarks records the high watermarks of parts from a ListOffsets
// answer; a partition with an error, or missing, keeps no mark.
func (r *Resolver) takeMarks(resp *kmsg.ListOffsetsResponse, parts []int32, marks map[int32]int64) error {
	var first error
	found := make(map[int32]bool, len(parts))
	for _, t := range resp.Topics {
		if t.Topic != r.topic {
			continue
		}
		for _, p := range t.Partitions {
			found[p.Partition] = true
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				if first == nil {
					first = fmt.Errorf("end offset of partition %d: %w", p.Partition, err)
				}
				continue
			}
			marks[p.Partition] = p.Offset
		}
	}
	for _, p := range parts {
		if !found[p] && first == nil {
			first = fmt.Errorf("no end offset of partition %d in the answer", p)
		}
	}
	return first
}

// fetchRequestLocked is a read_committed Fetch of parts from their
// positions, outside any fetch session.
func (r *Resolver) fetchRequestLocked(parts []int32, waitMillis int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = waitMillis
	req.MinBytes = 1
	req.MaxBytes = 8 << 20
	req.IsolationLevel = 1
	req.SessionEpoch = -1 // no fetch session: every fetch names its partitions
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = r.topic, r.id
	for _, p := range parts {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, r.readerLocked(p).next, 4<<20
		rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// takeFetchLocked indexes the claims of a Fetch answer for parts. moved
// reports whether a position moved; err is the first failure.
func (r *Resolver) takeFetchLocked(ctx context.Context, resp *kmsg.FetchResponse, parts []int32) (moved bool, err error) {
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return false, err
	}
	answered := make(map[int32]*kmsg.FetchResponseTopicPartition, len(parts))
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic != r.topic && t.TopicID != r.id {
			continue
		}
		for j := range t.Partitions {
			answered[t.Partitions[j].Partition] = &t.Partitions[j]
		}
	}
	for _, p := range parts {
		part := answered[p]
		var m bool
		var perr error
		if part == nil {
			perr = errors.New("fetch answer without the partition")
		} else {
			m, perr = r.takePartitionLocked(ctx, p, r.readerLocked(p), part)
		}
		moved = moved || m
		if perr != nil && err == nil {
			err = fmt.Errorf("partition %d at offset %d: %w", p, r.readerLocked(p).next, perr)
		}
	}
	return moved, err
}

// takePartitionLocked indexes the committed claims of one partition's
// fetch answer and moves its position past them.
func (r *Resolver) takePartitionLocked(ctx context.Context, p int32, pr *partReader, part *kmsg.FetchResponseTopicPartition) (moved bool, err error) {
	if part.ErrorCode == kerr.OffsetOutOfRange.Code {
		// Another reader of the group truncated the ledger past this
		// reader's position, which it does only below claims no record
		// the group may still deliver needs: skip to the log start.
		// (The answer leaves the log start offset at -1: ask for it.)
		start := part.LogStartOffset
		if start <= pr.next {
			r.mu.Unlock() // as in a round: no caller waits on the network
			starts, err := r.adm.ListStartOffsets(ctx, r.topic)
			r.mu.Lock()
			if err != nil {
				return false, fmt.Errorf("log start offset after OFFSET_OUT_OF_RANGE: %w", err)
			}
			o, ok := starts.Lookup(r.topic, p)
			if !ok || o.Err != nil {
				return false, fmt.Errorf("log start offset after OFFSET_OUT_OF_RANGE: %v", o.Err)
			}
			start = o.Offset
		}
		if start > pr.next {
			r.logger.Info("ledger position was below the log start offset; skipping ahead", "partition", p, "from", pr.next, "to", start)
			pr.next = start
			return true, nil
		}
	}
	if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
		return false, err
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset: pr.next, IsolationLevel: kgo.ReadCommitted(), Topic: r.topic, Partition: p,
	}, part, r.decomp, nil)
	if fp.Err != nil {
		return false, fp.Err
	}
	for _, rec := range fp.Records {
		c, derr := Decode(rec.Value)
		if derr != nil {
			r.stats.Malformed++
			lvl := slog.LevelDebug
			if r.stats.Malformed == 1 || r.stats.Malformed&(r.stats.Malformed-1) == 0 {
				lvl = slog.LevelWarn // the first, and then every power of two
			}
			r.logger.Log(ctx, lvl, "skipping a ledger record that is not a claim", "partition", p, "offset", rec.Offset, "err", derr, "skipped", r.stats.Malformed)
			continue
		}
		if r.group != "" && c.Group != r.group {
			r.stats.OtherGroups++
			pr.shared = true
			continue
		}
		before := pr.index.Conflicts
		pr.index.Add(c, rec.Offset)
		if d := pr.index.Conflicts - before; d > 0 {
			r.logger.Error("two committed claims cover the same records; the first read wins", "partition", p, "offset", rec.Offset, "group", c.Group, "topic", c.Topic, "input_partition", c.Partition, "txn_id", c.TransactionalID, "offsets", d)
		}
		r.stats.Claims++
	}
	if next > pr.next {
		pr.next = next
		return true, nil
	}
	return false, nil
}
