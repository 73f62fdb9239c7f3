package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/retry"
)

// DefaultPartitions is the partition count of a ledger topic the SDK
// creates: claims of one input partition all go to one ledger partition,
// so more partitions spread the readers' work, and a ledger is small (a
// claim per transaction and input partition).
const DefaultPartitions = 16

// catchUpWait is how long one read_committed fetch of the ledger waits at
// the leader for data when the reader is not past the mark yet: an open
// transaction holds the last stable offset back until it ends.
const catchUpWait = 100 * time.Millisecond

// Resolver reads the committed claims of a ledger topic and answers which
// records they cover. Per ledger partition it keeps a position and an
// Index; CatchUp reads each asked partition read_committed from its
// position until it passes the partition's high watermark as observed at
// the call, so its work is the claims written since the last call, not
// the ledger's length. Its methods are safe for concurrent use; CatchUp
// calls run one at a time.
type Resolver struct {
	cl     *kgo.Client
	adm    *kadm.Client
	topic  string
	group  string // the group whose claims are indexed; "" for all
	logger *slog.Logger
	decomp kgo.Decompressor

	// catchMu runs CatchUp calls one at a time and is held across their
	// round trips; mu guards the state and is never held across one.
	catchMu sync.Mutex
	mu      sync.Mutex
	id      [16]byte
	nparts  int32
	leaders map[int32]int32
	parts   map[int32]*partReader
	stats   Stats
}

// partReader is the reading state of one ledger partition.
type partReader struct {
	next  int64 // the next ledger offset to read
	index Index
	// shared is set once the partition held a claim of another group:
	// this reader cannot tell which of those are still needed, so it
	// never truncates the partition.
	shared bool
	// truncated is the offset the partition was last truncated to.
	truncated int64
}

// Stats are a Resolver's counters.
type Stats struct {
	// Claims counts the committed claims read.
	Claims int64
	// Malformed counts ledger records that were not claims (foreign or
	// corrupt records, claims of another version): skipped.
	Malformed int64
	// Conflicts counts offsets claimed by two committed claims (the first
	// read wins); nonzero means an assumption of the protocol failed.
	Conflicts int64
	// Ranges is the number of claimed ranges held in memory.
	Ranges int
	// OtherGroups counts claims of other groups (not indexed).
	OtherGroups int64
	// Truncated counts the ledger partitions truncated (DeleteRecords).
	Truncated int64
}

// NewResolver returns a Resolver of ledger topic topic that indexes the
// claims of share group group ("" for every group) and reads through cl
// (an ordinary kgo client of its own: a read that its context cuts short
// closes cl's connection; the Resolver sends Metadata, ListOffsets, Fetch,
// DescribeShareGroupOffsets, DeleteRecords and, in Ensure, CreateTopics).
// It contacts nothing yet.
func NewResolver(cl *kgo.Client, topic, group string, logger *slog.Logger) *Resolver {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Resolver{cl: cl, adm: kadm.NewClient(cl), topic: topic, group: group, logger: logger.With("ledger", topic),
		decomp: kgo.DefaultDecompressor(), leaders: make(map[int32]int32), parts: make(map[int32]*partReader)}
}

// Topic returns the ledger topic's name.
func (r *Resolver) Topic() string { return r.topic }

// Ensure loads the ledger topic's metadata and returns its partition
// count. If the topic does not exist and create is set, it creates it
// with partitions partitions (DefaultPartitions if 0) and the cluster's
// default replication factor. A ledger that is missing (and could not be
// created) or unreadable is a kshare.ErrUsage error naming the topic: a
// pipeline must not run on without its ledger. ctx ending is
// kshare.ErrAbortable.
func (r *Resolver) Ensure(ctx context.Context, create bool, partitions int32) (int32, error) {
	const op = "open claim ledger"
	if partitions <= 0 {
		partitions = DefaultPartitions
	}
	created := false
	for {
		err := r.loadMetadata(ctx)
		if err == nil {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.nparts, nil
		}
		if retry.IsContextErr(err) || ctx.Err() != nil {
			return 0, errs.Abortable(op, fmt.Errorf("ledger topic %q: %w", r.topic, err))
		}
		if !errors.Is(err, kerr.UnknownTopicOrPartition) || !create || created {
			return 0, errs.Usage(op, fmt.Errorf("ledger topic %q cannot be read: %w", r.topic, err))
		}
		// Delete policy, no time or size retention: claims are deleted
		// only by Truncate, below those still needed (docs/design.md).
		retention := "-1"
		resp, cerr := r.adm.CreateTopic(ctx, partitions, -1, map[string]*string{
			"cleanup.policy":  kadm.StringPtr("delete"),
			"retention.ms":    &retention,
			"retention.bytes": &retention,
		}, r.topic)
		if cerr == nil {
			cerr = resp.Err
		}
		if cerr != nil && !errors.Is(cerr, kerr.TopicAlreadyExists) {
			if ctx.Err() != nil {
				return 0, errs.Abortable(op, fmt.Errorf("create ledger topic %q: %w", r.topic, cerr))
			}
			return 0, errs.Usage(op, fmt.Errorf("ledger topic %q does not exist and cannot be created: %w", r.topic, cerr))
		}
		r.logger.Info("created the claim ledger topic", "partitions", partitions)
		created = true
		// A new topic's leaders may take a moment to appear: reload
		// until they do, within ctx.
		if _, err := retry.Do(ctx, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, r.loadMetadata(ctx)
		}); err != nil {
			return 0, errs.Abortable(op, fmt.Errorf("ledger topic %q after creating it: %w", r.topic, err))
		}
	}
}

// loadMetadata refreshes the topic's id, partition count and leaders.
func (r *Resolver) loadMetadata(ctx context.Context) error {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(r.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, r.cl)
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("metadata answered %d topics for one", len(resp.Topics))
	}
	t := resp.Topics[0]
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
		return err
	}
	if len(t.Partitions) == 0 {
		return kerr.LeaderNotAvailable
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.id, r.nparts = t.TopicID, int32(len(t.Partitions))
	for _, p := range t.Partitions {
		if p.Leader < 0 {
			return fmt.Errorf("partition %d: %w", p.Partition, kerr.LeaderNotAvailable)
		}
		r.leaders[p.Partition] = p.Leader
	}
	return nil
}

// Partitions returns the ledger's partition count as last loaded (0
// before Ensure).
func (r *Resolver) Partitions() int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nparts
}

// CatchUp reads the given ledger partitions until each one's position is
// past its high watermark as observed after the call began: call it after
// the records to resolve were acquired, so that a claim written before the
// acquisition is either read (its transaction committed) or known absent
// (it aborted; a read_committed fetch does not pass an open transaction's
// first offset until the transaction ends, so CatchUp waits for it).
//
// The mark of a partition is its high watermark as ListOffsets reports it,
// not as a Fetch answer does: a leader just elected may answer a fetch
// with a high watermark below claims that its predecessor acknowledged
// (it learns the mark from its followers), while ListOffsets answers
// OFFSET_NOT_AVAILABLE until the mark reaches the leader's epoch start.
// The ListOffsets and the first Fetch go to each leader together, in
// parallel across leaders: usually one round trip does it all. Retriable
// errors are retried within ctx; ctx ending is kshare.ErrAbortable,
// anything else kshare.ErrUsage (the ledger cannot be read as configured).
func (r *Resolver) CatchUp(ctx context.Context, parts []int32) error {
	const op = "read claim ledger"
	if len(parts) == 0 {
		return nil
	}
	// catchMu, not mu, is held across the round trips: Lookup, Stats
	// and the pruning must not wait for a read that waits for an open
	// transaction. Only CatchUp moves a position, so a position read
	// under mu stays true until this call moves it.
	r.catchMu.Lock()
	defer r.catchMu.Unlock()
	pending := make(map[int32]*catchUp, len(parts))
	r.mu.Lock()
	for _, p := range parts {
		pr := r.parts[p]
		if pr == nil {
			pr = &partReader{}
			r.parts[p] = pr
		}
		pending[p] = &catchUp{pr: pr, next: pr.next, mark: -1}
	}
	r.mu.Unlock()
	bo := retry.WithContext(ctx)
	wait := int32(0)
	failures := 0
	for len(pending) > 0 {
		moved, err := r.fetchRound(ctx, pending, wait)
		for p, st := range pending {
			if st.mark >= 0 && st.next >= st.mark {
				delete(pending, p)
			}
		}
		if err != nil {
			d := bo.NextBackOff()
			var ke *kerr.Error
			if d < 0 || ctx.Err() != nil || (errors.As(err, &ke) && !ke.Retriable && ke != kerr.NotLeaderForPartition && ke != kerr.UnknownTopicOrPartition) {
				return r.classify(op, ctx, err)
			}
			failures++
			lvl := slog.LevelDebug
			if failures == 5 {
				lvl = slog.LevelWarn // it is not passing
			}
			r.logger.Log(ctx, lvl, "ledger fetch failed; retrying", "partitions", len(pending), "failures", failures, "err", err)
			if rerr := r.loadMetadata(ctx); rerr != nil {
				r.logger.Debug("ledger metadata refresh failed", "err", rerr)
			}
			select {
			case <-ctx.Done():
				return r.classify(op, ctx, ctx.Err())
			case <-time.After(d):
			}
			continue
		}
		if moved {
			bo.Reset()
			wait, failures = 0, 0
			continue
		}
		// An open transaction holds the last stable offset below the
		// mark: wait at the leader for it to end.
		if wait == 0 {
			r.logger.Debug("ledger read waits for an open transaction", "partitions", len(pending))
		}
		wait = int32(catchUpWait / time.Millisecond)
	}
	return nil
}

// catchUp is one partition's progress in a CatchUp call.
type catchUp struct {
	pr   *partReader
	next int64 // the position
	mark int64 // the high watermark to pass; -1 until an answer gave it
}

// classify gives a CatchUp failure its class.
func (r *Resolver) classify(op string, ctx context.Context, err error) error {
	if ctx.Err() != nil || retry.IsContextErr(err) {
		return errs.Abortable(op, fmt.Errorf("ledger topic %q: %w", r.topic, err))
	}
	return errs.Usage(op, fmt.Errorf("ledger topic %q: %w", r.topic, err))
}

// fetchRound sends one Fetch to the leader of each partition of pending,
// in parallel, and applies the answers: it reports whether a position
// moved or a mark was learned, and the first failure (the other answers
// are applied all the same).
func (r *Resolver) fetchRound(ctx context.Context, pending map[int32]*catchUp, waitMillis int32) (bool, error) {
	byLeader := make(map[int32][]int32)
	r.mu.Lock()
	for p := range pending {
		leader, ok := r.leaders[p]
		if !ok {
			r.mu.Unlock()
			return false, fmt.Errorf("partition %d: no leader known: %w", p, kerr.LeaderNotAvailable)
		}
		byLeader[leader] = append(byLeader[leader], p)
	}
	r.mu.Unlock()
	type answer struct {
		moved bool
		err   error
	}
	answers := make(chan answer, len(byLeader))
	for leader, ps := range byLeader {
		go func() {
			moved, err := r.fetch(ctx, leader, ps, pending, waitMillis)
			answers <- answer{moved, err}
		}()
	}
	moved := false
	var first error
	for range byLeader {
		a := <-answers
		moved = moved || a.moved
		if first == nil {
			first = a.err
		}
	}
	return moved, first
}

// fetch sends one read_committed Fetch of partitions ps, each from its
// position in pending, to leader, and indexes the committed claims it
// returns (catchMu is held; each partition of pending is only this call's
// to touch). It reports whether a position moved or a mark was learned.
func (r *Resolver) fetch(ctx context.Context, leader int32, ps []int32, pending map[int32]*catchUp, waitMillis int32) (bool, error) {
	r.mu.Lock()
	id := r.id
	r.mu.Unlock()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = waitMillis
	req.MinBytes = 1
	req.MaxBytes = 8 << 20
	req.IsolationLevel = 1
	req.SessionEpoch = -1 // no fetch session: every fetch names its partitions
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = r.topic, id
	sts := make(map[int32]*catchUp, len(ps))
	var unmarked []int32
	for _, p := range ps {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, pending[p].next, 4<<20
		rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		sts[p] = pending[p]
		if pending[p].mark < 0 {
			unmarked = append(unmarked, p)
		}
	}
	req.Topics = append(req.Topics, rt)
	type listed struct {
		marks map[int32]int64
		err   error
	}
	var ends chan listed
	if len(unmarked) > 0 {
		ends = make(chan listed, 1)
		go func() {
			marks, err := r.listEnds(ctx, leader, unmarked)
			ends <- listed{marks, err}
		}()
	}
	kresp, err := r.cl.Broker(int(leader)).Request(ctx, req)
	moved := false
	var first error
	if ends != nil {
		l := <-ends
		for p, mark := range l.marks {
			pending[p].mark = mark
			moved = true
		}
		first = l.err
	}
	if err != nil {
		return moved, err
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return moved, err
	}
	for i := range resp.Topics {
		if t := &resp.Topics[i]; t.Topic != r.topic && t.TopicID != id {
			continue // not asked for
		}
		for j := range resp.Topics[i].Partitions {
			part := &resp.Topics[i].Partitions[j]
			st := sts[part.Partition]
			if st == nil {
				continue // not asked for, or answered twice
			}
			delete(sts, part.Partition)
			m, err := r.absorb(ctx, part, st)
			moved = moved || m
			if err != nil && first == nil {
				first = fmt.Errorf("partition %d at offset %d: %w", part.Partition, st.next, err)
			}
		}
	}
	if len(sts) > 0 && first == nil {
		first = fmt.Errorf("fetch answer without %d of its partitions", len(sts))
	}
	return moved, first
}

// absorb applies one partition's fetch answer to st: it indexes the
// committed claims and moves the position past them (the mark comes from
// listEnds, never from this answer).
func (r *Resolver) absorb(ctx context.Context, part *kmsg.FetchResponseTopicPartition, st *catchUp) (bool, error) {
	p, pr, from := part.Partition, st.pr, st.next
	if part.ErrorCode == kerr.OffsetOutOfRange.Code {
		// Another reader of the group truncated the ledger past this
		// reader's position, which it does only below claims no record
		// the group may still deliver needs: skip to the log start.
		// (The answer leaves the log start offset at -1: ask for it.)
		start := part.LogStartOffset
		if start <= from {
			starts, err := r.adm.ListStartOffsets(ctx, r.topic)
			if err != nil {
				return false, fmt.Errorf("log start offset after OFFSET_OUT_OF_RANGE: %w", err)
			}
			o, ok := starts.Lookup(r.topic, p)
			if !ok || o.Err != nil {
				return false, fmt.Errorf("log start offset after OFFSET_OUT_OF_RANGE: %v", o.Err)
			}
			start = o.Offset
		}
		if start > from {
			r.logger.Info("ledger position was below the log start offset; skipping ahead", "partition", p, "from", from, "to", start)
			r.mu.Lock()
			pr.next = start
			r.mu.Unlock()
			st.next = start
			return true, nil
		}
	}
	if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
		return false, err
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset: from, IsolationLevel: kgo.ReadCommitted(), Topic: r.topic, Partition: p,
	}, part, r.decomp, nil)
	if fp.Err != nil {
		return false, fp.Err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
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
	}
	moved := pr.next > st.next
	st.next = pr.next
	return moved, nil
}

// listEnds asks leader for the high watermarks of ledger partitions ps
// (ListOffsets, latest, read_uncommitted) and returns those it answered;
// the error is the first partition's failure.
func (r *Resolver) listEnds(ctx context.Context, leader int32, ps []int32) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = r.topic
	for _, p := range ps {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = p, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	kresp, err := r.cl.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		return nil, err
	}
	resp := kresp.(*kmsg.ListOffsetsResponse)
	asked := make(map[int32]bool, len(ps))
	for _, p := range ps {
		asked[p] = true
	}
	marks := make(map[int32]int64, len(ps))
	var first error
	for _, t := range resp.Topics {
		if t.Topic != r.topic {
			continue // not asked for
		}
		for _, p := range t.Partitions {
			if !asked[p.Partition] {
				continue // not asked for, or answered twice
			}
			delete(asked, p.Partition)
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				if first == nil {
					first = fmt.Errorf("end offset of partition %d: %w", p.Partition, err)
				}
				continue
			}
			marks[p.Partition] = p.Offset
		}
	}
	if first == nil && len(marks) < len(ps) {
		first = fmt.Errorf("end offsets answered for %d of %d partitions", len(marks), len(ps))
	}
	return marks, first
}

// Lookup returns the type of the committed claim, among those CatchUp has
// read, that covers offset off of in.
func (r *Resolver) Lookup(in Input, off int64) (int8, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nparts == 0 {
		return 0, false
	}
	pr := r.parts[in.LedgerPartition(r.nparts)]
	if pr == nil {
		return 0, false
	}
	return pr.index.Lookup(in, off)
}

// LookupEach calls covered for each offsets[i] of in that a committed
// claim among those CatchUp has read covers, with the claim's type: one
// lock and one ledger-partition hash for a Poll's records of an input
// partition, where Lookup would take them per record.
func (r *Resolver) LookupEach(in Input, offsets []int64, covered func(i int, typ int8)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nparts == 0 || len(offsets) == 0 {
		return
	}
	pr := r.parts[in.LedgerPartition(r.nparts)]
	if pr == nil {
		return
	}
	es := pr.index.inputs[in]
	for i, off := range offsets {
		if typ, ok := lookupEntries(es, off); ok {
			covered(i, typ)
		}
	}
}

// Prune forgets the claims of in below start, its share-partition start
// offset (records below it are never delivered again).
func (r *Resolver) Prune(in Input, start int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nparts == 0 {
		return
	}
	if pr := r.parts[in.LedgerPartition(r.nparts)]; pr != nil {
		pr.index.Prune(in, start)
	}
}

// Stats returns the Resolver's counters.
func (r *Resolver) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	for _, pr := range r.parts {
		s.Conflicts += pr.index.Conflicts
		s.Ranges += pr.index.Ranges()
	}
	return s
}

// PruneGroup asks the cluster for group's share-partition start offsets
// (DescribeShareGroupOffsets) and forgets the group's claims below them:
// the index then holds only claims of records the group may still
// deliver, so its memory is bounded by the records in flight, not by the
// ledger's length. A failure changes nothing and is returned unclassified
// (the caller tries again later).
func (r *Resolver) PruneGroup(ctx context.Context, group string) error {
	described, err := r.adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		return err
	}
	d, ok := described[group]
	if !ok {
		return fmt.Errorf("share group %q not in the answer", group)
	}
	if d.Err != nil {
		return d.Err
	}
	starts := make(map[Input]int64)
	d.Offsets.Each(func(o kadm.ShareOffset) {
		if o.Err == nil && o.StartOffset >= 0 {
			starts[Input{group, o.TopicID, o.Partition}] = o.StartOffset
		}
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pr := range r.parts {
		for _, in := range pr.index.Inputs() {
			if start, ok := starts[in]; ok {
				pr.index.Prune(in, start)
			}
		}
	}
	return nil
}

// Truncate deletes (DeleteRecords) the records of each ledger partition
// this Resolver has read below the lowest offset whose claim it still
// holds (or below its position, when it holds none): call it after
// PruneGroup, so that only claims of records the group may still deliver
// are held. A partition that held a claim of another group is never
// truncated (this reader cannot tell what that group still needs: give
// each group a ledger of its own), nor is one below its last truncation.
// Claims past the position (unread, or in open transactions) are never
// touched. Truncating is safe for the other readers of the group too:
// they need no claim below a start offset, and every claim at or above it
// that this reader read is still held. Failures are returned unclassified
// and change nothing that matters (the next call tries again).
func (r *Resolver) Truncate(ctx context.Context) error {
	r.mu.Lock()
	offsets := make(kadm.Offsets)
	for p, pr := range r.parts {
		if pr.shared {
			continue
		}
		to := pr.next
		if low, ok := pr.index.LowestNeeded(); ok {
			to = low
		}
		if to > pr.truncated {
			offsets.Add(kadm.Offset{Topic: r.topic, Partition: p, At: to})
		}
	}
	r.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	resps, err := r.adm.DeleteRecords(ctx, offsets)
	if err != nil {
		return err
	}
	var first error
	r.mu.Lock()
	defer r.mu.Unlock()
	resps.Each(func(d kadm.DeleteRecordsResponse) {
		if d.Err != nil {
			if first == nil {
				first = fmt.Errorf("delete records of partition %d: %w", d.Partition, d.Err)
			}
			return
		}
		if pr := r.parts[d.Partition]; pr != nil && d.LowWatermark > pr.truncated {
			pr.truncated = d.LowWatermark
			r.stats.Truncated++
		}
	})
	return first
}
