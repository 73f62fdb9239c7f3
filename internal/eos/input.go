package eos

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ID returns the id of input record i.
func ID(i int) string { return fmt.Sprintf("id-%09d", i) }

// poisonPrefix marks the value of an input record that the transform must
// refuse: "poison:" followed by the record's id.
const poisonPrefix = "poison:"

// Input is what WriteInput wrote: n records with ids ID(0)..ID(n-1), some
// of them poison, and where each landed, so that the verification can tell
// which inputs a share-partition start offset has passed.
type Input struct {
	Topic string
	// N is the number of input records.
	N int
	// RejectEvery makes every RejectEvery-th record poison (0: none): its
	// value is not an id, the transform refuses it and the pipeline must
	// acknowledge it with REJECT, so it has no output.
	RejectEvery int

	partition []int32 // by record index
	offset    []int64 // by record index
	// sorted holds each partition's offsets in order.
	sorted map[int32][]int64
}

// Poison reports whether input record i is one the pipeline must reject.
func (in *Input) Poison(i int) bool {
	return in.RejectEvery > 0 && i%in.RejectEvery == in.RejectEvery-1
}

// Value returns the value written for input record i: its id, or for a
// poison record "poison:" and its id.
func (in *Input) Value(i int) string {
	if in.Poison(i) {
		return poisonPrefix + ID(i)
	}
	return ID(i)
}

// acknowledged reports whether start, the share-partition start offsets
// of the group, has passed input record i: its state is final
// (acknowledged or archived).
func (in *Input) acknowledged(i int, start map[int32]int64) bool {
	s, ok := start[in.partition[i]]
	return ok && in.offset[i] < s
}

// CountAcknowledged returns how many input records start, the
// share-partition start offsets of the group, has passed.
func (in *Input) CountAcknowledged(start map[int32]int64) int {
	n := 0
	for p, offs := range in.sorted {
		if s, ok := start[p]; ok {
			n += sort.Search(len(offs), func(i int) bool { return offs[i] >= s })
		}
	}
	return n
}

// WriteInput produces n records to topic, record i with value in.Value(i)
// and key ID(i) so that they spread over the partitions, every
// rejectEvery-th of them poison (0: none), and returns once all are
// acknowledged, with where each landed. It logs progress every second,
// counting the records the cluster acknowledged. opts are added to the
// producer's options.
//
// When ctx ends it stops producing at once and returns an error wrapping
// ctx.Err(); the records already produced may or may not have landed.
func WriteInput(ctx context.Context, seeds []string, topic string, n, rejectEvery int, logger *slog.Logger, opts ...kgo.Opt) (*Input, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("input producer: %w", err)
	}
	defer cl.Close()

	in := &Input{Topic: topic, N: n, RejectEvery: rejectEvery, partition: make([]int32, n), offset: make([]int64, n)}
	var (
		mu       sync.Mutex
		firstErr error
		acked    int
	)
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	// Without the check of ctx, a stopped run would go on through every
	// remaining record, each failing at once.
	for i := 0; i < n && ctx.Err() == nil; i++ {
		select {
		case <-ticker.C:
			mu.Lock()
			logger.Info("writing input", "acked", acked, "of", n)
			mu.Unlock()
		default:
		}
		cl.Produce(ctx, &kgo.Record{Key: []byte(ID(i)), Value: []byte(in.Value(i))}, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			in.partition[i], in.offset[i] = r.Partition, r.Offset
			acked++
		})
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("input producer: stopped: %w", err)
	}
	if err := cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("input producer: flush: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		return nil, fmt.Errorf("input producer: %w", firstErr)
	}
	in.sorted = map[int32][]int64{}
	for i := range n {
		in.sorted[in.partition[i]] = append(in.sorted[in.partition[i]], in.offset[i])
	}
	for _, offs := range in.sorted {
		sort.Slice(offs, func(a, b int) bool { return offs[a] < offs[b] })
	}
	return in, nil
}
