package differential_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// newMemberID returns a member id the way KIP-932 clients make one: a
// random UUID in Kafka's base64 form.
func newMemberID() string {
	var id [16]byte
	_, _ = rand.Read(id[:])
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// shareHeartbeat sends ShareGroupHeartbeat.
func (tg *target) shareHeartbeat(ctx context.Context, group, member string, epoch int32, topics []string) *kmsg.ShareGroupHeartbeatResponse {
	tg.t.Helper()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID, req.MemberEpoch = group, member, epoch
	req.SubscribedTopicNames = topics
	return tg.send(ctx, vShareHeartbeat, req).(*kmsg.ShareGroupHeartbeatResponse)
}

// heartbeatResult records a heartbeat answer; epochs are relative to the
// member epoch the scenario knows (base).
func heartbeatResult(r *kmsg.ShareGroupHeartbeatResponse, base int32, member string) string {
	if r.ErrorCode != 0 {
		return errName(r.ErrorCode)
	}
	assigned := "none"
	if r.Assignment != nil {
		n := 0
		for _, tp := range r.Assignment.TopicPartitions {
			n += len(tp.Partitions)
		}
		assigned = fmt.Sprintf("%d partitions", n)
	}
	epoch := fmt.Sprint(r.MemberEpoch)
	if base > 0 && r.MemberEpoch > 0 {
		epoch = fmt.Sprintf("base%+d", r.MemberEpoch-base)
	}
	return fmt.Sprintf("OK epoch=%s sameMemberID=%t interval>0=%t assignment=%s", epoch,
		r.MemberID != nil && *r.MemberID == member, r.HeartbeatIntervalMillis > 0, assigned)
}

// joinShareGroup joins member to group subscribed to topic and heartbeats
// until the member is assigned partitions; it returns the member epoch.
func (tg *target) joinShareGroup(ctx context.Context, group, member, topic string) int32 {
	tg.t.Helper()
	r := tg.shareHeartbeat(ctx, group, member, 0, []string{topic})
	if r.ErrorCode != 0 {
		tg.t.Fatalf("%s: join %s: %s", tg.kind, group, errName(r.ErrorCode))
	}
	epoch := r.MemberEpoch
	assigned := r.Assignment != nil && len(r.Assignment.TopicPartitions) > 0
	tg.retry(ctx, "share group assignment", func() error {
		if assigned {
			return nil
		}
		r := tg.shareHeartbeat(ctx, group, member, epoch, nil)
		if r.ErrorCode != 0 {
			return codeErr(r.ErrorCode)
		}
		epoch = r.MemberEpoch
		if r.Assignment == nil || len(r.Assignment.TopicPartitions) == 0 {
			return fmt.Errorf("no assignment yet")
		}
		assigned = true
		return nil
	})
	return epoch
}

func scenarioShareHeartbeat(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("sh")
	tg.createTopic(ctx, topic, 2)
	group := tg.name("sh-group")
	member := newMemberID()
	hb := func(step, group, member string, epoch int32, topics []string, base int32) *kmsg.ShareGroupHeartbeatResponse {
		r := tg.shareHeartbeat(ctx, group, member, epoch, topics)
		tr.add(step, "%s", heartbeatResult(r, base, member))
		return r
	}
	hb("empty group id", "", member, 0, []string{topic}, 0)
	hb("empty member id", group, "", 0, []string{topic}, 0)
	hb("join without topics", group, member, 0, nil, 0)
	hb("unknown member, epoch 1", group, member, 1, nil, 0)
	joined := hb("join", group, member, 0, []string{topic}, 0)
	epoch := tg.joinShareGroup(ctx, group, member, topic)
	tr.add("assigned", "epoch>=join=%t", epoch >= joined.MemberEpoch)
	hb("heartbeat at the current epoch", group, member, epoch, nil, epoch)
	hb("heartbeat at an older epoch", group, member, epoch-1, nil, epoch)
	hb("heartbeat at a future epoch", group, member, epoch+5, nil, epoch)
	hb("rejoin at epoch 0 with the same member id", group, member, 0, []string{topic}, epoch)
	other := newMemberID()
	// Relative to the first member's epoch, which Kafka moves once more when
	// it finishes initializing the assigned partitions, before or after
	// assigning them.
	hb("second member joins", group, other, 0, []string{topic}, epoch)
	hb("unknown member at epoch 1", group, newMemberID(), 1, nil, 0)

	describe := func(step string, groups ...string) {
		req := kmsg.NewPtrShareGroupDescribeRequest()
		req.GroupIDs = groups
		resp := tg.send(ctx, 1, req).(*kmsg.ShareGroupDescribeResponse)
		var out []string
		for _, g := range resp.Groups {
			if g.ErrorCode != 0 {
				out = append(out, errName(g.ErrorCode))
				continue
			}
			out = append(out, fmt.Sprintf("OK state=%s members=%d assignor=%s", g.GroupState, len(g.Members), g.Assignor))
		}
		tr.add(step, "%s", strings.Join(out, "; "))
	}
	describe("describe", group)
	describe("describe an unknown group", tg.name("nope"))
	hb("leave", group, member, -1, nil, epoch)
	hb("heartbeat after leaving", group, member, epoch, nil, epoch)
	hb("leave again", group, member, -1, nil, epoch)
	hb("second member leaves", group, other, -1, nil, 0)
	describe("describe after everyone left", group)
}

// shareFetch sends ShareFetch for partition 0 of topicID, with acks if
// given, and returns the response.
func (tg *target) shareFetch(ctx context.Context, group, member string, sessionEpoch int32, topicID [16]byte, acks []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) *kmsg.ShareFetchResponse {
	tg.t.Helper()
	return tg.shareFetchPartition(ctx, group, member, sessionEpoch, topicID, 0, acks)
}

// shareFetchPartition is shareFetch for another partition.
func (tg *target) shareFetchPartition(ctx context.Context, group, member string, sessionEpoch int32, topicID [16]byte, partition int32, acks []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) *kmsg.ShareFetchResponse {
	tg.t.Helper()
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = &group, &member
	req.ShareSessionEpoch = sessionEpoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 200, 1, 1<<20
	req.MaxRecords, req.BatchSize = 500, 500
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = topicID
	rp := kmsg.NewShareFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes = partition, 1<<20
	rp.AcknowledgementBatches = acks
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return tg.send(ctx, vShareFetch, req).(*kmsg.ShareFetchResponse)
}

// shareFetchResult records a ShareFetch answer: errors, acquired ranges
// with delivery counts, and the values of the records returned.
func (tg *target) shareFetchResult(r *kmsg.ShareFetchResponse) string {
	tg.t.Helper()
	if r.ErrorCode != 0 {
		return "top-level " + errName(r.ErrorCode)
	}
	var out []string
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			var acquired []string
			for _, a := range p.AcquiredRecords {
				acquired = append(acquired, fmt.Sprintf("%d-%d(x%d)", a.FirstOffset, a.LastOffset, a.DeliveryCount))
			}
			f, err := readBatches(p.Records)
			if err != nil {
				tg.t.Fatalf("%s: share fetch records: %v", tg.kind, err)
			}
			out = append(out, fmt.Sprintf("%s ack=%s acquired=[%s] %s", errName(p.ErrorCode), errName(p.AcknowledgeErrorCode), strings.Join(acquired, " "), f))
		}
	}
	sort.Strings(out)
	return fmt.Sprintf("OK lockTimeout>0=%t %s", r.AcquisitionLockTimeoutMillis > 0, strings.Join(out, "; "))
}

// ackBatch is one acknowledgement range of a single type.
func ackBatch(first, last int64, ackType int8) kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch {
	b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
	b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = first, last, []int8{ackType}
	return b
}

func scenarioShareFetch(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("sf")
	id := tg.createTopic(ctx, topic, 1)
	ts := recentTs()
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ts, "a", "b", "c"))
	group := tg.name("sf-group")
	tr.add("share.auto.offset.reset=earliest", "%s", tg.alterGroupConfig(ctx, group, 0, "share.auto.offset.reset", kmsg.StringPtr("earliest"), false))
	member := newMemberID()

	tr.add("fetch before joining", "%s", tg.shareFetchResult(tg.shareFetch(ctx, group, member, 0, id, nil)))
	tg.joinShareGroup(ctx, group, member, topic)

	// The real Kafka initializes a share-partition's state on first use,
	// so the first fetches of a session may come back empty.
	session := int32(0)
	var got *kmsg.ShareFetchResponse
	tg.retry(ctx, "share fetch to acquire records", func() error {
		got = tg.shareFetch(ctx, group, member, session, id, nil)
		session++
		if got.ErrorCode != 0 {
			return codeErr(got.ErrorCode)
		}
		for _, t := range got.Topics {
			for _, p := range t.Partitions {
				if len(p.AcquiredRecords) > 0 {
					return nil
				}
			}
		}
		return fmt.Errorf("nothing acquired yet")
	})
	tr.add("first records", "%s", tg.shareFetchResult(got))
	tr.add("fetch again: nothing left", "%s", tg.shareFetchResult(tg.shareFetch(ctx, group, member, session, id, nil)))
	session++
	tr.add("fetch with a wrong session epoch", "%s", tg.shareFetchResult(tg.shareFetch(ctx, group, member, session+7, id, nil)))
	ack := func(step string, epoch int32, batches ...kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) {
		req := kmsg.NewPtrShareAcknowledgeRequest()
		req.GroupID, req.MemberID = &group, &member
		req.ShareSessionEpoch = epoch
		if len(batches) > 0 {
			rt := kmsg.NewShareAcknowledgeRequestTopic()
			rt.TopicID = id
			rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
			rp.AcknowledgementBatches = batches
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		resp := tg.send(ctx, vShareAck, req).(*kmsg.ShareAcknowledgeResponse)
		if resp.ErrorCode != 0 {
			tr.add(step, "top-level %s", errName(resp.ErrorCode))
			return
		}
		var out []string
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				out = append(out, errName(p.ErrorCode))
			}
		}
		tr.add(step, "OK [%s]", strings.Join(out, " "))
	}
	batch := func(first, last int64, types ...int8) kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch {
		b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
		b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = first, last, types
		return b
	}
	ack("accept 0, release 1", session, batch(0, 0, 1), batch(1, 1, 2))
	session++
	var again *kmsg.ShareFetchResponse
	tg.retry(ctx, "the released record to come back", func() error {
		again = tg.shareFetch(ctx, group, member, session, id, nil)
		session++
		if again.ErrorCode != 0 {
			return codeErr(again.ErrorCode)
		}
		for _, t := range again.Topics {
			for _, p := range t.Partitions {
				if len(p.AcquiredRecords) > 0 {
					return nil
				}
			}
		}
		return fmt.Errorf("nothing acquired yet")
	})
	tr.add("released record redelivered", "%s", tg.shareFetchResult(again))
	ack("acknowledge an offset already accepted", session, batch(0, 0, 1))
	session++
	ack("acknowledge with an unknown type", session, batch(1, 1, 9))
	session++
	ack("acknowledge a range with per-offset types of the wrong length", session, batch(1, 2, 1, 1, 1))
	session++
	tr.add("fetch accepting 1 and rejecting 2", "%s", tg.shareFetchResult(tg.shareFetch(ctx, group, member, session, id,
		[]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{ackBatch(1, 1, 1), ackBatch(2, 2, 3)})))
	session++
	ack("acknowledge with a wrong session epoch", session+9, batch(2, 2, 1))
	ack("close the session (epoch -1)", -1)
	tr.add("fetch on the closed session", "%s", tg.shareFetchResult(tg.shareFetch(ctx, group, member, session, id, nil)))
	other := newMemberID()
	tr.add("fetch by a member the group does not have", "%s", tg.shareFetchResult(tg.shareFetch(ctx, group, other, 0, id, nil)))
}
