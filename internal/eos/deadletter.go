package eos

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/wire"
)

// DeadLetterCheck is what the verification found in the dead-letter topic
// (Config.DeadLetterTopic): the copies of this run's inputs that
// committed, read read_committed.
type DeadLetterCheck struct {
	// DeadLetters counts the copies of this run's inputs (their
	// wire.DLQHeaderTopic is its input topic; copies of other runs
	// sharing the topic are left out).
	DeadLetters int `json:"dead_letters"`
	// DeadLetterMissing counts the rejected inputs without a copy;
	// DeadLetterDuplicates the copies past the first of an input;
	// DeadLetterWrong the copies of inputs that were not rejected, of no
	// input at all, or whose headers do not say where the input was.
	DeadLetterMissing    int `json:"dead_letters_missing"`
	DeadLetterDuplicates int `json:"dead_letter_duplicates"`
	DeadLetterWrong      int `json:"dead_letters_wrong"`
}

// checkDeadLetters reads the dead-letter topic read_committed and checks
// that every poison input that the pipeline rejected (acknowledged, and
// not archived at the delivery limit by the workers' account) has
// exactly one committed copy there, carrying its value and the headers
// that say where it came from, and that nothing else of this run is
// there.
func checkDeadLetters(ctx context.Context, seeds []string, topic, group string, in *Input, start map[int32]int64, ends Endings, settle time.Duration) (DeadLetterCheck, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return DeadLetterCheck{}, fmt.Errorf("verifier: %w", err)
	}
	defer cl.Close()
	stable, err := waitStable(ctx, kadm.NewClient(cl), topic, settle)
	if err != nil {
		return DeadLetterCheck{}, err
	}
	index := make(map[string]int, in.N)
	for i := range in.N {
		index[in.Value(i)] = i
	}
	var c DeadLetterCheck
	copies := make(map[int]int)
	var readErr error
	stable.Each(func(o kadm.ListedOffset) {
		if readErr != nil || o.Offset <= 0 {
			return
		}
		readErr = readRecords(ctx, cl, topic, o.Partition, o.Offset, func(r *kgo.Record) {
			h := make(map[string]string, len(r.Headers))
			for _, x := range r.Headers {
				h[x.Key] = string(x.Value)
			}
			if h[wire.DLQHeaderTopic] != in.Topic {
				return // another run's
			}
			c.DeadLetters++
			i, ok := index[string(r.Value)]
			if !ok || !in.Poison(i) || !deadLetterHeadersOK(h, in, i, group) {
				c.DeadLetterWrong++
				return
			}
			copies[i]++
		})
	})
	if readErr != nil {
		return DeadLetterCheck{}, readErr
	}
	for i := range in.N {
		switch n := copies[i]; {
		case n > 1:
			c.DeadLetterDuplicates += n - 1
		case n == 0 && in.Poison(i) && in.acknowledged(i, start) && ends.Archived[in.Value(i)] == 0:
			c.DeadLetterMissing++
		}
	}
	return c, nil
}

// deadLetterHeadersOK reports whether the headers h of a copy of input i
// say where it came from: its partition and offset, the group, a delivery
// count and a message.
func deadLetterHeadersOK(h map[string]string, in *Input, i int, group string) bool {
	deliveries, err := strconv.Atoi(h[wire.DLQHeaderDeliveryCount])
	return err == nil && deliveries >= 1 &&
		h[wire.DLQHeaderPartition] == strconv.Itoa(int(in.partition[i])) &&
		h[wire.DLQHeaderOffset] == strconv.FormatInt(in.offset[i], 10) &&
		h[wire.DLQHeaderGroup] == group &&
		h[wire.DLQHeaderMessage] != ""
}
