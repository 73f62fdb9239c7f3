package differential_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The scenarios of this file check that the share-group configs do what
// Kafka does with them, beyond being accepted: where a group starts
// reading (share.auto.offset.reset=by_duration), which transactional
// records it delivers (share.isolation.level), how many records it keeps
// in flight (share.partition.max.record.locks), whether it takes RENEW
// acknowledgements (share.renew.acknowledge.enable), and which
// acknowledgements it ignores.

// shareReader is one member of one share group, reading partition 0 of a
// topic through one share session.
type shareReader struct {
	tg      *target
	group   string
	member  string
	topicID [16]byte
	session int32
}

// newShareReader sets the group's configs (name, value pairs), joins a new
// member to the group and returns it, its session not yet opened.
func (tg *target) newShareReader(ctx context.Context, tr *transcript, step, group, topic string, topicID [16]byte, configs ...string) *shareReader {
	tg.t.Helper()
	var set []string
	for i := 0; i+1 < len(configs); i += 2 {
		set = append(set, tg.alterGroupConfig(ctx, group, 0, configs[i], kmsg.StringPtr(configs[i+1]), false))
	}
	tr.add(step, "%s", strings.Join(set, " "))
	member := newMemberID()
	tg.joinShareGroup(ctx, group, member, topic)
	return &shareReader{tg: tg, group: group, member: member, topicID: topicID}
}

// fetch sends one ShareFetch in the reader's session.
func (sr *shareReader) fetch(ctx context.Context, acks []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) *kmsg.ShareFetchResponse {
	sr.tg.t.Helper()
	resp := sr.tg.shareFetch(ctx, sr.group, sr.member, sr.session, sr.topicID, acks)
	sr.session++
	return resp
}

// acquire fetches until records are acquired (the real Kafka initializes a
// share-partition on first use, so the first fetches may come back empty)
// and returns the answer that acquired them.
func (sr *shareReader) acquire(ctx context.Context) *kmsg.ShareFetchResponse {
	sr.tg.t.Helper()
	var got *kmsg.ShareFetchResponse
	sr.tg.retry(ctx, "share fetch to acquire records", func() error {
		got = sr.fetch(ctx, nil)
		if got.ErrorCode != 0 {
			return codeErr(got.ErrorCode)
		}
		if acquiredCount(got) == 0 {
			return fmt.Errorf("nothing acquired yet")
		}
		return nil
	})
	return got
}

// acknowledge sends ShareAcknowledge (v2 when renew, which needs it) in the
// reader's session and records each partition's answer.
func (sr *shareReader) acknowledge(ctx context.Context, renew bool, batches ...kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) string {
	sr.tg.t.Helper()
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID = &sr.group, &sr.member
	req.ShareSessionEpoch = sr.session
	req.IsRenewAck = renew
	rt := kmsg.NewShareAcknowledgeRequestTopic()
	rt.TopicID = sr.topicID
	rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
	rp.AcknowledgementBatches = batches
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	version := int16(vShareAck)
	if renew {
		version = vShareAckRenew
	}
	resp := sr.tg.send(ctx, version, req).(*kmsg.ShareAcknowledgeResponse)
	sr.session++
	if resp.ErrorCode != 0 {
		return "top-level " + errName(resp.ErrorCode)
	}
	var out []string
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out = append(out, errName(p.ErrorCode))
		}
	}
	return fmt.Sprintf("OK [%s]", strings.Join(out, " "))
}

// vShareAckRenew is the ShareAcknowledge version with IsRenewAck (KIP-1222).
const vShareAckRenew = 2

func shareAckRange(first, last int64, types ...int8) kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch {
	b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
	b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = first, last, types
	return b
}

func acquiredCount(r *kmsg.ShareFetchResponse) int64 {
	var n int64
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			for _, a := range p.AcquiredRecords {
				n += a.LastOffset - a.FirstOffset + 1
			}
		}
	}
	return n
}

// acquiredRanges records only what a ShareFetch acquired, for answers too
// long to record record by record.
func acquiredRanges(r *kmsg.ShareFetchResponse) string {
	if r.ErrorCode != 0 {
		return "top-level " + errName(r.ErrorCode)
	}
	var out []string
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			for _, a := range p.AcquiredRecords {
				out = append(out, fmt.Sprintf("%d-%d(x%d)", a.FirstOffset, a.LastOffset, a.DeliveryCount))
			}
			if p.ErrorCode != 0 || p.AcknowledgeErrorCode != 0 {
				out = append(out, errName(p.ErrorCode)+"/"+errName(p.AcknowledgeErrorCode))
			}
		}
	}
	return "acquired=[" + strings.Join(out, " ") + "]"
}

func scenarioShareResetByDuration(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("sbd")
	id := tg.createTopic(ctx, topic, 1)
	now := time.Now()
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixMilli() }
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ago(3*time.Hour), "old-a", "old-b"))
	// A batch whose middle record is the first one inside the last hour,
	// followed by an older one: the reset finds the record, not the batch,
	// and delivers everything after it.
	tg.mustProduce(ctx, vProduce, nil, topic, 0, batch{pid: -1, epoch: -1, seq: -1,
		baseTs: ago(2 * time.Hour), tsDeltas: []int64{0, (90 * time.Minute).Milliseconds(), (30 * time.Minute).Milliseconds()},
		values: []string{"old-c", "new-a", "old-d"}})
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ago(10*time.Minute), "new-b"))

	hour := tg.newShareReader(ctx, tr, "by_duration:PT1H", tg.name("sbd-hour"), topic, id, "share.auto.offset.reset", "by_duration:PT1H")
	tr.add("PT1H: first records", "%s", tg.shareFetchResult(hour.acquire(ctx)))

	day := tg.newShareReader(ctx, tr, "by_duration:P1D", tg.name("sbd-day"), topic, id, "share.auto.offset.reset", "by_duration:P1D")
	tr.add("P1D: first records", "%s", tg.shareFetchResult(day.acquire(ctx)))

	// No record is as recent as a minute: the share-partition waits for
	// one.
	minute := tg.newShareReader(ctx, tr, "by_duration:PT1M", tg.name("sbd-minute"), topic, id, "share.auto.offset.reset", "by_duration:PT1M")
	tr.add("PT1M: nothing that recent", "%s", tg.shareFetchResult(minute.fetch(ctx, nil)))
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(now.UnixMilli(), "fresh"))
	tr.add("PT1M: a record produced later", "%s", tg.shareFetchResult(minute.acquire(ctx)))
}

func scenarioShareIsolation(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("siso")
	id := tg.createTopic(ctx, topic, 1)
	txnID := tg.name("siso-txn")
	pid, epoch := tg.initTxn(ctx, txnID, 60000)
	ts := recentTs()
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ts, "a"))
	tr.add("transactional produce", "%s", produceResult(tg.produce(ctx, vProduceTV2, &txnID, -1, topic, 0,
		batch{pid: pid, epoch: epoch, seq: 0, txn: true, baseTs: ts, values: []string{"t1", "t2"}}.encode())))
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ts, "b"))

	uncommitted := tg.newShareReader(ctx, tr, "default isolation", tg.name("siso-ru"), topic, id, "share.auto.offset.reset", "earliest")
	committed := tg.newShareReader(ctx, tr, "read_committed", tg.name("siso-rc"), topic, id,
		"share.auto.offset.reset", "earliest", "share.isolation.level", "read_committed")
	tr.add("describe read_committed", "%s", tg.groupConfigs(ctx, committed.group, []string{"share.isolation.level"}))
	tr.add("read_uncommitted, open transaction", "%s", tg.shareFetchResult(uncommitted.acquire(ctx)))
	tr.add("read_committed, open transaction", "%s", tg.shareFetchResult(committed.acquire(ctx)))
	tr.add("read_committed, nothing more before the transaction ends", "%s", tg.shareFetchResult(committed.fetch(ctx, nil)))

	tr.add("abort", "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, txnID, pid, epoch, false), &pidNames{}, epoch))
	tg.waitTxnSettled(ctx, txnID)
	tg.waitStable(ctx, topic, 0)
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ts, "c"))
	tr.add("read_uncommitted after the abort", "%s", tg.shareFetchResult(uncommitted.acquire(ctx)))
	tr.add("read_committed after the abort", "%s", tg.shareFetchResult(committed.acquire(ctx)))
}

func scenarioShareRecordLocks(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("slock")
	id := tg.createTopic(ctx, topic, 1)
	ts := recentTs()
	for b := 0; b < 3; b++ {
		values := make([]string, 60)
		for i := range values {
			values[i] = fmt.Sprintf("v%d", b*60+i)
		}
		tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ts, values...))
	}
	r := tg.newShareReader(ctx, tr, "share.partition.max.record.locks=100", tg.name("slock-group"), topic, id,
		"share.auto.offset.reset", "earliest", "share.partition.max.record.locks", "100")
	tr.add("first fetch", "%s", acquiredRanges(r.acquire(ctx)))
	tr.add("fetch at the limit", "%s", acquiredRanges(r.fetch(ctx, nil)))
	tr.add("accept the first 50", "%s", acquiredRanges(r.fetch(ctx,
		[]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{ackBatch(0, 49, 1)})))
	tr.add("fetch at the limit again", "%s", acquiredRanges(r.fetch(ctx, nil)))
}

func scenarioShareAcknowledgements(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("sack")
	id := tg.createTopic(ctx, topic, 1)
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(recentTs(), "a", "b", "c", "d", "e"))

	r := tg.newShareReader(ctx, tr, "earliest", tg.name("sack-group"), topic, id, "share.auto.offset.reset", "earliest")
	tr.add("first records", "%s", acquiredRanges(r.acquire(ctx)))
	tr.add("accept 1", "%s", r.acknowledge(ctx, false, shareAckRange(1, 1, 1)))
	tr.add("accept 1 again, inside the window", "%s", r.acknowledge(ctx, false, shareAckRange(1, 1, 1)))
	tr.add("accept 0", "%s", r.acknowledge(ctx, false, shareAckRange(0, 0, 1)))
	tr.add("accept 0-2, straddling the start offset", "%s", r.acknowledge(ctx, false, shareAckRange(0, 2, 1)))
	tr.add("fetch: 0-2 are done", "%s", acquiredRanges(r.fetch(ctx, nil)))
	tr.add("accept past the end", "%s", r.acknowledge(ctx, false, shareAckRange(3, 9, 1)))
	tr.add("renew 3", "%s", r.acknowledge(ctx, true, shareAckRange(3, 3, 4)))

	off := tg.newShareReader(ctx, tr, "share.renew.acknowledge.enable=false", tg.name("sack-norenew"), topic, id,
		"share.auto.offset.reset", "earliest", "share.renew.acknowledge.enable", "false")
	tr.add("renew disabled: first records", "%s", acquiredRanges(off.acquire(ctx)))
	tr.add("renew disabled: renew 0", "%s", off.acknowledge(ctx, true, shareAckRange(0, 0, 4)))
	tr.add("renew disabled: accept 0", "%s", off.acknowledge(ctx, false, shareAckRange(0, 0, 1)))
}

// scenarioGroupConfigValues sets values at and past the edges of Kafka's
// group config validation (validate only) and records which are refused.
func scenarioGroupConfigValues(ctx context.Context, tg *target, tr *transcript) {
	group := tg.name("cfg-values")
	for _, c := range []struct{ name, value string }{
		{"share.auto.offset.reset", "by_duration:P1DT2H3M4.5S"},
		{"share.auto.offset.reset", "by_duration:pt1h"},
		{"share.auto.offset.reset", "by_duration:+PT1H"},
		{"share.auto.offset.reset", "by_duration:PT0S"},
		{"share.auto.offset.reset", "by_duration:-PT1H"},
		{"share.auto.offset.reset", "by_duration:PT-1H"},
		{"share.auto.offset.reset", "by_duration:P1W"},
		{"share.auto.offset.reset", "by_duration:PT"},
		{"share.auto.offset.reset", "by_duration:PT1M1H"},
		{"share.auto.offset.reset", "by_duration:PT99999999999999999H"},
		{"share.auto.offset.reset", "BY_DURATION:PT1H"},
		{"share.auto.offset.reset", " earliest "},
		{"share.isolation.level", "read_committed"},
		{"share.isolation.level", "READ_COMMITTED"},
		{"share.partition.max.record.locks", "4000"},
		{"share.partition.max.record.locks", "4001"},
		{"share.partition.max.record.locks", "99"},
		{"share.renew.acknowledge.enable", "TRUE"},
		{"share.renew.acknowledge.enable", "yes"},
		{"share.delivery.count.limit", "+3"},
		{"share.delivery.count.limit", "99999999999"},
		{"share.assignment.interval.ms", "15001"},
		{"consumer.session.timeout.ms", "44999"},
		{"consumer.heartbeat.interval.ms", "15000"},
		{"streams.num.standby.replicas", "3"},
		{"streams.initial.rebalance.delay.ms", "2147483647"},
		{"streams.assignor.name", "highly_available"},
		{"streams.rack.aware.assignment.tags", "zone, rack"},
		{"streams.rack.aware.assignment.tags", "zone,zone"},
		{"streams.rack.aware.assignment.tags", "zone,,rack"},
		{"errors.deadletterqueue.topic.name", "__dlq"},
		{"errors.deadletterqueue.topic.name", "_dlq"},
		{"errors.deadletterqueue.copy.record.enable", "false"},
	} {
		tr.add(c.name+"="+c.value, "%s", tg.alterGroupConfig(ctx, group, 0, c.name, kmsg.StringPtr(c.value), true))
	}
	tr.add("describe the empty group name", "%s", tg.groupConfigs(ctx, "", nil))
	tr.add("set the list config", "%s", tg.alterGroupConfig(ctx, group, 0, "streams.rack.aware.assignment.tags", kmsg.StringPtr(" zone , rack"), false))
	tr.add("append to the list config", "%s", tg.alterGroupConfig(ctx, group, 2, "streams.rack.aware.assignment.tags", kmsg.StringPtr("host"), false))
	tr.add("subtract from the list config", "%s", tg.alterGroupConfig(ctx, group, 3, "streams.rack.aware.assignment.tags", kmsg.StringPtr("zone"), false))
	tr.add("the list config", "%s", tg.groupConfigsSettled(ctx, group, []string{"streams.rack.aware.assignment.tags"}, "(source=8"))
	tr.add("set with spaces", "%s", tg.alterGroupConfig(ctx, group, 0, "share.delivery.count.limit", kmsg.StringPtr(" 4 "), false))
	tr.add("after setting with spaces", "%s", tg.groupConfigsSettled(ctx, group, []string{"share.delivery.count.limit"}, "(source=8"))
}
