package eos

import (
	"context"
	"errors"
	"fmt"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/txnclient"
)

// Check is what a read_committed reader found in the output.
type Check struct {
	Inputs     int `json:"inputs"`       // input ids expected
	Outputs    int `json:"outputs_seen"` // committed output records read
	Duplicates int `json:"duplicates"`   // extra copies of input ids
	Missing    int `json:"missing"`      // input ids never seen`
	// Archived counts inputs with no output whose last delivery reached
	// the group's delivery limit in a transaction that did not commit: the
	// broker archived them, as KIP-932 says, and the run reports them.
	Archived int `json:"archived_by_delivery_limit"`
	// Unknown counts output values that are not input ids at all.
	Unknown int `json:"unknown"`
	// MissingSample lists the first missing ids as ranges ("a..b").
	MissingSample []string `json:"missing_sample,omitempty"`
	// DuplicateSample lists the first ids seen more than once.
	DuplicateSample []string `json:"duplicate_sample,omitempty"`
	// DuplicatesByPartition counts, for each output partition, the copies
	// it holds of ids seen more than once: where a violation happened,
	// since every copy of an id lands in the partition its key hashes
	// to. Only ReadCommitted fills it.
	DuplicatesByPartition map[int32]int `json:"duplicates_by_partition,omitempty"`
	// MissingByPartition counts the missing ids by the output partition
	// their key hashes to with kgo's default partitioner, which the
	// pipeline's producers use: where their output went missing. Only
	// ReadCommitted fills it.
	MissingByPartition map[int32]int `json:"missing_by_partition,omitempty"`
}

// OK reports whether every input id was seen exactly once.
func (c Check) OK() bool { return c.Duplicates == 0 && c.Missing == 0 && c.Unknown == 0 }

// String says what is wrong, or "OK".
func (c Check) String() string {
	if c.OK() {
		return "OK"
	}
	return fmt.Sprintf("%d duplicates, %d missing, %d unknown", c.Duplicates, c.Missing, c.Unknown)
}

const sampleSize = 5

// ReadCommitted reads the committed output of topic, every partition up to
// its last stable offset at the time of the call, and checks it against the
// ids ID(0)..ID(inputs-1). It fetches partition by partition with explicit
// offsets, so that it knows for certain when it has read everything, aborted
// batches and markers included.
//
// archived, if not nil, names the ids that the pipeline knows were archived
// by the delivery limit; a missing id among them counts as Archived, not
// Missing.
func ReadCommitted(ctx context.Context, seeds []string, topic string, inputs int, archived map[string]bool) (Check, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return Check{}, fmt.Errorf("verifier: %w", err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return Check{}, fmt.Errorf("verifier: last stable offsets of %s: %w", topic, err)
	}
	counts := make(map[string]int, inputs)
	perPartition := make(map[int32]map[string]int)
	check := Check{Inputs: inputs}
	var readErr error
	ends.Each(func(o kadm.ListedOffset) {
		if readErr == nil && o.Offset > 0 {
			here := make(map[string]int)
			perPartition[o.Partition] = here
			readErr = readPartition(ctx, cl, topic, o.Partition, o.Offset, func(value []byte) {
				counts[string(value)]++
				here[string(value)]++
				check.Outputs++
			})
		}
	})
	if readErr != nil {
		return check, readErr
	}
	outputs := check.Outputs
	check = checkCounts(counts, inputs, archived)
	check.Outputs = outputs
	check.DuplicatesByPartition = duplicatesByPartition(counts, perPartition)
	check.MissingByPartition = missingByPartition(counts, inputs, archived, topic, len(ends[topic]))
	return check, nil
}

// checkCounts compares counts, how many times each output value was seen,
// with the ids ID(0)..ID(inputs-1) and returns the Check without Outputs:
// duplicates, missing ids (sampled as runs "a..b"), archived ids (a
// missing id among archived) and unknown values. It does not modify
// counts.
func checkCounts(counts map[string]int, inputs int, archived map[string]bool) Check {
	check := Check{Inputs: inputs}
	seen := 0
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
	for i := 0; i < inputs; i++ {
		id := ID(i)
		n, ok := counts[id]
		if ok {
			seen++
		}
		switch {
		case n == 0 && archived[id]:
			check.Archived++
			endRun(i - 1)
		case n == 0:
			check.Missing++
			if missingFrom < 0 {
				missingFrom = i
			}
		default:
			endRun(i - 1)
			if n > 1 {
				check.Duplicates += n - 1
				if len(check.DuplicateSample) < sampleSize {
					check.DuplicateSample = append(check.DuplicateSample, id)
				}
			}
		}
	}
	endRun(inputs - 1)
	check.Unknown = len(counts) - seen
	return check
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

// missingByPartition counts the ids 0..inputs-1 never seen (and not
// archived) by the partition of n that kgo's default partitioner gives
// their key; nil when none is missing.
func missingByPartition(counts map[string]int, inputs int, archived map[string]bool, topic string, n int) map[int32]int {
	if n == 0 {
		return nil
	}
	partitioner := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	var out map[int32]int
	for i := 0; i < inputs; i++ {
		id := ID(i)
		if counts[id] > 0 || archived[id] {
			continue
		}
		if out == nil {
			out = make(map[int32]int)
		}
		out[int32(partitioner.Partition(&kgo.Record{Key: []byte(id)}, n))]++
	}
	return out
}

// readPartition fetches [0, end) of one partition at read_committed and
// hands every returned record's value to fn.
func readPartition(ctx context.Context, cl *kgo.Client, topic string, partition int32, end int64, fn func([]byte)) error {
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
				fn(r.Value)
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
	bo := backoff.WithMaxRetries(txnclient.NewBackoff(ctx), fetchAttempts)
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
