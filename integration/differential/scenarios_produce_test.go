package differential_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// recentTs is a record timestamp a minute old: recent enough that no
// retention removes it, old enough that no timestamp check refuses it.
func recentTs() int64 { return time.Now().Add(-time.Minute).UnixMilli() }

func scenarioProduceErrors(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("produce")
	tg.createTopic(ctx, topic, 1)
	ts := recentTs()
	good := plain(ts, "a").encode()
	send := func(step string, txnID *string, acks int16, topic string, partition int32, records []byte) {
		tr.add(step, "%s", produceResult(tg.produce(ctx, vProduce, txnID, acks, topic, partition, records)))
	}
	send("unknown topic", nil, -1, tg.name("nope"), 0, good)
	send("unknown partition", nil, -1, topic, 3, good)
	send("corrupt CRC", nil, -1, topic, 0, withBadCRC(good))
	send("magic 1 message set", nil, -1, topic, 0, legacyMessage("old"))
	send("acks 2", nil, 2, topic, 0, good)
	send("truncated batch", nil, -1, topic, 0, good[:40])
	send("batch without records", nil, -1, topic, 0, plain(ts).encode())
	send("control batch", nil, -1, topic, 0, batch{pid: 1, epoch: 0, seq: 0, control: true, baseTs: ts, values: []string{"x"}}.encode())
	send("internal topic", nil, -1, "__consumer_offsets", 0, good)
	send("transactional batch without a transactional id", nil, -1, topic, 0,
		batch{pid: 1, epoch: 0, seq: 0, txn: true, baseTs: ts, values: []string{"t"}}.encode())
	unknownTxn := tg.name("no-such-txn")
	tr.add("transactional batch, unknown transactional id (v12)", "%s", produceResult(tg.produce(ctx, vProduceTV2, &unknownTxn, -1, topic, 0,
		batch{pid: 1, epoch: 0, seq: 0, txn: true, baseTs: ts, values: []string{"t"}}.encode())))
	send("first good batch", nil, -1, topic, 0, good)
	two := append(plain(ts, "b", "c").encode(), plain(ts, "d").encode()...)
	send("two batches in one partition", nil, -1, topic, 0, two)
	p := tg.produce(ctx, vProduce, nil, -1, topic, 0, good)
	tr.add("answer fields", "logStart=%d logAppendTime=%d", p.LogStartOffset, p.LogAppendTime)
	_, fp := tg.fetch(ctx, topic, 0, 0, fetchOpts{})
	tr.add("log after all", "%s", tg.fetchResult(fp, &pidNames{}))
}

func scenarioProduceIdempotent(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("idem")
	tg.createTopic(ctx, topic, 1)
	pids := &pidNames{}
	pid, epoch := tg.idempotentPID(ctx)
	tr.add("InitProducerId without a transactional id", "id=%s epoch=%d", pids.name(pid), epoch)
	ts := recentTs()
	send := func(step string, pid int64, epoch int16, seq int32, values ...string) {
		b := batch{pid: pid, epoch: epoch, seq: seq, baseTs: ts, values: values}
		tr.add(step, "%s", produceResult(tg.produce(ctx, vProduce, nil, -1, topic, 0, b.encode())))
	}
	send("seq 0", pid, epoch, 0, "a", "b")
	send("same batch again", pid, epoch, 0, "a", "b")
	send("gap: seq 5", pid, epoch, 5, "x")
	send("seq 2", pid, epoch, 2, "c")
	send("retry of the first batch after another", pid, epoch, 0, "a", "b")
	send("retry with a different record count", pid, epoch, 0, "a")
	send("seq 1, already written", pid, epoch, 1, "b")
	for i := int32(3); i < 9; i++ {
		send(fmt.Sprintf("seq %d", i), pid, epoch, i, fmt.Sprintf("v%d", i))
	}
	send("retry of a batch older than the last five", pid, epoch, 3, "v3")
	send("retry of the fifth-last batch", pid, epoch, 4, "v4")
	send("next epoch, seq 9", pid, epoch+1, 9, "e1")
	send("next epoch, seq 0", pid, epoch+1, 0, "e1")
	send("old epoch", pid, epoch, 9, "late")
	send("epoch skipped ahead, seq 0", pid, epoch+5, 0, "e5")
	fresh, freshEpoch := tg.idempotentPID(ctx)
	tr.add("second InitProducerId", "id=%s epoch=%d", pids.name(fresh), freshEpoch)
	send("new producer starting at seq 7", fresh, freshEpoch, 7, "n")
	send("never-issued producer id, seq 0", pid+1_000_000, 0, 0, "u")
	send("sequence wrapping past MaxInt32", pid, epoch+5, 2147483647, "w")
	send("negative sequence", pid, epoch+5, -5, "neg")
	send("sequence -1 with a producer id", pid, epoch+5, -1, "neg")
	tr.add("producers", "%s", tg.describeProducersResult(ctx, topic, 0, pids))
	_, fp := tg.fetch(ctx, topic, 0, 0, fetchOpts{})
	tr.add("log", "%s", tg.fetchResult(fp, pids))
}

// describeProducersResult describes one partition's producers, sorted by
// their scenario names.
func (tg *target) describeProducersResult(ctx context.Context, topic string, partition int32, pids *pidNames) string {
	tg.t.Helper()
	req := kmsg.NewPtrDescribeProducersRequest()
	rt := kmsg.NewDescribeProducersRequestTopic()
	rt.Topic = topic
	rt.Partitions = []int32{partition}
	req.Topics = append(req.Topics, rt)
	resp := tg.send(ctx, vDescribeProds, req).(*kmsg.DescribeProducersResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Sprintf("%d topics answered", len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		return errName(p.ErrorCode)
	}
	var out []string
	for _, ap := range p.ActiveProducers {
		coord := "none"
		if ap.CoordinatorEpoch >= 0 {
			coord = "set"
		}
		out = append(out, fmt.Sprintf("%s{epoch=%d lastSeq=%d txnStart=%d coordinatorEpoch=%s lastTimestamp=%t}",
			pids.name(ap.ProducerID), ap.ProducerEpoch, ap.LastSequence, ap.CurrentTxnStartOffset, coord, ap.LastTimestamp > 0))
	}
	sort.Strings(out)
	return "OK " + strings.Join(out, " ")
}

func scenarioFetch(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("fetch")
	id := tg.createTopic(ctx, topic, 1)
	ts := recentTs()
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ts, "a", "b", "c"))
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ts, "d", "e"))
	pids := &pidNames{}
	at := func(step string, offset int64, o fetchOpts) {
		resp, p := tg.fetch(ctx, topic, 0, offset, o)
		if resp.ErrorCode != 0 {
			tr.add(step, "top-level %s", errName(resp.ErrorCode))
			return
		}
		tr.add(step, "%s", tg.fetchResult(p, pids))
	}
	at("offset 0", 0, fetchOpts{})
	at("offset 1, inside the first batch", 1, fetchOpts{})
	at("offset 3, the second batch", 3, fetchOpts{})
	at("offset 5, the high watermark", 5, fetchOpts{})
	at("offset 6, past the high watermark", 6, fetchOpts{})
	at("offset 100", 100, fetchOpts{})
	at("offset -1", -1, fetchOpts{})
	at("read_committed without transactions", 0, fetchOpts{readCommitted: true})
	at("current leader epoch 0", 0, fetchOpts{withEpoch: true, leaderEpoch: 0})
	at("current leader epoch 5 (newer than the leader's)", 0, fetchOpts{withEpoch: true, leaderEpoch: 5})

	_, p := tg.fetch(ctx, tg.name("nope"), 0, 0, fetchOpts{})
	tr.add("unknown topic", "%s", tg.fetchResult(p, pids))
	_, p = tg.fetch(ctx, topic, 4, 0, fetchOpts{})
	tr.add("unknown partition", "%s", tg.fetchResult(p, pids))

	byID := func(id [16]byte) string {
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes, req.MinBytes = 1<<20, 1
		rt := kmsg.NewFetchRequestTopic()
		rt.TopicID = id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 1<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := tg.send(ctx, vFetchByID, req).(*kmsg.FetchResponse)
		if resp.ErrorCode != 0 {
			return "top-level " + errName(resp.ErrorCode)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return fmt.Sprintf("%d topics answered", len(resp.Topics))
		}
		return fmt.Sprintf("%s idEchoed=%t", tg.fetchResult(resp.Topics[0].Partitions[0], pids), resp.Topics[0].TopicID == id)
	}
	tr.add("by topic id (v13)", "%s", byID(id))
	tr.add("by unknown topic id (v13)", "%s", byID([16]byte{1, 2, 3}))

	session := kmsg.NewPtrFetchRequest()
	session.MaxBytes, session.MinBytes = 1<<20, 1
	session.SessionID, session.SessionEpoch = 12345, 1
	resp := tg.send(ctx, vFetch, session).(*kmsg.FetchResponse)
	tr.add("unknown fetch session", "%s topics=%d", errName(resp.ErrorCode), len(resp.Topics))
}

func scenarioFetchReadCommitted(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("rc")
	tg.createTopic(ctx, topic, 1)
	txnID := tg.name("rc-txn")
	pids := &pidNames{}
	pid, epoch := tg.initTxn(ctx, txnID, 60000)
	pids.name(pid)
	ts := recentTs()
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ts, "a", "b"))
	tr.add("transactional produce v12", "%s", produceResult(tg.produce(ctx, vProduceTV2, &txnID, -1, topic, 0,
		batch{pid: pid, epoch: epoch, seq: 0, txn: true, baseTs: ts, values: []string{"t1", "t2"}}.encode())))
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ts, "c"))

	tr.add("latest, read_uncommitted", "%s", listOffsetResult(tg.listOffset(ctx, topic, 0, -1, 0, -1)))
	tr.add("latest, read_committed (open transaction)", "%s", listOffsetResult(tg.listOffset(ctx, topic, 0, -1, 1, -1)))
	at := func(step string, offset int64, committed bool) {
		_, p := tg.fetch(ctx, topic, 0, offset, fetchOpts{readCommitted: committed})
		tr.add(step, "%s", tg.fetchResult(p, pids))
	}
	at("read_committed, open transaction", 0, true)
	at("read_committed at the last stable offset", 2, true)
	at("read_committed past the last stable offset", 3, true)
	at("read_uncommitted, open transaction", 0, false)
	tr.add("producers, open transaction", "%s", tg.describeProducersResult(ctx, topic, 0, pids))

	tr.add("abort", "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, txnID, pid, epoch, false), pids, epoch))
	tg.waitTxnSettled(ctx, txnID)
	tg.waitStable(ctx, topic, 0)
	at("read_committed after the abort", 0, true)
	at("read_committed after the abort, from offset 4", 4, true)
	at("read_committed after the abort, from offset 6", 6, true)
	tr.add("producers after the abort", "%s", tg.describeProducersResult(ctx, topic, 0, pids))

	epoch++
	tr.add("second transaction produce", "%s", produceResult(tg.produce(ctx, vProduceTV2, &txnID, -1, topic, 0,
		batch{pid: pid, epoch: epoch, seq: 0, txn: true, baseTs: ts, values: []string{"t3"}}.encode())))
	tr.add("commit", "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, txnID, pid, epoch, true), pids, epoch))
	tg.waitTxnSettled(ctx, txnID)
	tg.waitStable(ctx, topic, 0)
	at("read_committed after the commit", 0, true)
	at("read_committed after the commit, from offset 6", 6, true)
	tr.add("latest, read_committed, all settled", "%s", listOffsetResult(tg.listOffset(ctx, topic, 0, -1, 1, -1)))
}

func scenarioListOffsets(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("lo")
	tg.createTopic(ctx, topic, 1)
	base := recentTs()
	// Offsets 0-2 at base, base+30, base+10; 3 at base+20; 4-5 both at
	// base+40.
	tg.mustProduce(ctx, vProduce, nil, topic, 0, batch{pid: -1, epoch: -1, seq: -1, baseTs: base, tsDeltas: []int64{0, 30, 10}, values: []string{"a", "b", "c"}})
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(base+20, "d"))
	tg.mustProduce(ctx, vProduce, nil, topic, 0, batch{pid: -1, epoch: -1, seq: -1, baseTs: base + 40, tsDeltas: []int64{0, 0}, values: []string{"e", "f"}})
	list := func(step string, ts int64, isolation int8, leaderEpoch int32) {
		p := tg.listOffset(ctx, topic, 0, ts, isolation, leaderEpoch)
		if p.ErrorCode != 0 {
			tr.add(step, "%s", errName(p.ErrorCode))
			return
		}
		rel := "-1"
		if p.Timestamp >= 0 {
			rel = fmt.Sprintf("base%+d", p.Timestamp-base)
		}
		tr.add(step, "OK offset=%d timestamp=%s leaderEpoch=%d", p.Offset, rel, p.LeaderEpoch)
	}
	list("latest (-1)", -1, 0, -1)
	list("earliest (-2)", -2, 0, -1)
	list("max timestamp (-3)", -3, 0, -1)
	list("earliest local (-4)", -4, 0, -1)
	list("earliest pending upload (-5)", -5, 0, -1)
	list("unknown negative timestamp (-7)", -7, 0, -1)
	list("timestamp 0", 0, 0, -1)
	list("timestamp base+15 (inside the first batch)", base+15, 0, -1)
	list("timestamp base+20", base+20, 0, -1)
	list("timestamp base+31", base+31, 0, -1)
	list("timestamp past every record", base+1000, 0, -1)
	list("latest, read_committed", -1, 1, -1)
	list("current leader epoch 0", -1, 0, 0)
	list("current leader epoch 3 (newer than the leader's)", -1, 0, 3)
	list("earliest pending upload (-6, needs v11)", -6, 0, -1)

	// A transaction marker has a timestamp too: when it was written.
	txnID := tg.name("lo-txn")
	pid, epoch := tg.initTxn(ctx, txnID, 60000)
	tg.mustProduce(ctx, vProduceTV2, &txnID, topic, 0, batch{pid: pid, epoch: epoch, seq: 0, txn: true, baseTs: base + 50, values: []string{"t"}})
	tr.add("commit", "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, txnID, pid, epoch, true), &pidNames{}, epoch))
	tg.waitTxnSettled(ctx, txnID)
	tg.waitStable(ctx, topic, 0)
	p := tg.listOffset(ctx, topic, 0, -3, 0, -1)
	tr.add("max timestamp (-3) after a commit", "OK offset=%d markerNewest=%t", p.Offset, p.Timestamp > base+50)
	p = tg.listOffset(ctx, topic, 0, base+45, 0, -1)
	tr.add("timestamp base+45, before the transaction's record", "OK offset=%d", p.Offset)

	empty := tg.name("lo-empty")
	tg.createTopic(ctx, empty, 1)
	for _, ts := range []int64{-1, -2, -3, 0} {
		tr.add(fmt.Sprintf("empty partition, timestamp %d", ts), "%s", listOffsetResult(tg.listOffset(ctx, empty, 0, ts, 0, -1)))
	}

	p = tg.listOffset(ctx, topic, 2, -1, 0, -1)
	tr.add("unknown partition", "%s", errName(p.ErrorCode))
	p = tg.listOffset(ctx, tg.name("nope"), 0, -1, 0, -1)
	tr.add("unknown topic", "%s", errName(p.ErrorCode))
}
