package shareconsumer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
)

// startCheck finds partitions that the share group began to read at their
// latest offset, past records that were already there: a group reads from
// the latest offset unless its share.auto.offset.reset config says
// "earliest", so a newcomer who writes the input first and then starts a
// consumer gets nothing and no hint. The consumer says so once, at INFO.
//
// Before joining, the consumer asks which partitions the group has started
// reading (DescribeShareGroupOffsets); a partition it has not is fresh. The
// first ShareFetch answer of a fresh partition shows where the group began
// (its first acquired offset, or, when nothing was acquired, the start
// offset the group has now); earlier records that the log still holds
// (ListOffsets) were skipped. All of it is guarded by the consumer's
// mutex.
type startCheck struct {
	// known is set once the group's started partitions are known; off
	// when the check cannot be made (the request failed or is not served)
	// or is done.
	known, off bool
	started    map[kshare.TopicPartition]bool
	// began holds, per fresh partition answered, the first offset its
	// first fetch acquired, or -1.
	began map[kshare.TopicPartition]int64
	// wake tells startCheckLoop that began has entries to look at.
	wake chan struct{}
	done chan struct{} // closed when startCheckLoop returns
}

// startCheckTimeout bounds each request of the check: it is advice, and
// must not hold up Close.
const startCheckTimeout = 5 * time.Second

// learnStartedPartitions records which partitions the group has started
// reading, before the consumer first joins it.
func (c *Consumer) learnStartedPartitions(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
	defer cancel()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = c.cfg.group
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(ctx, c.cl)
	c.mu.Lock()
	defer c.mu.Unlock()
	sc := &c.startCheck
	if err != nil || len(resp.Groups) != 1 {
		sc.off = true
		c.logger.Debug("the start-offset check is off: DescribeShareGroupOffsets failed", "err", err)
		return
	}
	g := resp.Groups[0]
	switch g.ErrorCode {
	case 0, kerr.GroupIDNotFound.Code: // a new group has started nothing
	default:
		sc.off = true
		c.logger.Debug("the start-offset check is off", "err", kerr.ErrorForCode(g.ErrorCode))
		return
	}
	sc.started = make(map[kshare.TopicPartition]bool)
	sc.began = make(map[kshare.TopicPartition]int64)
	for _, t := range g.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 && p.StartOffset >= 0 {
				sc.started[kshare.TopicPartition{Topic: t.Topic, Partition: p.Partition}] = true
			}
		}
	}
	sc.known = true
}

// noteFirstFetchLocked records the first answer for tp (first, the lowest
// offset it acquired, or -1) if the group had not started reading tp.
func (c *Consumer) noteFirstFetchLocked(tp kshare.TopicPartition, first int64) {
	sc := &c.startCheck
	if !sc.known || sc.off || sc.started[tp] {
		return
	}
	if _, ok := sc.began[tp]; ok {
		return
	}
	sc.began[tp] = first
	select {
	case sc.wake <- struct{}{}:
	default:
	}
}

// startCheckLoop waits for the first answers of fresh partitions and logs,
// at INFO, those whose earlier records the group skipped: once for the
// partitions answered together (it collects for startCheckSettle after
// the first of them), and again only for partitions whose leaders answer
// later. It returns when the consumer closes.
func (c *Consumer) startCheckLoop() {
	defer close(c.startCheck.done)
	looked := make(map[kshare.TopicPartition]bool)
	for {
		select {
		case <-c.startCheck.wake:
		case <-c.bgCtx.Done():
			return
		}
		select { // the other leaders' first answers come within moments
		case <-time.After(startCheckSettle):
		case <-c.bgCtx.Done():
			return
		}
		c.mu.Lock()
		fresh := make(map[kshare.TopicPartition]int64)
		for tp, off := range c.startCheck.began {
			if !looked[tp] {
				fresh[tp] = off
				looked[tp] = true
			}
		}
		c.mu.Unlock()
		if len(fresh) > 0 {
			c.checkStarts(fresh)
		}
	}
}

// startCheckSettle is how long the check collects first answers before it
// looks at them.
const startCheckSettle = 100 * time.Millisecond

// checkStarts logs the partitions of began (tp -> the first offset the
// group's first fetch acquired there, -1 for none) whose earlier records
// the group skipped.
func (c *Consumer) checkStarts(began map[kshare.TopicPartition]int64) {
	ctx, cancel := context.WithTimeout(c.bgCtx, startCheckTimeout)
	defer cancel()
	var unknown []kshare.TopicPartition
	for tp, off := range began {
		if off < 0 {
			unknown = append(unknown, tp)
		}
	}
	if len(unknown) > 0 {
		starts, err := c.groupStartOffsets(ctx)
		if err != nil {
			c.logger.Debug("the start-offset check failed", "err", err)
			return
		}
		for _, tp := range unknown {
			began[tp] = starts[tp]
		}
	}
	earliest, err := c.logStartOffsets(ctx, began)
	if err != nil {
		c.logger.Debug("the start-offset check failed", "err", err)
		return
	}
	var parts []string
	var skipped int64
	for tp, off := range began {
		if e, ok := earliest[tp]; ok && off > e {
			skipped += off - e
			parts = append(parts, fmt.Sprintf("%s/%d from offset %d (%d records before it)", tp.Topic, tp.Partition, off, off-e))
		}
	}
	slices.Sort(parts)
	c.logger.Debug("start-offset check done", "partitions", len(began), "skipping", len(parts))
	if len(parts) == 0 {
		return
	}
	c.logger.Info("the share group began reading partitions at their latest offset: the records already there are never delivered to it; set share.auto.offset.reset=earliest (SetGroupConfig) before a group first reads to read them",
		"records_skipped", skipped, "partitions", strings.Join(parts, ", "))
}

// groupStartOffsets returns the group's start offset of every partition
// it reads.
func (c *Consumer) groupStartOffsets(ctx context.Context) (map[kshare.TopicPartition]int64, error) {
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = c.cfg.group
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("DescribeShareGroupOffsets: %w", err)
	}
	out := make(map[kshare.TopicPartition]int64)
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return nil, fmt.Errorf("DescribeShareGroupOffsets: %w", err)
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode == 0 {
					out[kshare.TopicPartition{Topic: t.Topic, Partition: p.Partition}] = p.StartOffset
				}
			}
		}
	}
	return out, nil
}

// logStartOffsets returns the log start offset of each partition of tps.
func (c *Consumer) logStartOffsets(ctx context.Context, tps map[kshare.TopicPartition]int64) (map[kshare.TopicPartition]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	byTopic := make(map[string]int)
	for tp := range tps {
		i, ok := byTopic[tp.Topic]
		if !ok {
			i = len(req.Topics)
			byTopic[tp.Topic] = i
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = tp.Topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = tp.Partition
		rp.Timestamp = -2 // earliest
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("ListOffsets: %w", err)
	}
	out := make(map[kshare.TopicPartition]int64)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				out[kshare.TopicPartition{Topic: t.Topic, Partition: p.Partition}] = p.Offset
			}
		}
	}
	return out, nil
}
