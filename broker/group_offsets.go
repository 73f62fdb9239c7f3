package broker

// Committed offsets of classic groups: OffsetCommit and TxnOffsetCommit
// validation and writes, OffsetFetch, OffsetDelete and DeleteGroups.

import (
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxOffsetMetadata is Kafka's offset.metadata.max.bytes default.
const maxOffsetMetadata = 4096

// offsetCommitter is who commits offsets: OffsetCommit's or
// TxnOffsetCommit's member fields (generation -1 and no member for a
// commit from outside the group's membership).
type offsetCommitter struct {
	memberID      string
	instanceID    *string
	generation    int32
	transactional bool
	version       int16
}

// commitShard resolves the shard of group on node and checks that who may
// commit its offsets: the start of OffsetCommit and TxnOffsetCommit alike.
func (g *groupCoordinator) commitShard(node int32, group string, who offsetCommitter) (*groupShard, *kerr.Error) {
	st, err := g.shardFor(node, group)
	if err == nil && group == "" {
		err = kerr.InvalidGroupID
	}
	if err == nil {
		_, err = st.groupForCommit(group, who)
	}
	return st, err
}

// groupForCommit applies Kafka's rules for who may commit to a group (a
// consumer group's in consumer_group_reconcile.go). It returns the group,
// or nil without error when the group does not exist and the commit may
// create it.
func (st *groupShard) groupForCommit(group string, who offsetCommitter) (*classicGroup, *kerr.Error) {
	grp := st.groups[group]
	if grp == nil {
		switch {
		case who.generation < 0:
			return nil, nil
		case !who.transactional && who.version >= 9, who.transactional && who.version >= 6:
			return nil, kerr.GroupIDNotFound
		default:
			return nil, kerr.IllegalGeneration
		}
	}
	if grp.consumer != nil {
		return grp, grp.consumer.checkCommitter(who)
	}
	if who.generation < 0 && grp.state == groupEmpty {
		return grp, nil
	}
	if who.generation >= 0 || who.memberID != "" || who.instanceID != nil {
		if err := grp.checkMember(who.memberID, who.instanceID); err != nil {
			return nil, err
		}
		if who.generation != grp.generation {
			return nil, kerr.IllegalGeneration
		}
	} else if !who.transactional {
		// Without member and generation a commit is accepted only while
		// nobody consumes for the group; old transactional versions
		// carry neither, so they are exempt.
		return nil, kerr.UnknownMemberID
	}
	if !who.transactional && grp.state == groupCompletingRebalance {
		return nil, kerr.RebalanceInProgress
	}
	return grp, nil
}

// checkCommitPartition applies a consumer group's per-partition epoch
// check (KIP-1251) to one valid write of a commit that passed the group
// checks; classic groups have none.
func (g *groupCoordinator) checkCommitPartition(st *groupShard, group string, who offsetCommitter, w *offsetWrite) {
	if grp := st.groups[group]; w.err == nil && grp != nil && grp.consumer != nil {
		w.err = g.c.checkCommitPartition(grp.consumer, who, w.tp)
	}
}

// offsetWrite is one partition of a commit: what to write, or why not.
type offsetWrite struct {
	tp  groupTP
	o   committedOffset
	err *kerr.Error
}

// newOffsetWrite resolves and validates one committed partition: the
// topic (by id when byID) must exist and have the partition, and the
// metadata must fit.
func (c *Cluster) newOffsetWrite(byID bool, topicName string, topicID [16]byte, partition int32, offset int64, leaderEpoch int32, metadata *string, now time.Time) offsetWrite {
	w := offsetWrite{o: committedOffset{offset: offset, leaderEpoch: leaderEpoch, commitMs: now.UnixMilli()}}
	if metadata != nil {
		w.o.metadata = *metadata
	}
	t, err := c.topicForRequest(byID, topicName, topicID)
	switch {
	case err != nil:
		w.err = err
		return w
	case partition < 0 || int(partition) >= len(t.partitions):
		w.err = kerr.UnknownTopicOrPartition
	case len(w.o.metadata) > maxOffsetMetadata:
		w.err = kerr.OffsetMetadataTooLarge
	}
	w.tp = groupTP{topic: t.name, partition: partition}
	return w
}

// writeOffsets writes the valid offsets of a commit in one batch and
// applies them (pid < 0) or stages them until the producer's transaction
// ends. A failed write becomes every valid partition's error.
func (g *groupCoordinator) writeOffsets(st *groupShard, group string, writes []offsetWrite, pid int64, epoch int16, now time.Time) {
	var recs []kv
	for i := range writes {
		if writes[i].err == nil {
			recs = append(recs, offsetRecord(group, writes[i].tp, &writes[i].o))
		}
	}
	if len(recs) == 0 {
		return
	}
	// Commits are writes a client asks for, with up to 4 KiB of metadata
	// per partition: they count against the MaxBytes budget like produce.
	// Kafka answers a commit it cannot store INVALID_COMMIT_OFFSET_SIZE.
	var err *kerr.Error
	if !g.c.withinBudget(recordsSize(recs)) {
		err = kerr.InvalidCommitOffsetSize
	}
	var base int64
	if err == nil {
		base, err = g.appendRecords(st, recs, pid, epoch, now)
	}
	next := base
	for i := range writes {
		w := &writes[i]
		switch {
		case w.err != nil:
			continue
		case err != nil:
			w.err = err
			continue
		}
		w.o.logOffset = next
		next++
		if pid >= 0 {
			st.stageTxnOffset(pid, group, w.tp, w.o, now)
		} else {
			st.ensureGroup(group, now).offsets[w.tp] = w.o
		}
	}
	if grp := st.groups[group]; grp != nil && err == nil && pid < 0 {
		g.armBy(st, grp, now.Add(g.c.cfg.offsetsRetention))
	}
}

// fetchRequestTopic is one topic an OffsetFetch asks about.
type fetchRequestTopic struct {
	name       string
	id         [16]byte
	partitions []int32
}

// fetchOffsets answers OffsetFetch for one group. A nil topics list asks
// for every committed offset. Unknown partitions get offset -1; with
// requireStable, a partition whose transactional commit awaits its marker
// gets UNSTABLE_OFFSET_COMMIT.
func (g *groupCoordinator) fetchOffsets(st *groupShard, group string, topics []fetchRequestTopic, all, byID, requireStable bool) []kmsg.OffsetFetchResponseGroupTopic {
	grp := st.groups[group]
	if all {
		topics = nil
		if grp != nil {
			byTopic := make(map[string][]int32)
			for tp := range grp.offsets {
				byTopic[tp.topic] = append(byTopic[tp.topic], tp.partition)
			}
			for name, parts := range byTopic {
				ft := fetchRequestTopic{name: name, partitions: parts}
				if t := g.c.topics[name]; t != nil {
					ft.id = t.id
				} else if byID {
					continue // a deleted topic has no id to answer with
				}
				sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
				topics = append(topics, ft)
			}
			sort.Slice(topics, func(i, j int) bool { return topics[i].name < topics[j].name })
		}
	}
	out := make([]kmsg.OffsetFetchResponseGroupTopic, 0, len(topics))
	for _, ft := range topics {
		rt := kmsg.NewOffsetFetchResponseGroupTopic()
		rt.Topic, rt.TopicID = ft.name, ft.id
		var topicErr *kerr.Error
		if byID && !all {
			if t := g.c.topicsByID[ft.id]; t != nil {
				ft.name = t.name
			} else {
				topicErr = kerr.UnknownTopicID
			}
		}
		for _, p := range ft.partitions {
			rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			rp.Partition = p
			rp.Offset = -1
			empty := ""
			rp.Metadata = &empty
			tp := groupTP{topic: ft.name, partition: p}
			switch {
			case topicErr != nil:
				rp.ErrorCode = topicErr.Code
			case requireStable && st.hasPendingTxn(group, tp):
				rp.ErrorCode = kerr.UnstableOffsetCommit.Code
			case grp != nil:
				if o, ok := grp.offsets[tp]; ok {
					md := o.metadata
					rp.Offset, rp.LeaderEpoch, rp.Metadata = o.offset, o.leaderEpoch, &md
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		out = append(out, rt)
	}
	return out
}

// deleteOffsets serves OffsetDelete: a group with members may not lose the
// offsets of topics it consumes (GROUP_SUBSCRIBED_TO_TOPIC), and only a
// consumer-protocol group says which topics those are (otherwise
// NON_EMPTY_GROUP).
func (g *groupCoordinator) deleteOffsets(st *groupShard, group string, tps []groupTP, now time.Time) (*kerr.Error, []*kerr.Error) {
	grp := st.groups[group]
	if grp == nil {
		return kerr.GroupIDNotFound, nil
	}
	var subscribed map[string]bool
	if grp.consumer != nil {
		subscribed = g.c.consumerSubscribedTopics(grp.consumer)
	} else if grp.state != groupEmpty {
		var ok bool
		if subscribed, ok = grp.subscribedTopics(); !ok {
			return kerr.NonEmptyGroup, nil
		}
	}
	errs := make([]*kerr.Error, len(tps))
	var recs []kv
	var gone []groupTP
	for i, tp := range tps {
		if subscribed[tp.topic] {
			errs[i] = kerr.GroupSubscribedToTopic
			continue
		}
		if _, ok := grp.offsets[tp]; ok {
			recs = append(recs, offsetRecord(group, tp, nil))
			gone = append(gone, tp)
		}
	}
	if len(recs) > 0 {
		if _, err := g.appendRecords(st, recs, -1, -1, now); err != nil {
			return err, nil
		}
		for _, tp := range gone {
			delete(grp.offsets, tp)
		}
	}
	return nil, errs
}

// subscribedTopics returns the topics a stable consumer-protocol group's
// members subscribe to; ok is false when the group's protocol does not
// say (another protocol type, or a rebalance in progress).
func (grp *classicGroup) subscribedTopics() (map[string]bool, bool) {
	if grp.protocolType != "consumer" || grp.state != groupStable {
		return nil, false
	}
	out := make(map[string]bool)
	for _, m := range grp.members {
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(m.metadataFor(grp.protocol)); err != nil {
			return nil, false
		}
		for _, t := range meta.Topics {
			out[t] = true
		}
	}
	return out, true
}

// deleteGroup serves one group of DeleteGroups: only a group without
// members can go; its offsets and metadata are tombstoned.
func (g *groupCoordinator) deleteGroup(st *groupShard, group string, now time.Time) *kerr.Error {
	grp := st.groups[group]
	switch {
	case grp == nil:
		return kerr.GroupIDNotFound
	case !grp.empty():
		return kerr.NonEmptyGroup
	}
	tps := make([]groupTP, 0, len(grp.offsets))
	for tp := range grp.offsets {
		tps = append(tps, tp)
	}
	if _, err := g.appendRecords(st, tombstones(grp, tps, true), -1, -1, now); err != nil {
		return err
	}
	g.forget(st, grp)
	return nil
}

// addOffsetsToTxn asks the transaction coordinator of txnID to add the
// group's __consumer_offsets partition to the producer's transaction (TV2,
// TxnOffsetCommit v5+) or to verify that the client added it with
// AddOffsetsToTxn (older versions). An unreachable, moving or loading
// transaction coordinator becomes COORDINATOR_NOT_AVAILABLE, which clients
// retry, as Kafka answers it; CONCURRENT_TRANSACTIONS, retriable itself,
// passes through.
func (g *groupCoordinator) addOffsetsToTxn(txnID string, pid int64, epoch int16, offsetsPartition int32, join txnJoin) *kerr.Error {
	err, unavailable := g.c.askTxnCoordinator(txnID, pid, epoch, g.shards.topic, offsetsPartition, join)
	if unavailable {
		return kerr.CoordinatorNotAvailable
	}
	return err
}
