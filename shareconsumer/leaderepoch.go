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

// partitionEpoch is a partition's leader epoch in a Metadata answer, with
// the id of the topic it is of.
type partitionEpoch struct {
	tp    kshare.TopicPartition
	epoch topicEpoch
}

// topicEpoch is a leader epoch of one incarnation of a topic: a topic
// deleted and created again under the same name starts its epochs anew.
type topicEpoch struct {
	id    [16]byte
	epoch int32
}

// learnLeaderEpochsLocked records leader epochs that Metadata answered,
// for the topic ids the consumer knows now (an answer about a topic's
// earlier incarnation, from a broker that is behind, is not one). Within
// a topic id an epoch only grows: such a broker must not lower it either.
// The map is replaced, never changed in place, because a ShareFetch step
// keeps the one it was sent with; an answer that changes nothing leaves
// it alone.
func (c *Consumer) learnLeaderEpochsLocked(learned []partitionEpoch) {
	var next map[kshare.TopicPartition]topicEpoch
	for _, l := range learned {
		if l.epoch.id != c.topicIDs[l.tp.Topic] {
			continue
		}
		if old, ok := c.leaderEpochs[l.tp]; ok && old.id == l.epoch.id && l.epoch.epoch <= old.epoch {
			continue
		}
		if next == nil {
			next = make(map[kshare.TopicPartition]topicEpoch, len(c.leaderEpochs)+len(learned))
			for tp, e := range c.leaderEpochs {
				next[tp] = e
			}
		}
		next[l.tp] = l.epoch
	}
	if next != nil {
		c.leaderEpochs = next
	}
}

// epochCheck is what one node must answer for the records it renewed.
type epochCheck struct {
	node   int32
	topics []string
	want   map[kshare.TopicPartition]topicEpoch // the epoch the records were acquired under
	mixed  map[kshare.TopicPartition]bool       // acquired under two epochs: one is not the leader's
}

// epochRefusal is why one node's partition fails the check; moved says
// that its leader or epoch was seen to change (rather than the check
// failing to get an answer).
type epochRefusal struct {
	why   error
	moved bool
}

// nodePartition names a partition as led by one node.
type nodePartition struct {
	node int32
	tp   kshare.TopicPartition
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
	var last *acquisition
	for _, sr := range renewed {
		a := sr.acq
		if a == last {
			continue // a transaction's records come acquisition by acquisition
		}
		last = a
		ch := checks[a.sess.node]
		if ch == nil {
			ch = &epochCheck{node: a.sess.node, want: make(map[kshare.TopicPartition]topicEpoch), mixed: make(map[kshare.TopicPartition]bool)}
			checks[a.sess.node] = ch
		}
		acquired := topicEpoch{a.topicID, a.leaderEpoch}
		if want, ok := ch.want[a.tp]; !ok {
			ch.want[a.tp] = acquired
			if !slices.Contains(ch.topics, a.tp.Topic) {
				ch.topics = append(ch.topics, a.tp.Topic)
			}
		} else if want != acquired {
			ch.mixed[a.tp] = true
		}
	}
	c.mu.Unlock()

	var (
		mu      sync.Mutex
		refused = make(map[nodePartition]epochRefusal)
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
				refused[nodePartition{ch.node, tp}] = epochRefusal{why: fmt.Errorf("the leader epoch check at node %d after the renewal failed (%w): %w", ch.node, err, ErrLockExpired)}
				continue
			case !ok:
				why = fmt.Errorf("node %d did not answer the leader epoch of %s/%d after the renewal: %w", ch.node, tp.Topic, tp.Partition, ErrLockExpired)
			case le.topicID != [16]byte{} && le.topicID != want.id:
				why = fmt.Errorf("node %d answers for another topic %q than the one whose records it renewed (deleted and created again?): %w", ch.node, tp.Topic, ErrLockExpired)
			case le.leader != ch.node:
				why = fmt.Errorf("node %d renewed %s/%d but says node %d leads it: %w", ch.node, tp.Topic, tp.Partition, le.leader, ErrLockExpired)
			case ch.mixed[tp]:
				why = fmt.Errorf("the records of %s/%d were acquired under two leader epochs, and the leader at node %d has one (%d): the share-partition may have been loaded again without the older locks: %w",
					tp.Topic, tp.Partition, ch.node, le.epoch, ErrLockExpired)
			case want.epoch < 0 || le.epoch != want.epoch:
				why = fmt.Errorf("the leader epoch of %s/%d at node %d is %d after the renewal, the records were acquired under epoch %d: the share-partition may have been loaded again without their locks: %w",
					tp.Topic, tp.Partition, ch.node, le.epoch, want.epoch, ErrLockExpired)
			}
			if ok && le.topicID != [16]byte{} {
				learned = append(learned, partitionEpoch{tp, topicEpoch{le.topicID, le.epoch}})
			}
			if why != nil {
				refused[nodePartition{ch.node, tp}] = epochRefusal{why: why, moved: true}
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
	defer c.mu.Unlock()
	c.learnLeaderEpochsLocked(learned)
	if len(refused) == 0 {
		return nil
	}
	var (
		failed []acktrack.RenewFailure
		moved  int
		first  epochRefusal
	)
	for _, sr := range renewed {
		r, ok := refused[nodePartition{sr.acq.sess.node, sr.acq.tp}]
		if !ok {
			continue
		}
		failed = append(failed, acktrack.RenewFailure{TopicPartition: acktrack.TopicPartition(sr.acq.tp), Offset: sr.off, Err: r.why})
		if r.moved {
			moved++
		}
		if first.why == nil || r.moved && !first.moved {
			first = r
		}
	}
	if moved > 0 {
		c.metrics.LedgerEpochRefusals += int64(moved)
		c.logger.Warn("ledger commit refused: a renewed partition's leader or leader epoch changed since its records were acquired", "records", moved, "err", first.why)
	} else {
		c.logger.Warn("ledger commit refused: the leader epoch check after the renewal could not be made", "records", len(failed), "err", first.why)
	}
	return failed
}

// leaderAndEpoch is a partition's leader and leader epoch, and its
// topic's id (zero before Metadata v10).
type leaderAndEpoch struct {
	leader, epoch int32
	topicID       [16]byte
}

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
		return nil, fmt.Errorf("node %d answered Metadata v%d, which has no leader epochs", node, mr.Version)
	}
	out := make(map[kshare.TopicPartition]leaderAndEpoch)
	for _, t := range mr.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				out[kshare.TopicPartition{Topic: *t.Topic, Partition: p.Partition}] = leaderAndEpoch{p.Leader, p.LeaderEpoch, t.TopicID}
			}
		}
	}
	return out, nil
}
