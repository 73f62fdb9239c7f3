package shareconsumer

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
)

// A ledger commit proves with a RENEW that the member still holds its
// records. Kafka answers a RENEW of offsets below the share-partition's
// start offset with success, whoever held them, so the proof needs the
// lock to have run without a break from the acquisition to the RENEW.
// A share-partition whose leadership moves away and back is loaded again
// from its persisted state, without the member's locks, while the
// member's session with the leader stands: another member can then be
// handed the records and acknowledge them, and the RENEW succeeds, in
// time. Every such move changes the partition's leader epoch. The commit
// therefore compares the epoch known before the ShareFetch that acquired
// the records was sent (no later than the acquiring leader's) with the
// epoch the leader answers after it handled the RENEW (no earlier than
// its own then): equal, no leader took over in between.

// partitionEpoch is a partition's leader epoch in a Metadata answer.
type partitionEpoch struct {
	tp    kshare.TopicPartition
	epoch int32
}

// learnLeaderEpochsLocked records leader epochs that Metadata answered.
// An epoch only grows for a topic whose id is unchanged: an answer from
// a broker that is behind must not lower it. The map is replaced, never
// changed in place, because a ShareFetch step keeps the one it was sent
// with.
func (c *Consumer) learnLeaderEpochsLocked(learned []partitionEpoch) {
	next := make(map[kshare.TopicPartition]int32, max(len(c.leaderEpochs), len(learned)))
	for tp, e := range c.leaderEpochs {
		next[tp] = e
	}
	for _, l := range learned {
		if old, ok := next[l.tp]; !ok || l.epoch > old || c.epochTopics[l.tp.Topic] != c.topicIDs[l.tp.Topic] {
			next[l.tp] = l.epoch
		}
	}
	for _, l := range learned {
		c.epochTopics[l.tp.Topic] = c.topicIDs[l.tp.Topic]
	}
	c.leaderEpochs = next
}

// epochCheck is what one node must answer for the records it renewed.
type epochCheck struct {
	node   int32
	topics []string
	want   map[kshare.TopicPartition]int32 // the epoch the records were acquired under
	recs   map[kshare.TopicPartition][]int64
}

// checkLeaderEpochs asks the leader of every renewed record, after the
// renewal's answer, for the partition's leader and epoch, and returns
// the records whose partition it no longer leads or whose epoch is not
// the one they were acquired under (or unknown). The leaders are asked
// in parallel, within ctx.
func (c *Consumer) checkLeaderEpochs(ctx context.Context, renewed []*stagedRec) []acktrack.RenewFailure {
	if len(renewed) == 0 {
		return nil
	}
	checks := make(map[int32]*epochCheck)
	c.mu.Lock()
	for _, sr := range renewed {
		a := sr.acq
		ch := checks[a.sess.node]
		if ch == nil {
			ch = &epochCheck{node: a.sess.node, want: make(map[kshare.TopicPartition]int32), recs: make(map[kshare.TopicPartition][]int64)}
			checks[a.sess.node] = ch
		}
		if _, ok := ch.want[a.tp]; !ok {
			ch.want[a.tp] = a.leaderEpoch
			if !slices.Contains(ch.topics, a.tp.Topic) {
				ch.topics = append(ch.topics, a.tp.Topic)
			}
		} else if a.leaderEpoch != ch.want[a.tp] {
			ch.want[a.tp] = -1 // acquired under two epochs: one of them is not the leader's
		}
		ch.recs[a.tp] = append(ch.recs[a.tp], sr.off)
	}
	c.mu.Unlock()

	var (
		mu      sync.Mutex
		failed  []acktrack.RenewFailure
		learned []partitionEpoch
		wg      sync.WaitGroup
	)
	run := func(ch *epochCheck) {
		got, err := c.leaderEpochsAt(ctx, ch.node, ch.topics)
		mu.Lock()
		defer mu.Unlock()
		for tp, want := range ch.want {
			var why error
			le, ok := got[tp]
			switch {
			case err != nil:
				why = fmt.Errorf("the leader epoch check at node %d after the renewal failed: %w", ch.node, err)
			case !ok:
				why = fmt.Errorf("node %d did not answer the leader epoch of %s/%d after the renewal: %w", ch.node, tp.Topic, tp.Partition, ErrLockExpired)
			case le.leader != ch.node:
				why = fmt.Errorf("node %d renewed %s/%d but says node %d leads it: %w", ch.node, tp.Topic, tp.Partition, le.leader, ErrLockExpired)
			case want < 0 || le.epoch != want:
				why = fmt.Errorf("the leader epoch of %s/%d at node %d is %d after the renewal, the records were acquired under epoch %d: the share-partition may have been loaded again without their locks: %w",
					tp.Topic, tp.Partition, ch.node, le.epoch, want, ErrLockExpired)
			}
			if ok {
				learned = append(learned, partitionEpoch{tp, le.epoch})
			}
			if why == nil {
				continue
			}
			for _, off := range ch.recs[tp] {
				failed = append(failed, acktrack.RenewFailure{TopicPartition: acktrack.TopicPartition(tp), Offset: off, Err: why})
			}
		}
	}
	for _, ch := range checks {
		if len(checks) == 1 {
			run(ch)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ch)
		}()
	}
	wg.Wait()
	c.mu.Lock()
	c.learnLeaderEpochsLocked(learned)
	if len(failed) > 0 {
		c.metrics.LedgerEpochRefusals += int64(len(failed))
		c.logger.Warn("ledger commit refused: a renewed partition's leader epoch changed since its records were acquired", "records", len(failed), "err", failed[0].Err)
	}
	c.mu.Unlock()
	return failed
}

// leaderAndEpoch is a partition's leader and leader epoch.
type leaderAndEpoch struct{ leader, epoch int32 }

// leaderEpochsAt asks node itself, not any broker, for the leaders and
// leader epochs of topics: a broker handles a request as a partition's
// leader only once its metadata has that leadership, so its answer after
// the renewal's is at least as new as the epoch it renewed under.
func (c *Consumer) leaderEpochsAt(ctx context.Context, node int32, topics []string) (map[kshare.TopicPartition]leaderAndEpoch, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := c.cl.Broker(int(node)).Request(ctx, req)
	if err != nil {
		return nil, err
	}
	mr := resp.(*kmsg.MetadataResponse)
	if mr.Version < 7 {
		return nil, fmt.Errorf("node %d answered Metadata v%d, which has no leader epochs: %w", node, mr.Version, kshare.ErrUnsupported)
	}
	out := make(map[kshare.TopicPartition]leaderAndEpoch)
	for _, t := range mr.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				out[kshare.TopicPartition{Topic: *t.Topic, Partition: p.Partition}] = leaderAndEpoch{p.Leader, p.LeaderEpoch}
			}
		}
	}
	return out, nil
}
