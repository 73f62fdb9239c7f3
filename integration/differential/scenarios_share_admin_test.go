package differential_test

// AlterShareGroupOffsets and DeleteShareGroupOffsets (KIP-932).

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	vAlterShareOffsets    = 0
	vDeleteShareOffsets   = 0
	vDescribeShareOffsets = 1
)

// alterShareOffsets sets start offsets of one topic's partitions.
func (tg *target) alterShareOffsets(ctx context.Context, group string, topics map[string]map[int32]int64) string {
	tg.t.Helper()
	req := kmsg.NewPtrAlterShareGroupOffsetsRequest()
	req.GroupID = group
	names := make([]string, 0, len(topics))
	for n := range topics {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		rt := kmsg.NewAlterShareGroupOffsetsRequestTopic()
		rt.Topic = n
		var ps []int32
		for p := range topics[n] {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		for _, p := range ps {
			rt.Partitions = append(rt.Partitions, kmsg.AlterShareGroupOffsetsRequestTopicPartition{Partition: p, StartOffset: topics[n][p]})
		}
		req.Topics = append(req.Topics, rt)
	}
	resp := tg.send(ctx, vAlterShareOffsets, req).(*kmsg.AlterShareGroupOffsetsResponse)
	if resp.ErrorCode != 0 {
		return "top-level " + errName(resp.ErrorCode)
	}
	var out []string
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out = append(out, fmt.Sprintf("%s/%d=%s", strings.TrimPrefix(t.Topic, tg.prefix), p.Partition, errName(p.ErrorCode)))
		}
	}
	sort.Strings(out)
	return "OK " + strings.Join(out, " ")
}

// deleteShareOffsets deletes the share state of whole topics, recording the
// answers in the order given.
func (tg *target) deleteShareOffsets(ctx context.Context, group string, topics ...string) string {
	tg.t.Helper()
	req := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
	req.GroupID = group
	for _, n := range topics {
		req.Topics = append(req.Topics, kmsg.DeleteShareGroupOffsetsRequestTopic{Topic: n})
	}
	resp := tg.send(ctx, vDeleteShareOffsets, req).(*kmsg.DeleteShareGroupOffsetsResponse)
	if resp.ErrorCode != 0 {
		return "top-level " + errName(resp.ErrorCode)
	}
	var out []string
	for _, t := range resp.Topics {
		msg := ""
		if t.ErrorMessage != nil && t.ErrorCode != 0 {
			msg = fmt.Sprintf("(%q)", *t.ErrorMessage)
		}
		out = append(out, fmt.Sprintf("%s=%s%s hasID=%t", strings.TrimPrefix(t.Topic, tg.prefix), errName(t.ErrorCode), msg, t.TopicID != [16]byte{}))
	}
	return "OK " + strings.Join(out, " ")
}

// shareStartOffsets describes the group's start offsets of topic (every
// initialized partition when all).
func (tg *target) shareStartOffsets(ctx context.Context, group, topic string, all bool) string {
	tg.t.Helper()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	if !all {
		rg.Topics = []kmsg.DescribeShareGroupOffsetsRequestGroupTopic{{Topic: topic, Partitions: []int32{0, 1}}}
	}
	req.Groups = append(req.Groups, rg)
	resp := tg.send(ctx, vDescribeShareOffsets, req).(*kmsg.DescribeShareGroupOffsetsResponse)
	g := resp.Groups[0]
	if g.ErrorCode != 0 {
		return errName(g.ErrorCode)
	}
	var out []string
	for _, t := range g.Topics {
		if t.Topic != topic {
			continue
		}
		for _, p := range t.Partitions {
			out = append(out, fmt.Sprintf("%d:start=%d", p.Partition, p.StartOffset))
		}
	}
	sort.Strings(out)
	return "OK " + strings.Join(out, " ")
}

func scenarioShareOffsetsAdmin(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("soa")
	id := tg.createTopic(ctx, topic, 2)
	untouched := tg.name("soa-untouched")
	tg.createTopic(ctx, untouched, 1)
	ts := recentTs()
	for p := int32(0); p < 2; p++ {
		tg.mustProduce(ctx, vProduce, nil, topic, p, plain(ts, "a", "b", "c", "d", "e"))
	}
	group := tg.name("soa-group")
	tg.alterGroupConfig(ctx, group, 0, "share.auto.offset.reset", kmsg.StringPtr("earliest"), false)
	sr := &shareReader{tg: tg, group: group, member: newMemberID(), topicID: id}
	tg.joinShareGroup(ctx, group, sr.member, topic)
	sr.acquire(ctx)
	tr.add("accept offsets 0-1", "%s", sr.acknowledge(ctx, false, shareAckRange(0, 1, 1), shareAckRange(2, 4, 2)))
	tr.add("alter while a member is in", "%s", tg.alterShareOffsets(ctx, group, map[string]map[int32]int64{topic: {0: 4}}))
	tr.add("delete while a member is in", "%s", tg.deleteShareOffsets(ctx, group, topic))
	tr.add("the member leaves", "%s", heartbeatResult(tg.shareHeartbeat(ctx, group, sr.member, -1, nil), 0, sr.member))

	tr.add("alter", "%s", tg.alterShareOffsets(ctx, group, map[string]map[int32]int64{
		topic:           {0: 4, 1: 1, 7: 0},
		tg.name("nope"): {0: 0},
	}))
	tr.add("start offsets after the alter", "%s", tg.shareStartOffsets(ctx, group, topic, false))
	// Partition 1, which no member fetched: the real Kafka's partition
	// leader keeps a share-partition it loaded until its next write is
	// fenced by the new state epoch, so partition 0 would first show the
	// old state there (docs/differences.md).
	next := newMemberID()
	tg.joinShareGroup(ctx, group, next, topic)
	session := int32(0)
	tr.add("the next member reads partition 1 from the altered offset", "%s", tg.eventually(ctx, func() string {
		r := tg.shareFetchPartition(ctx, group, next, session, id, 1, nil)
		session++
		return acquiredRanges(r)
	}, func(s string) bool { return s != "acquired=[]" }))
	tg.shareHeartbeat(ctx, group, next, -1, nil)

	tr.add("delete", "%s", tg.deleteShareOffsets(ctx, group, tg.name("nope"), untouched, topic))
	tr.add("start offsets after the delete", "%s", tg.shareStartOffsets(ctx, group, topic, true))

	tr.add("delete for an unknown group", "%s", tg.deleteShareOffsets(ctx, tg.name("soa-none"), topic))
	created := tg.name("soa-created")
	tr.add("alter an unknown group", "%s", tg.alterShareOffsets(ctx, created, map[string]map[int32]int64{topic: {0: 0}}))
	tr.add("delete for the group the alter created", "%s", tg.deleteShareOffsets(ctx, created, topic))
	tr.add("alter with an empty group id", "%s", tg.alterShareOffsets(ctx, "", map[string]map[int32]int64{topic: {0: 0}}))
	classic := tg.name("soa-classic")
	tg.cgCommit(ctx, vOffsetCommitEpoch, classic, "", -1, topic, 0, 1)
	tr.add("alter a classic group", "%s", tg.alterShareOffsets(ctx, classic, map[string]map[int32]int64{topic: {0: 0}}))
	tr.add("delete for a classic group", "%s", tg.deleteShareOffsets(ctx, classic, topic))
}
