package differential_test

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/javahash"
)

// txnOffsetCommit commits offset for topic/0 in group inside a
// transaction, without member or generation, and returns the partition's
// answer.
func (tg *target) txnOffsetCommit(ctx context.Context, version int16, txnID, group string, pid int64, epoch int16, topic string, offset int64) string {
	tg.t.Helper()
	return tg.txnOffsetCommitAs(ctx, version, txnID, pid, epoch, group, "", -1, topic, 0, offset)
}

// txnOffsetCommitAs commits offset for topic/partition in group inside a
// transaction as member at generation (a consumer group's member epoch)
// and returns the partition's answer.
func (tg *target) txnOffsetCommitAs(ctx context.Context, version int16, txnID string, pid int64, pepoch int16, group, member string, generation int32, topic string, partition int32, offset int64) string {
	tg.t.Helper()
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group = txnID, group
	req.ProducerID, req.ProducerEpoch = pid, pepoch
	req.Generation, req.MemberID = generation, member
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = partition, offset, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := tg.send(ctx, version, req).(*kmsg.TxnOffsetCommitResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Sprintf("%d topics answered", len(resp.Topics))
	}
	return errName(resp.Topics[0].Partitions[0].ErrorCode)
}

// offsetFetch reads group's committed offset of topic/0.
func (tg *target) offsetFetch(ctx context.Context, group, topic string, requireStable bool) string {
	tg.t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.RequireStable = requireStable
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = group
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic, gt.Partitions = topic, []int32{0}
	g.Topics = append(g.Topics, gt)
	req.Groups = append(req.Groups, g)
	resp := tg.send(ctx, vOffsetFetch, req).(*kmsg.OffsetFetchResponse)
	if len(resp.Groups) != 1 {
		return fmt.Sprintf("%d groups answered", len(resp.Groups))
	}
	rg := resp.Groups[0]
	if rg.ErrorCode != 0 {
		return "group " + errName(rg.ErrorCode)
	}
	if len(rg.Topics) != 1 || len(rg.Topics[0].Partitions) != 1 {
		return fmt.Sprintf("%d topics answered", len(rg.Topics))
	}
	p := rg.Topics[0].Partitions[0]
	return fmt.Sprintf("%s offset=%d", errName(p.ErrorCode), p.Offset)
}

// addOffsets sends AddOffsetsToTxn.
func (tg *target) addOffsets(ctx context.Context, txnID, group string, pid int64, epoch int16) string {
	tg.t.Helper()
	req := kmsg.NewPtrAddOffsetsToTxnRequest()
	req.TransactionalID, req.Group = txnID, group
	req.ProducerID, req.ProducerEpoch = pid, epoch
	return errName(tg.send(ctx, vAddOffsets, req).(*kmsg.AddOffsetsToTxnResponse).ErrorCode)
}

func scenarioTxnOffsets(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("offs")
	tg.createTopic(ctx, topic, 1)
	pids := &pidNames{}

	// TV1: AddOffsetsToTxn, TxnOffsetCommit v4, EndTxn v4.
	g1, t1 := tg.name("g1"), tg.name("offs-tv1")
	pid, _ := tg.initTxn(ctx, t1, 60000)
	pids.name(pid)
	_, e := tg.initTxn(ctx, t1, 60000) // epoch 1, so that e-1 is a real epoch
	tr.add("tv1 TxnOffsetCommit before AddOffsetsToTxn", "%s", tg.txnOffsetCommit(ctx, vTxnOffsetTV1, t1, g1, pid, e, topic, 3))
	tr.add("tv1 AddOffsetsToTxn", "%s", tg.addOffsets(ctx, t1, g1, pid, e))
	tr.add("tv1 AddOffsetsToTxn with a stale epoch", "%s", tg.addOffsets(ctx, t1, g1, pid, e-1))
	tr.add("tv1 ongoing", "%s", placed(describeTxnResult(tg.describeTxn(ctx, t1), pids, e, tg.prefix), g1))
	tr.add("tv1 TxnOffsetCommit", "%s", tg.txnOffsetCommit(ctx, vTxnOffsetTV1, t1, g1, pid, e, topic, 5))
	tr.add("tv1 TxnOffsetCommit with a stale epoch", "%s", tg.txnOffsetCommit(ctx, vTxnOffsetTV1, t1, g1, pid, e-1, topic, 6))
	tr.add("tv1 offset, not requiring stable", "%s", tg.offsetFetch(ctx, g1, topic, false))
	tr.add("tv1 offset, requiring stable", "%s", tg.offsetFetch(ctx, g1, topic, true))
	tr.add("tv1 commit", "%s", errName(tg.endTxn(ctx, vEndTxnTV1, t1, pid, e, true).ErrorCode))
	tg.waitTxnSettled(ctx, t1)
	tr.add("tv1 offset after the commit", "%s", tg.offsetFetch(ctx, g1, topic, true))

	// TV2: TxnOffsetCommit v5 adds the offsets partition itself.
	g2, t2 := tg.name("g2"), tg.name("offs-tv2")
	pid2, e2 := tg.initTxn(ctx, t2, 60000)
	pids.name(pid2)
	tr.add("tv2 TxnOffsetCommit v5 without AddOffsetsToTxn", "%s", tg.txnOffsetCommit(ctx, vTxnOffsetTV2, t2, g2, pid2, e2, topic, 7))
	tr.add("tv2 ongoing", "%s", placed(describeTxnResult(tg.describeTxn(ctx, t2), pids, e2, tg.prefix), g2))
	tr.add("tv2 offset, requiring stable", "%s", tg.offsetFetch(ctx, g2, topic, true))
	tr.add("tv2 commit", "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, t2, pid2, e2, true), pids, e2))
	tg.waitTxnSettled(ctx, t2)
	tr.add("tv2 offset after the commit", "%s", tg.offsetFetch(ctx, g2, topic, true))

	// TV2 abort: the offsets are dropped.
	g3 := tg.name("g3")
	e2++
	tr.add("tv2 TxnOffsetCommit v5, to be aborted", "%s", tg.txnOffsetCommit(ctx, vTxnOffsetTV2, t2, g3, pid2, e2, topic, 9))
	tr.add("tv2 abort", "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, t2, pid2, e2, false), pids, e2))
	tg.waitTxnSettled(ctx, t2)
	tr.add("tv2 offset after the abort", "%s", tg.offsetFetch(ctx, g3, topic, true))

	// Placement of groups whose Java hash is negative, zero or positive:
	// one transaction adds the offsets partitions of several groups.
	t4 := tg.name("offs-place")
	pid4, e4 := tg.initTxn(ctx, t4, 60000)
	pids.name(pid4)
	for i := 0; i < 6; i++ {
		g := tg.name(fmt.Sprintf("place-%d", i))
		if got := tg.addOffsets(ctx, t4, g, pid4, e4); got != "OK" {
			tr.add(fmt.Sprintf("place group %d", i), "%s", got)
			continue
		}
		st := tg.describeTxn(ctx, t4)
		in := false
		for _, t := range st.Topics {
			for _, p := range t.Partitions {
				in = in || t.Topic == "__consumer_offsets" && p == javahash.Partition(g, internalPartitions)
			}
		}
		tr.add(fmt.Sprintf("place group %d", i), "OK atKafkaHash=%t", in)
	}
	tr.add("tv2 TxnOffsetCommit v5 with the fenced epoch", "%s", tg.txnOffsetCommit(ctx, vTxnOffsetTV2, t2, g3, pid2, e2, topic, 11))
}

// listTxns lists transactions with the given filters and records the ones
// of this run (by prefix).
func (tg *target) listTxns(ctx context.Context, pids *pidNames, states []string, pid int64, durationMs int64, pattern *string) string {
	tg.t.Helper()
	req := kmsg.NewPtrListTransactionsRequest()
	req.StateFilters = states
	if pid >= 0 {
		req.ProducerIDFilters = []int64{pid}
	}
	req.DurationFilterMillis = durationMs
	req.TransactionalIDPattern = pattern
	resp := tg.send(ctx, vListTxns, req).(*kmsg.ListTransactionsResponse)
	var out []string
	for _, st := range resp.TransactionStates {
		if !strings.HasPrefix(st.TransactionalID, tg.prefix) {
			continue
		}
		out = append(out, fmt.Sprintf("%s:%s:%s", strings.TrimPrefix(st.TransactionalID, tg.prefix), st.TransactionState, pids.name(st.ProducerID)))
	}
	sort.Strings(out)
	return fmt.Sprintf("%s unknownStates=%v txns=[%s]", errName(resp.ErrorCode), resp.UnknownStateFilters, strings.Join(out, " "))
}

func scenarioTxnAdmin(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("adm")
	tg.createTopic(ctx, topic, 2)
	txnID := tg.name("adm-txn")
	pids := &pidNames{}
	pid, e := tg.initTxn(ctx, txnID, 45000)
	pids.name(pid)
	idem, idemEpoch := tg.idempotentPID(ctx)
	pids.name(idem)
	ts := recentTs()
	tg.mustProduce(ctx, vProduceTV2, &txnID, topic, 0, batch{pid: pid, epoch: e, seq: 0, txn: true, baseTs: ts, values: []string{"a", "b"}})
	tg.mustProduce(ctx, vProduce, nil, topic, 1, batch{pid: idem, epoch: idemEpoch, seq: 0, baseTs: ts, values: []string{"i", "j", "k"}})

	describe := func(ids ...string) string {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = ids
		resp := tg.send(ctx, vDescribeTxns, req).(*kmsg.DescribeTransactionsResponse)
		var out []string
		for _, st := range resp.TransactionStates {
			out = append(out, strings.TrimPrefix(st.TransactionalID, tg.prefix)+"="+describeTxnResult(st, pids, e, tg.prefix))
		}
		return strings.Join(out, "; ")
	}
	tr.add("describe ongoing, unknown and empty ids", "%s", describe(txnID, tg.name("nope"), ""))
	tr.add("list by producer id", "%s", tg.listTxns(ctx, pids, nil, pid, -1, nil))
	tr.add("list Ongoing by producer id", "%s", tg.listTxns(ctx, pids, []string{"Ongoing"}, pid, -1, nil))
	tr.add("list CompleteCommit by producer id", "%s", tg.listTxns(ctx, pids, []string{"CompleteCommit"}, pid, -1, nil))
	tr.add("list with an unknown state", "%s", tg.listTxns(ctx, pids, []string{"Bogus"}, pid, -1, nil))
	tr.add("list with an unknown and a known state", "%s", tg.listTxns(ctx, pids, []string{"Bogus", "Ongoing"}, pid, -1, nil))
	tr.add("list running longer than an hour", "%s", tg.listTxns(ctx, pids, nil, pid, 3600000, nil))
	pattern := tg.prefix + "adm-.*"
	tr.add("list by pattern", "%s", tg.listTxns(ctx, pids, nil, -1, -1, &pattern))
	bad := "adm-("
	tr.add("list by an invalid pattern", "%s", tg.listTxns(ctx, pids, nil, -1, -1, &bad))

	producers := func() string {
		req := kmsg.NewPtrDescribeProducersRequest()
		rt := kmsg.NewDescribeProducersRequestTopic()
		rt.Topic, rt.Partitions = topic, []int32{0, 1, 7}
		req.Topics = append(req.Topics, rt)
		unknown := kmsg.NewDescribeProducersRequestTopic()
		unknown.Topic, unknown.Partitions = tg.name("nope"), []int32{0}
		req.Topics = append(req.Topics, unknown)
		resp := tg.send(ctx, vDescribeProds, req).(*kmsg.DescribeProducersResponse)
		var out []string
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				s := fmt.Sprintf("%s/%d:%s", strings.TrimPrefix(t.Topic, tg.prefix), p.Partition, errName(p.ErrorCode))
				for _, ap := range p.ActiveProducers {
					coord := "none"
					if ap.CoordinatorEpoch >= 0 {
						coord = "set"
					}
					s += fmt.Sprintf(" %s{epoch=%d lastSeq=%d txnStart=%d coordinatorEpoch=%s}", pids.name(ap.ProducerID),
						ap.ProducerEpoch, ap.LastSequence, ap.CurrentTxnStartOffset, coord)
				}
				out = append(out, s)
			}
		}
		return strings.Join(out, "; ")
	}
	tr.add("producers during the transaction", "%s", producers())

	tr.add("commit", "%s", endTxnResult(tg.endTxn(ctx, vEndTxnTV2, txnID, pid, e, true), pids, e))
	tg.waitTxnSettled(ctx, txnID)
	tr.add("describe after the commit", "%s", describe(txnID))
	tr.add("list CompleteCommit after the commit", "%s", tg.listTxns(ctx, pids, []string{"CompleteCommit"}, pid, -1, nil))
	tr.add("producers after the commit", "%s", producers())
}

// placed rewrites the group's __consumer_offsets partition in a recorded
// answer as "hash(group)" when it is where Kafka's hash puts it: the group
// names, and so the partitions, differ between the targets.
func placed(s, group string) string {
	p := fmt.Sprintf("__consumer_offsets[%d]", javahash.Partition(group, internalPartitions))
	return strings.ReplaceAll(s, p, "__consumer_offsets[hash(group)]")
}
