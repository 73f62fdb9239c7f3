package eos

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/internal/retry"
)

// shareStateTopic is where the share coordinators keep the share-partition
// states (KIP-932).
const shareStateTopic = "__share_group_state"

// Record states as the share coordinators persist them (Kafka's
// RecordState numbers).
const (
	stateAcknowledged int8 = 2
	stateArchived     int8 = 4
)

// shareStateWatch follows, while a run runs, how the broker ended each
// input record: it reads every __share_group_state record written for the
// run's group and input topic (from the partitions' ends when the watch
// began) and keeps, per input offset, the last final state the log gave it:
// ACKNOWLEDGED or ARCHIVED. So the verification learns which inputs the
// broker archived (at the delivery limit, say) from what happened on the
// broker, not only from what the workers saw, and an input with no output
// counts as lost only when the broker acknowledged it.
//
// It reads the bundled broker's records (JSON, broker/share_state.go):
// snapshots and updates name offsets with their state, and the staged
// acknowledgements of a transaction take effect when its commit marker
// follows. A log it cannot read (another broker's format, a gap) makes
// the watch unavailable, and the verification says so.
type shareStateWatch struct {
	group   string
	topicID [16]byte
	cl      *kgo.Client
	done    chan struct{}

	mu sync.Mutex
	// final holds the last final state of each input offset (0: none
	// seen), by partition and offset.
	final map[int32][]int8
	// staged holds the staged acknowledgements of each producer's open
	// transaction, applied by its commit marker.
	staged map[int64][]stagedRange
	// pos is the next offset to read of each state partition.
	pos map[int32]int64
	err error
}

// stagedRange is one staged acknowledgement: offsets first..last of an
// input partition, accepted (1) or rejected (3).
type stagedRange struct {
	partition   int32
	first, last int64
	ack         int8
}

// watchShareState starts following the share state of group's records of
// in, the input topic with id topicID. Stop it with stop.
func watchShareState(ctx context.Context, seeds []string, adm *kadm.Client, group string, topicID [16]byte, in *Input) (*shareStateWatch, error) {
	ends, err := stateEnds(ctx, adm)
	if err != nil {
		return nil, err
	}
	from := map[int32]kgo.Offset{}
	w := &shareStateWatch{
		group: group, topicID: topicID, done: make(chan struct{}),
		final: map[int32][]int8{}, staged: map[int64][]stagedRange{}, pos: map[int32]int64{},
	}
	for p, offs := range in.sorted {
		if len(offs) > 0 {
			w.final[p] = make([]int8, offs[len(offs)-1]+1)
		}
	}
	ends.Each(func(o kadm.ListedOffset) {
		from[o.Partition] = kgo.NewOffset().At(o.Offset)
		w.pos[o.Partition] = o.Offset
	})
	w.cl, err = kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{shareStateTopic: from}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(),
		// A compaction that moves the log start past what the watch has
		// read is a gap to report, not a reason to start again silently.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("share state reader: %w", err)
	}
	// The watch reads until stop, not until ctx ends: the verification
	// reads it after the run's context ended.
	go w.run(context.WithoutCancel(ctx))
	return w, nil
}

// run reads the state log until stop closes the client.
func (w *shareStateWatch) run(ctx context.Context) {
	defer close(w.done)
	for {
		fetches := w.cl.PollFetches(ctx)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		fetches.EachError(func(_ string, p int32, err error) {
			if w.err == nil && !errors.Is(err, context.Canceled) {
				w.err = fmt.Errorf("reading %s/%d: %w", shareStateTopic, p, err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			if w.err == nil {
				w.err = w.applyLocked(r)
			}
			w.pos[r.Partition] = r.Offset + 1
		})
		w.mu.Unlock()
	}
}

// applyLocked applies one record of the state log.
func (w *shareStateWatch) applyLocked(r *kgo.Record) error {
	if r.Attrs.IsControl() {
		if len(r.Key) < 4 {
			return fmt.Errorf("%s/%d offset %d: a control record with a %d-byte key", shareStateTopic, r.Partition, r.Offset, len(r.Key))
		}
		commit := binary.BigEndian.Uint16(r.Key[2:4]) == 1
		for _, s := range w.staged[r.ProducerID] {
			if commit && (s.ack == 1 || s.ack == 3) {
				state := stateAcknowledged
				if s.ack == 3 {
					state = stateArchived
				}
				w.setLocked(s.partition, s.first, s.last, state)
			}
		}
		delete(w.staged, r.ProducerID)
		return nil
	}
	var key struct {
		Group     string `json:"group"`
		TopicID   string `json:"topicId"`
		Partition int32  `json:"partition"`
	}
	if err := json.Unmarshal(r.Key, &key); err != nil {
		return fmt.Errorf("%s/%d offset %d: a key that is not the bundled broker's (%w): this broker's share state cannot be followed", shareStateTopic, r.Partition, r.Offset, err)
	}
	id, err := base64.RawURLEncoding.DecodeString(key.TopicID)
	if key.Group != w.group || err != nil || [16]byte(id) != w.topicID || r.Value == nil {
		return nil
	}
	var v struct {
		Kind    string `json:"kind"`
		Batches []struct {
			First int64 `json:"first"`
			Last  int64 `json:"last"`
			State int8  `json:"state"`
		} `json:"batches"`
		Staged []struct {
			First int64 `json:"first"`
			Last  int64 `json:"last"`
			Ack   int8  `json:"ack"`
		} `json:"staged"`
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return fmt.Errorf("%s/%d offset %d: %w", shareStateTopic, r.Partition, r.Offset, err)
	}
	for _, b := range v.Batches {
		if b.State == stateAcknowledged || b.State == stateArchived {
			w.setLocked(key.Partition, b.First, b.Last, b.State)
		}
	}
	for _, s := range v.Staged {
		w.staged[r.ProducerID] = append(w.staged[r.ProducerID], stagedRange{partition: key.Partition, first: s.First, last: s.Last, ack: s.Ack})
	}
	return nil
}

// setLocked records state for the input offsets first..last of
// partition; offsets past the input (control records of the input's
// producer) are not followed.
func (w *shareStateWatch) setLocked(partition int32, first, last int64, state int8) {
	offs := w.final[partition]
	for o := max(first, 0); o <= last && o < int64(len(offs)); o++ {
		offs[o] = state
	}
}

// ended returns how the broker ended each input record that it ended, by
// input index, once the watch has read the state log up to its end now.
func (w *shareStateWatch) ended(ctx context.Context, adm *kadm.Client, in *Input) (map[int]int8, error) {
	ends, err := stateEnds(ctx, adm)
	if err != nil {
		return nil, err
	}
	for {
		w.mu.Lock()
		err, behind := w.err, false
		ends.Each(func(o kadm.ListedOffset) {
			if w.pos[o.Partition] < o.Offset {
				behind = true
			}
		})
		w.mu.Unlock()
		switch {
		case err != nil:
			return nil, err
		case !behind:
			return w.endedOf(in), nil
		}
		select {
		case <-w.done:
			return nil, fmt.Errorf("the reader of %s stopped before it reached the end", shareStateTopic)
		case <-ctx.Done():
			return nil, fmt.Errorf("reading %s to its end: %w", shareStateTopic, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (w *shareStateWatch) endedOf(in *Input) map[int]int8 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int]int8)
	for i := 0; i < in.N; i++ {
		if offs := w.final[in.partition[i]]; in.offset[i] < int64(len(offs)) && offs[in.offset[i]] != 0 {
			out[i] = offs[in.offset[i]]
		}
	}
	return out
}

// stop ends the watch; a nil watch has nothing to stop.
func (w *shareStateWatch) stop() {
	if w == nil {
		return
	}
	w.cl.Close()
	<-w.done
}

// followShareState starts following the share state of the run's group
// and input, before any worker starts. When it cannot (the state topic
// cannot be listed), the run goes on without, and why is returned for
// the report.
func followShareState(ctx context.Context, seeds []string, adm *kadm.Client, group string, in *Input) (*shareStateWatch, string) {
	topics, err := adm.ListTopics(ctx, in.Topic)
	if err == nil {
		err = topics.Error()
	}
	if err != nil {
		return nil, fmt.Sprintf("the input's topic id: %v", err)
	}
	w, err := watchShareState(ctx, seeds, adm, group, topics[in.Topic].ID, in)
	if err != nil {
		return nil, err.Error()
	}
	return w, ""
}

// endings returns what is known of how the inputs ended: archived, the
// inputs the workers saw archived, and, when w followed the share state
// (w may be nil, with why), how the broker ended them.
func (w *shareStateWatch) endings(ctx context.Context, adm *kadm.Client, in *Input, archived map[string]Archive, why string) Endings {
	e := Endings{Archived: archived, BrokerWhy: why}
	if w == nil {
		return e
	}
	ended, err := w.ended(ctx, adm, in)
	if err != nil {
		e.BrokerWhy = err.Error()
		return e
	}
	e.Broker = ended
	return e
}

// stateEnds lists the end offsets of the state topic, asking again while
// the answer is a retriable error: its partitions move in runs with
// coordinator faults.
func stateEnds(ctx context.Context, adm *kadm.Client) (kadm.ListedOffsets, error) {
	return backoff.RetryWithData(func() (kadm.ListedOffsets, error) {
		ends, err := adm.ListEndOffsets(ctx, shareStateTopic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil && !kerr.IsRetriable(err) {
			return nil, backoff.Permanent(fmt.Errorf("end offsets of %s: %w", shareStateTopic, err))
		}
		if err != nil {
			return nil, fmt.Errorf("end offsets of %s: %w", shareStateTopic, err)
		}
		return ends, nil
	}, backoff.WithMaxRetries(retry.WithContext(ctx), fetchAttempts))
}
