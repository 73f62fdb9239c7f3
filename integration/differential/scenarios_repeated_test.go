package differential_test

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const vDeleteRecords = 2

// scenarioRepeatedPartitions names one partition more than once in
// ListOffsets (INVALID_REQUEST for it), Fetch and Produce (read as a map:
// answered once, with the last mention's parameters), and DeleteRecords.
func scenarioRepeatedPartitions(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("dups")
	tg.createTopic(ctx, topic, 2)
	ts := recentTs()
	for i := 0; i < 3; i++ {
		tg.mustProduce(ctx, vProduce, nil, topic, 1, plain(ts, fmt.Sprintf("v%d", i)))
	}

	listOffsets := func(step string, shape [][]int32) {
		req := kmsg.NewPtrListOffsetsRequest()
		for _, parts := range shape {
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = topic
			for _, p := range parts {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		resp := tg.send(ctx, vListOffsets, req).(*kmsg.ListOffsetsResponse)
		var out []string
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				out = append(out, fmt.Sprintf("p%d:%s", rp.Partition, listOffsetResult(rp)))
			}
		}
		sort.Strings(out) // Kafka groups them through a hash map
		tr.add(step, "topics=%d %s", len(resp.Topics), strings.Join(out, " "))
	}
	listOffsets("list offsets, partition 0 twice in one topic entry", [][]int32{{0, 1, 0}})
	listOffsets("list offsets, partition 1 in two topic entries", [][]int32{{1}, {0}, {1}})
	listOffsets("list offsets, no partition twice, two topic entries", [][]int32{{1}, {0}})

	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxBytes, fetch.MinBytes = 1<<20, 1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	for _, offset := range []int64{0, 2} {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 1, offset, 1<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	fetch.Topics = append(fetch.Topics, rt)
	fresp := tg.send(ctx, vFetch, fetch).(*kmsg.FetchResponse)
	var fetched []string
	for _, t := range fresp.Topics {
		for _, p := range t.Partitions {
			fetched = append(fetched, tg.fetchResult(p, &pidNames{}))
		}
	}
	tr.add("fetch, partition 1 from offsets 0 and then 2", "answers=%d %s", len(fetched), strings.Join(fetched, " | "))

	produce := kmsg.NewPtrProduceRequest()
	produce.Acks, produce.TimeoutMillis = -1, 5000
	prt := kmsg.NewProduceRequestTopic()
	prt.Topic = topic
	for _, v := range []string{"first", "last"} {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = 0, plain(ts, v).encode()
		prt.Partitions = append(prt.Partitions, rp)
	}
	produce.Topics = append(produce.Topics, prt)
	presp := tg.send(ctx, vProduce, produce).(*kmsg.ProduceResponse)
	answers := 0
	for _, t := range presp.Topics {
		for _, p := range t.Partitions {
			answers++
			tr.add("produce, partition 0 twice", "%s", produceResult(p))
		}
	}
	tr.add("produce, partition 0 twice: answers", "%d", answers)
	_, p := tg.fetch(ctx, topic, 0, 0, fetchOpts{})
	tr.add("produce, partition 0 twice: what was appended", "%s", tg.fetchResult(p, &pidNames{}))
}

// scenarioFetchLimits: only the first partition with data may exceed the
// byte limits (KIP-74); the others get what fits.
func scenarioFetchLimits(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("limits")
	tg.createTopic(ctx, topic, 2)
	ts := recentTs()
	for p := int32(0); p < 2; p++ {
		tg.mustProduce(ctx, vProduce, nil, topic, p, plain(ts, "one", "batch"))
		tg.mustProduce(ctx, vProduce, nil, topic, p, plain(ts, "another"))
	}
	fetch := func(step string, maxBytes, partitionMaxBytes int32) {
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes, req.MinBytes = maxBytes, 1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		for p := int32(0); p < 2; p++ {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = p, partitionMaxBytes, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp := tg.send(ctx, vFetch, req).(*kmsg.FetchResponse)
		var out []string
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				out = append(out, fmt.Sprintf("p%d:%s", p.Partition, tg.fetchResult(p, &pidNames{})))
			}
		}
		tr.add(step, "%s", strings.Join(out, " | "))
	}
	fetch("fetch max bytes 10", 10, 1<<20)
	fetch("partition max bytes 10", 1<<20, 10)
	fetch("both large", 1<<20, 1<<20)
}

// scenarioDeleteRecords moves a partition's log start with DeleteRecords
// and reads around it.
func scenarioDeleteRecords(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("dr")
	tg.createTopic(ctx, topic, 2)
	ts := recentTs()
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ts, "a", "b", "c"))
	tg.mustProduce(ctx, vProduce, nil, topic, 0, plain(ts, "d", "e"))
	tg.mustProduce(ctx, vProduce, nil, topic, 1, plain(ts, "x"))
	del := func(step string, targets ...struct {
		topic     string
		partition int32
		offset    int64
	}) {
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.TimeoutMillis = 5000
		for _, d := range targets {
			rt := kmsg.NewDeleteRecordsRequestTopic()
			rt.Topic = d.topic
			rp := kmsg.NewDeleteRecordsRequestTopicPartition()
			rp.Partition, rp.Offset = d.partition, d.offset
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		resp := tg.send(ctx, vDeleteRecords, req).(*kmsg.DeleteRecordsResponse)
		var out []string
		for _, rt := range resp.Topics {
			name := strings.TrimPrefix(rt.Topic, tg.prefix)
			for _, rp := range rt.Partitions {
				out = append(out, fmt.Sprintf("%s/%d:%s low=%d", name, rp.Partition, errName(rp.ErrorCode), rp.LowWatermark))
			}
		}
		sort.Strings(out)
		tr.add(step, "%s", strings.Join(out, " "))
	}
	type target = struct {
		topic     string
		partition int32
		offset    int64
	}
	del("inside the first batch", target{topic, 0, 1})
	_, p := tg.fetch(ctx, topic, 0, 0, fetchOpts{})
	tr.add("fetch below the log start", "%s", tg.fetchResult(p, &pidNames{}))
	_, p = tg.fetch(ctx, topic, 0, 1, fetchOpts{})
	tr.add("fetch at the log start", "%s", tg.fetchResult(p, &pidNames{}))
	tr.add("earliest offset", "%s", listOffsetResult(tg.listOffset(ctx, topic, 0, -2, 0, -1)))
	del("below the log start", target{topic, 0, 0})
	del("past the first batch", target{topic, 0, 3})
	_, p = tg.fetch(ctx, topic, 0, 3, fetchOpts{})
	tr.add("fetch after the first batch went", "%s", tg.fetchResult(p, &pidNames{}))
	del("past the high watermark", target{topic, 0, 6})
	del("the high watermark (-1)", target{topic, 0, -1})
	del("below -1", target{topic, 1, -2})
	del("unknown partition", target{topic, 5, 0})
	del("unknown topic", target{tg.name("nope"), 0, 0})
	del("internal topic", target{"__consumer_offsets", 0, 0})
	del("partition named twice", target{topic, 1, 1}, target{topic, 1, 0})
	tr.add("earliest offset of partition 1", "%s", listOffsetResult(tg.listOffset(ctx, topic, 1, -2, 0, -1)))
}
