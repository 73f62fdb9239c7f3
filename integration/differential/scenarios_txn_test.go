package differential_test

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// initResult records an InitProducerId answer with absolute epochs (a new
// transactional id starts at epoch 0 on both targets) and named ids.
func initResult(r *kmsg.InitProducerIDResponse, pids *pidNames) string {
	if r.ErrorCode != 0 {
		return fmt.Sprintf("%s id=%s epoch=%d", errName(r.ErrorCode), pids.name(r.ProducerID), r.ProducerEpoch)
	}
	return fmt.Sprintf("OK id=%s epoch=%d", pids.name(r.ProducerID), r.ProducerEpoch)
}

func scenarioInitProducerID(ctx context.Context, tg *target, tr *transcript) {
	txnID := tg.name("ipid")
	pids := &pidNames{}
	var first *kmsg.InitProducerIDResponse
	tg.retry(ctx, "first InitProducerId", func() error {
		first = tg.initProducerID(ctx, vInitProducerID, &txnID, 60000, -1, -1)
		if retriableCoordinatorError(first.ErrorCode) {
			return codeErr(first.ErrorCode)
		}
		return nil
	})
	tr.add("new transactional id", "%s", initResult(first, pids))
	pid := first.ProducerID
	init := func(step string, version int16, id *string, timeoutMs int32, pid int64, epoch int16) {
		tr.add(step, "%s", initResult(tg.initProducerID(ctx, version, id, timeoutMs, pid, epoch), pids))
	}
	init("again, without the producer id", vInitProducerID, &txnID, 60000, -1, -1)
	init("with the current id and epoch (KIP-360 bump)", vInitProducerID, &txnID, 60000, pid, 1)
	init("retry of that bump", vInitProducerID, &txnID, 60000, pid, 1)
	init("with an older epoch", vInitProducerID, &txnID, 60000, pid, 0)
	init("with an epoch from the future", vInitProducerID, &txnID, 60000, pid, 40)
	init("with another producer id", vInitProducerID, &txnID, 60000, pid+12345, 2)
	init("producer id without an epoch", vInitProducerID, &txnID, 60000, pid, -1)
	init("epoch without a producer id", vInitProducerID, &txnID, 60000, -1, 2)
	init("timeout above transaction.max.timeout.ms", vInitProducerID, &txnID, 900001, -1, -1)
	init("timeout 0", vInitProducerID, &txnID, 0, -1, -1)
	init("timeout -1", vInitProducerID, &txnID, -1, -1, -1)
	empty := ""
	init("empty transactional id", vInitProducerID, &empty, 60000, -1, -1)
	idem := tg.initProducerID(ctx, vInitProducerID, nil, 0, -1, -1)
	tr.add("no transactional id (idempotent)", "%s", initResult(idem, pids))
	init("idempotent, with its id and epoch", vInitProducerID, nil, 0, idem.ProducerID, idem.ProducerEpoch)
	init("idempotent, timeout above the maximum", vInitProducerID, nil, 900001, -1, -1)
	init("v3 with an older epoch", 3, &txnID, 60000, pid, 0)
	init("v2", 2, &txnID, 60000, -1, -1)
	tr.add("state", "%s", describeTxnResult(tg.describeTxn(ctx, txnID), pids, 0, tg.prefix))
}

func scenarioInitFencesOngoing(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("fence")
	tg.createTopic(ctx, topic, 1)
	txnID := tg.name("fence-txn")
	pids := &pidNames{}
	pid, epoch := tg.initTxn(ctx, txnID, 60000)
	pids.name(pid)
	ts := recentTs()
	tr.add("produce", "%s", produceResult(tg.produce(ctx, vProduceTV2, &txnID, -1, topic, 0,
		batch{pid: pid, epoch: epoch, seq: 0, txn: true, baseTs: ts, values: []string{"x"}}.encode())))
	firstAnswer := tg.initProducerID(ctx, vInitProducerID, &txnID, 60000, -1, -1)
	tr.add("InitProducerId during the transaction", "%s", errName(firstAnswer.ErrorCode))
	var final *kmsg.InitProducerIDResponse
	tg.retry(ctx, "InitProducerId after the fence", func() error {
		final = tg.initProducerID(ctx, vInitProducerID, &txnID, 60000, -1, -1)
		if retriableCoordinatorError(final.ErrorCode) {
			return codeErr(final.ErrorCode)
		}
		return nil
	})
	tr.add("InitProducerId once the abort is done", "%s id=%s epoch=%s", errName(final.ErrorCode), pids.name(final.ProducerID), relEpoch(final.ProducerEpoch, epoch))
	tg.waitStable(ctx, topic, 0)
	_, p := tg.fetch(ctx, topic, 0, 0, fetchOpts{readCommitted: true})
	tr.add("read_committed", "%s", tg.fetchResult(p, pids))
	tr.add("producers", "%s", tg.describeProducersResult(ctx, topic, 0, pids))
	tr.add("fenced producer writes", "%s", produceResult(tg.produce(ctx, vProduceTV2, &txnID, -1, topic, 0,
		batch{pid: pid, epoch: epoch, seq: 1, txn: true, baseTs: ts, values: []string{"late"}}.encode())))
	tr.add("fenced producer commits", "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, txnID, pid, epoch, true), pids, epoch))
	tr.add("state", "%s", describeTxnResult(tg.describeTxn(ctx, txnID), pids, epoch, tg.prefix))
}

func scenarioTxnTV2Commit(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("tv2c")
	tg.createTopic(ctx, topic, 2)
	txnID := tg.name("tv2c-txn")
	pids := &pidNames{}
	pid, _ := tg.initTxn(ctx, txnID, 60000)
	pids.name(pid)
	_, e := tg.initTxn(ctx, txnID, 60000) // epoch 1, so that e-1 is a real epoch
	ts := recentTs()
	produce := func(step string, partition int32, epoch int16, seq int32, values ...string) {
		tr.add(step, "%s", produceResult(tg.produce(ctx, vProduceTV2, &txnID, -1, topic, partition,
			batch{pid: pid, epoch: epoch, seq: seq, txn: true, baseTs: ts, values: values}.encode())))
	}
	end := func(step string, id string, pid int64, epoch int16, commit bool) {
		tr.add(step, "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, id, pid, epoch, commit), pids, e))
	}
	describe := func(step string) {
		tr.add(step, "%s", describeTxnResult(tg.describeTxn(ctx, txnID), pids, e, tg.prefix))
	}
	readCommitted := func(step string, partition int32) {
		_, p := tg.fetch(ctx, topic, partition, 0, fetchOpts{readCommitted: true})
		tr.add(step, "%s", tg.fetchResult(p, pids))
	}
	produce("produce v12 without AddPartitionsToTxn, partition 0", 0, e, 0, "a")
	produce("produce v12, partition 1", 1, e, 0, "b")
	produce("produce v12, partition 0 again", 0, e, 1, "c")
	describe("ongoing")
	readCommitted("read_committed during the transaction", 0)
	end("commit", txnID, pid, e, true)
	tg.waitTxnSettled(ctx, txnID)
	describe("after the commit")
	tg.waitStable(ctx, topic, 0)
	readCommitted("read_committed after the commit", 0)
	end("commit retried with the old epoch", txnID, pid, e, true)
	end("abort retried with the old epoch", txnID, pid, e, false)
	end("commit at the new epoch, nothing ongoing", txnID, pid, e+1, true)
	end("abort with a stale epoch", txnID, pid, e-1, false)
	end("commit with an epoch from the future", txnID, pid, e+5, true)
	end("commit with another producer id", txnID, pid+12345, e+1, true)
	end("commit of an unknown transactional id", tg.name("no-such-txn"), pid, e, true)
	end("empty abort at the new epoch", txnID, pid, e+1, false)
	tg.waitTxnSettled(ctx, txnID)
	describe("after the empty abort")
	end("empty commit", txnID, pid, e+2, true)
	end("empty abort retried", txnID, pid, e+1, false)
	produce("next transaction", 0, e+2, 0, "d")
	end("commit of the next transaction", txnID, pid, e+2, true)
	tg.waitTxnSettled(ctx, txnID)
	tg.waitStable(ctx, topic, 0)
	readCommitted("read_committed at the end", 0)
	readCommitted("read_committed at the end, partition 1", 1)
}

func scenarioTxnTV2Abort(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("tv2a")
	tg.createTopic(ctx, topic, 1)
	txnID := tg.name("tv2a-txn")
	pids := &pidNames{}
	pid, e := tg.initTxn(ctx, txnID, 60000)
	pids.name(pid)
	ts := recentTs()
	produce := func(step string, epoch int16, seq int32, values ...string) {
		tr.add(step, "%s", produceResult(tg.produce(ctx, vProduceTV2, &txnID, -1, topic, 0,
			batch{pid: pid, epoch: epoch, seq: seq, txn: true, baseTs: ts, values: values}.encode())))
	}
	end := func(step string, epoch int16, commit bool) {
		tr.add(step, "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, txnID, pid, epoch, commit), pids, e))
	}
	produce("produce", e, 0, "a", "b")
	end("abort", e, false)
	tg.waitTxnSettled(ctx, txnID)
	tr.add("after the abort", "%s", describeTxnResult(tg.describeTxn(ctx, txnID), pids, e, tg.prefix))
	end("abort retried with the old epoch", e, false)
	end("commit retried with the old epoch", e, true)
	produce("produce with the old epoch", e, 2, "late")
	tr.add("produce with another producer id", "%s", produceResult(tg.produce(ctx, vProduceTV2, &txnID, -1, topic, 0,
		batch{pid: pid + 12345, epoch: e + 1, seq: 0, txn: true, baseTs: ts, values: []string{"other"}}.encode())))
	produce("produce with the new epoch", e+1, 0, "c")
	end("commit", e+1, true)
	tg.waitTxnSettled(ctx, txnID)
	tg.waitStable(ctx, topic, 0)
	_, p := tg.fetch(ctx, topic, 0, 0, fetchOpts{readCommitted: true})
	tr.add("read_committed", "%s", tg.fetchResult(p, pids))
	tr.add("producers", "%s", tg.describeProducersResult(ctx, topic, 0, pids))
}

// addPartitions sends the client (TV1) AddPartitionsToTxn and records each
// partition's answer.
func (tg *target) addPartitions(ctx context.Context, txnID string, pid int64, epoch int16, topic string, partitions ...int32) string {
	tg.t.Helper()
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = txnID, pid, epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = topic, partitions
	req.Topics = append(req.Topics, rt)
	resp := tg.send(ctx, vAddPartitions, req).(*kmsg.AddPartitionsToTxnResponse)
	var out []string
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out = append(out, fmt.Sprintf("%d:%s", p.Partition, errName(p.ErrorCode)))
		}
	}
	sort.Strings(out) // the order of the answers means nothing
	return strings.Join(out, " ")
}

func scenarioTxnTV1(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("tv1")
	tg.createTopic(ctx, topic, 1)
	txnID := tg.name("tv1-txn")
	pids := &pidNames{}
	pid, _ := tg.initTxn(ctx, txnID, 60000)
	pids.name(pid)
	_, e := tg.initTxn(ctx, txnID, 60000) // epoch 1, so that e-1 is a real epoch
	ts := recentTs()
	produce := func(step string, seq int32, values ...string) {
		tr.add(step, "%s", produceResult(tg.produce(ctx, vProduce, &txnID, -1, topic, 0,
			batch{pid: pid, epoch: e, seq: seq, txn: true, baseTs: ts, values: values}.encode())))
	}
	end := func(step string, epoch int16, commit bool) {
		resp := tg.endTxn(ctx, vEndTxnTV1, txnID, pid, epoch, commit)
		tr.add(step, "%s", errName(resp.ErrorCode))
	}
	produce("produce v11 before AddPartitionsToTxn", 0, "a")
	tr.add("produce v10 before AddPartitionsToTxn", "%s", produceResult(tg.produce(ctx, 10, &txnID, -1, topic, 0,
		batch{pid: pid, epoch: e, seq: 0, txn: true, baseTs: ts, values: []string{"a"}}.encode())))
	tr.add("AddPartitionsToTxn v3", "%s", tg.addPartitions(ctx, txnID, pid, e, topic, 0))
	tr.add("AddPartitionsToTxn v3 again", "%s", tg.addPartitions(ctx, txnID, pid, e, topic, 0))
	tr.add("AddPartitionsToTxn v3 with a stale epoch", "%s", tg.addPartitions(ctx, txnID, pid, e-1, topic, 0))
	tr.add("AddPartitionsToTxn v3 with an unknown partition", "%s", tg.addPartitions(ctx, txnID, pid, e, topic, 0, 7))
	produce("produce v11 after AddPartitionsToTxn", 0, "a")
	tr.add("ongoing", "%s", describeTxnResult(tg.describeTxn(ctx, txnID), pids, e, tg.prefix))
	end("EndTxn v4 commit", e, true)
	tg.waitTxnSettled(ctx, txnID)
	tr.add("after the commit", "%s", describeTxnResult(tg.describeTxn(ctx, txnID), pids, e, tg.prefix))
	end("EndTxn v4 commit retried", e, true)
	end("EndTxn v4 abort after the commit", e, false)
	end("EndTxn v4 commit with an older epoch", e-1, true)
	tg.waitStable(ctx, topic, 0)
	_, p := tg.fetch(ctx, topic, 0, 0, fetchOpts{readCommitted: true})
	tr.add("read_committed", "%s", tg.fetchResult(p, pids))
	tr.add("producers", "%s", tg.describeProducersResult(ctx, topic, 0, pids))
}

func scenarioTxnTimeout(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("slow")
	tg.createTopic(ctx, topic, 1)
	txnID := tg.name("slow-txn")
	pids := &pidNames{}
	pid, e := tg.initTxn(ctx, txnID, 1000)
	pids.name(pid)
	ts := recentTs()
	tr.add("produce", "%s", produceResult(tg.produce(ctx, vProduceTV2, &txnID, -1, topic, 0,
		batch{pid: pid, epoch: e, seq: 0, txn: true, baseTs: ts, values: []string{"a"}}.encode())))
	// The real Kafka looks for timed-out transactions every 10 seconds.
	tg.retry(ctx, "the coordinator to abort the timed-out transaction", func() error {
		if st := tg.describeTxn(ctx, txnID); st.State != "CompleteAbort" {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
	tr.add("after the timeout", "%s", describeTxnResult(tg.describeTxn(ctx, txnID), pids, e, tg.prefix))
	tg.waitStable(ctx, topic, 0)
	_, p := tg.fetch(ctx, topic, 0, 0, fetchOpts{readCommitted: true})
	tr.add("read_committed", "%s", tg.fetchResult(p, pids))
	tr.add("producers", "%s", tg.describeProducersResult(ctx, topic, 0, pids))
	tr.add("the timed-out producer writes", "%s", produceResult(tg.produce(ctx, vProduceTV2, &txnID, -1, topic, 0,
		batch{pid: pid, epoch: e, seq: 1, txn: true, baseTs: ts, values: []string{"late"}}.encode())))
	tr.add("the timed-out producer commits", "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, txnID, pid, e, true), pids, e))
	tr.add("the timed-out producer aborts", "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, txnID, pid, e, false), pids, e))
	r := tg.initProducerID(ctx, vInitProducerID, &txnID, 1000, -1, -1)
	tr.add("InitProducerId", "%s id=%s epoch=%s", errName(r.ErrorCode), pids.name(r.ProducerID), relEpoch(r.ProducerEpoch, e))
}
