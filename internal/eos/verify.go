package eos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/retry"
)

// Archive says why a record was archived at the group's delivery limit:
// its last delivery ended in a transaction or checkpoint that did not
// commit, and the broker archived it instead of delivering it again.
type Archive int8

const (
	// ArchivedOnPurpose: the run itself ended that last delivery on
	// purpose (a deliberate abort, a checkpoint failed on purpose).
	ArchivedOnPurpose Archive = iota + 1
	// ArchivedByFailure: the last delivery failed (a killed worker, an
	// expired lock, a failed commit). The input was never processed: the
	// run is not exactly-once.
	ArchivedByFailure
)

// Endings is what a verification knows of how the inputs ended besides
// the output: the inputs the pipeline saw archived at the delivery limit,
// with why, and, when the run followed the group's share state on the
// broker, how the broker ended each input (input index -> Kafka's record
// state, ACKNOWLEDGED 2 or ARCHIVED 4).
type Endings struct {
	Archived map[string]Archive
	// Broker is nil when the share state was not followed; BrokerWhy then
	// says why (empty: the caller did not try).
	Broker    map[int]int8
	BrokerWhy string
}

// archiveOf says how input i (value v) without output ended, as far as e
// knows: archived on purpose or after a failure, or lost (0) when it was
// acknowledged, or when nothing says otherwise. unknown is set when the
// broker's share state, which was followed, did not show its end.
func (e Endings) archiveOf(i int, v string) (a Archive, unknown bool) {
	known := e.Archived[v]
	if e.Broker == nil {
		return known, false
	}
	switch e.Broker[i] {
	case stateArchived:
		if known == 0 {
			known = ArchivedByFailure // archived by the broker unseen
		}
		return known, false
	case stateAcknowledged:
		return 0, false // acknowledged without output: lost
	}
	return 0, true
}

// Check compares the committed output with the input, id by id, and with
// how far the group has acknowledged the input.
type Check struct {
	Inputs  int `json:"inputs"`       // input records
	Outputs int `json:"outputs_seen"` // committed output records read
	// Acknowledged counts inputs whose share state is final: the group's
	// share-partition start offset has passed them (acknowledged, rejected
	// or archived).
	Acknowledged int `json:"inputs_acknowledged"`
	// Unacknowledged = Inputs - Acknowledged: inputs not yet final.
	Unacknowledged int `json:"inputs_not_acknowledged"`
	// Processed counts the inputs the pipeline has dealt with: output at
	// least once, or poison and rejected. It can exceed Acknowledged in a
	// run stopped early: a start offset stays behind a record still
	// locked (by a killed worker, say) while later ones are acknowledged.
	Processed  int `json:"inputs_processed"`
	Duplicates int `json:"duplicates"` // extra copies of input ids
	// Missing counts acknowledged inputs with no output that were neither
	// rejected nor archived: lost. When the broker's share state was
	// followed (ShareState), these are the inputs the broker
	// ACKNOWLEDGED without an output.
	Missing int `json:"missing"`
	// EndUnknown counts, when the share state was followed, inputs with no
	// output that the start offset passed but whose end the share state
	// did not show (neither ACKNOWLEDGED nor ARCHIVED): the verification
	// cannot tell whether they were lost.
	EndUnknown int `json:"end_unknown"`
	// ShareState says where the archived inputs are known from: "broker"
	// (the group's share state, followed during the run) or why not.
	ShareState string `json:"archived_known_from"`
	// Rejected counts poison inputs the pipeline rejected on purpose: they
	// are archived and have no output.
	Rejected int `json:"rejected_on_purpose"`
	// RejectedOutput counts outputs of poison inputs, which the pipeline
	// must reject.
	RejectedOutput int `json:"outputs_of_rejected_inputs"`
	// ArchivedOnPurpose and ArchivedByFailure count acknowledged inputs
	// with no output whose last delivery reached the group's delivery
	// limit, by why that delivery did not commit (see Archive).
	ArchivedOnPurpose int `json:"archived_on_purpose"`
	ArchivedByFailure int `json:"archived_by_failure"`
	// Unknown counts outputs whose value is not an input value at all.
	Unknown int `json:"unknown_outputs"`
	// StaleCommits counts the transactions that committed although their
	// worker was stopped past its records' locks after writing its
	// claims (Faults.PausePastLock): the renewal before EndTxn must have
	// refused them.
	StaleCommits int `json:"stale_commits,omitempty"`
	// DeadLetterTopic is the dead-letter topic the run checked ("":
	// none), and DeadLetterCheck what it found there.
	DeadLetterTopic string `json:"dead_letter_topic,omitempty"`
	DeadLetterCheck
	// MissingSample lists the first missing ids as ranges ("a..b").
	MissingSample []string `json:"missing_sample,omitempty"`
	// DuplicateSample lists the first ids seen more than once.
	DuplicateSample []string `json:"duplicate_sample,omitempty"`
	// DuplicatesByPartition counts, for each output partition, the copies
	// it holds of ids seen more than once: where a duplication happened,
	// since every copy of an id lands in the partition its key hashes
	// to. Only ReadCommitted fills it.
	DuplicatesByPartition map[int32]int `json:"duplicates_by_partition,omitempty"`
	// MissingByPartition counts the Missing inputs by the output partition
	// their key hashes to with kgo's default partitioner, which the
	// pipeline's producers use: where their output went missing. Only
	// ReadCommitted fills it.
	MissingByPartition map[int32]int `json:"missing_by_partition,omitempty"`
}

const sampleSize = 5

// ReadCommitted reads the committed output of topic and checks it against
// in, given start, the group's share-partition start offsets of the input,
// and ends, what else is known of how the inputs ended.
//
// It first waits, up to settle, until no transaction is open on topic
// (every partition's last stable offset is its end): a transaction that a
// stopped worker left open hides everything committed after it from a
// read_committed reader until its coordinator aborts it, at the latest
// when the transaction timeout runs out. It then fetches partition by
// partition with explicit offsets, up to the last stable offset, so that
// it knows for certain when it has read everything, aborted batches and
// markers included.
func ReadCommitted(ctx context.Context, seeds []string, topic string, in *Input, start map[int32]int64, ends Endings, settle time.Duration) (Check, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return Check{}, fmt.Errorf("verifier: %w", err)
	}
	defer cl.Close()
	stable, err := waitStable(ctx, kadm.NewClient(cl), topic, settle)
	if err != nil {
		return Check{}, err
	}
	counts := make(map[string]int, in.N)
	perPartition := make(map[int32]map[string]int)
	outputs := 0
	var readErr error
	stable.Each(func(o kadm.ListedOffset) {
		if readErr == nil && o.Offset > 0 {
			here := make(map[string]int)
			perPartition[o.Partition] = here
			readErr = readPartition(ctx, cl, topic, o.Partition, o.Offset, func(value []byte) {
				counts[string(value)]++
				here[string(value)]++
				outputs++
			})
		}
	})
	if readErr != nil {
		return Check{}, readErr
	}
	check := checkCounts(counts, outputs, in, start, ends)
	check.DuplicatesByPartition = duplicatesByPartition(counts, perPartition)
	check.MissingByPartition = missingByPartition(counts, in, start, ends, topic, len(stable[topic]))
	return check, nil
}

// duplicatesByPartition counts, per partition, the copies there of values
// seen more than once in all; nil when there are none.
func duplicatesByPartition(counts map[string]int, perPartition map[int32]map[string]int) map[int32]int {
	var out map[int32]int
	for p, here := range perPartition {
		for v, n := range here {
			if counts[v] > 1 {
				if out == nil {
					out = make(map[int32]int)
				}
				out[p] += n
			}
		}
	}
	return out
}

// missingByPartition counts the inputs checkCounts calls Missing
// (acknowledged, not poison, never output, not archived) by the partition
// of n that kgo's default partitioner gives their key, ID(i); nil when
// none is missing.
func missingByPartition(counts map[string]int, in *Input, start map[int32]int64, ends Endings, topic string, n int) map[int32]int {
	if n == 0 {
		return nil
	}
	partitioner := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	var out map[int32]int
	for i := 0; i < in.N; i++ {
		v := in.Value(i)
		if counts[v] > 0 || in.Poison(i) || !in.acknowledged(i, start) {
			continue
		}
		if a, unknown := ends.archiveOf(i, v); a != 0 || unknown {
			continue
		}
		if out == nil {
			out = make(map[int32]int)
		}
		out[int32(partitioner.Partition(&kgo.Record{Key: []byte(ID(i))}, n))]++
	}
	return out
}

// checkCounts compares counts, how many times each output value was seen
// (outputs in all), with the input in, given the group's share-partition
// start offsets and the inputs known to be archived (see ReadCommitted).
// It does not modify counts.
func checkCounts(counts map[string]int, outputs int, in *Input, start map[int32]int64, ends Endings) Check {
	check := Check{Inputs: in.N, Outputs: outputs, ShareState: "workers only"}
	switch {
	case ends.Broker != nil:
		check.ShareState = "broker"
	case ends.BrokerWhy != "":
		check.ShareState = "workers only: " + ends.BrokerWhy
	}
	seen := 0 // outputs of input values
	missingFrom := -1
	endRun := func(last int) {
		if missingFrom >= 0 && len(check.MissingSample) < sampleSize {
			r := ID(missingFrom)
			if last > missingFrom {
				r += ".." + ID(last)
			}
			check.MissingSample = append(check.MissingSample, r)
		}
		missingFrom = -1
	}
	for i := 0; i < in.N; i++ {
		v := in.Value(i)
		n := counts[v]
		seen += n
		acked := in.acknowledged(i, start)
		if acked {
			check.Acknowledged++
		}
		lost := false
		if n > 0 && !in.Poison(i) || n == 0 && in.Poison(i) && acked {
			check.Processed++
		}
		switch {
		case in.Poison(i) && n > 0:
			check.RejectedOutput += n
		case in.Poison(i) && acked:
			check.Rejected++
		case n > 1:
			check.Duplicates += n - 1
			if len(check.DuplicateSample) < sampleSize {
				check.DuplicateSample = append(check.DuplicateSample, ID(i))
			}
		case n == 1 || !acked:
		default:
			switch a, unknown := ends.archiveOf(i, v); {
			case a == ArchivedOnPurpose:
				check.ArchivedOnPurpose++
			case a == ArchivedByFailure:
				check.ArchivedByFailure++
			case unknown:
				check.EndUnknown++
			default:
				lost = true
				check.Missing++
				if missingFrom < 0 {
					missingFrom = i
				}
			}
		}
		if !lost {
			endRun(i - 1)
		}
	}
	endRun(in.N - 1)
	check.Unacknowledged = check.Inputs - check.Acknowledged
	check.Unknown = outputs - seen
	return check
}

// waitStable polls the last stable and end offsets of topic until they
// are equal on every partition, and returns the last stable offsets. It
// fails if a transaction is still open after within.
func waitStable(ctx context.Context, adm *kadm.Client, topic string, within time.Duration) (kadm.ListedOffsets, error) {
	deadline := time.Now().Add(within)
	for {
		stable, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = stable.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("verifier: last stable offsets of %s: %w", topic, err)
		}
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("verifier: end offsets of %s: %w", topic, err)
		}
		var open error
		stable.Each(func(o kadm.ListedOffset) {
			if e, ok := ends.Lookup(topic, o.Partition); ok && e.Offset != o.Offset && open == nil {
				open = fmt.Errorf("verifier: %s/%d still has an open transaction after %v (last stable offset %d, end %d)",
					topic, o.Partition, within, o.Offset, e.Offset)
			}
		})
		if open == nil {
			return stable, nil
		}
		if time.Now().After(deadline) {
			return nil, open
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return nil, fmt.Errorf("verifier: waiting for open transactions on %s: %w", topic, ctx.Err())
		}
	}
}

// readPartition fetches [0, end) of one partition at read_committed and
// hands every returned record's value to fn.
func readPartition(ctx context.Context, cl *kgo.Client, topic string, partition int32, end int64, fn func([]byte)) error {
	return readRecords(ctx, cl, topic, partition, end, func(r *kgo.Record) { fn(r.Value) })
}

// readRecords reads partition read_committed from its start to end, and
// hands fn each committed record below end.
func readRecords(ctx context.Context, cl *kgo.Client, topic string, partition int32, end int64, fn func(*kgo.Record)) error {
	decompressor := kgo.DefaultDecompressor()
	for offset := int64(0); offset < end; {
		resp, err := fetchOnce(ctx, cl, topic, partition, offset)
		if err != nil {
			return fmt.Errorf("verifier: %s/%d at %d: %w", topic, partition, offset, err)
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset:         offset,
			IsolationLevel: kgo.ReadCommitted(),
			Topic:          topic,
			Partition:      partition,
		}, resp, decompressor, nil)
		if fp.Err != nil {
			return fmt.Errorf("verifier: %s/%d at %d: %w", topic, partition, offset, fp.Err)
		}
		for _, r := range fp.Records {
			if r.Offset < end {
				fn(r)
			}
		}
		if next <= offset {
			return fmt.Errorf("verifier: %s/%d made no progress at offset %d of %d", topic, partition, offset, end)
		}
		offset = next
	}
	return nil
}

// fetchAttempts bounds how often fetchOnce asks again after a retriable
// error (a leader that moved, say).
const fetchAttempts = 20

// fetchOnce fetches one partition from its current leader, refreshing
// metadata and retrying retriable errors with kshare's jittered backoff.
func fetchOnce(ctx context.Context, cl *kgo.Client, topic string, partition int32, offset int64) (*kmsg.FetchResponseTopicPartition, error) {
	bo := backoff.WithMaxRetries(retry.WithContext(ctx), fetchAttempts)
	return backoff.RetryWithData(func() (*kmsg.FetchResponseTopicPartition, error) {
		leader, topicID, err := leaderOf(ctx, cl, topic, partition)
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = 0
		req.MaxBytes = 8 << 20
		req.IsolationLevel = 1
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, 8<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		raw, err := cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			return nil, backoff.Permanent(fmt.Errorf("fetch from node %d: %w", leader, err))
		}
		resp := raw.(*kmsg.FetchResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return nil, backoff.Permanent(fmt.Errorf("fetch answered %d topics", len(resp.Topics)))
		}
		p := &resp.Topics[0].Partitions[0]
		err = kerr.ErrorForCode(p.ErrorCode)
		if err == nil {
			return p, nil
		}
		if !kerr.IsRetriable(err) {
			return nil, backoff.Permanent(err)
		}
		return nil, err
	}, bo)
}

// errPartitionUnknown means metadata does not list the partition.
var errPartitionUnknown = errors.New("partition not in metadata")

// leaderOf returns the leader and the topic id of one partition.
func leaderOf(ctx context.Context, cl *kgo.Client, topic string, partition int32) (int32, [16]byte, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, [16]byte{}, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Partition == partition {
				return p.Leader, t.TopicID, kerr.ErrorForCode(p.ErrorCode)
			}
		}
	}
	return 0, [16]byte{}, fmt.Errorf("metadata of %s: %w", topic, errPartitionUnknown)
}
