package differential_test

// max.message.bytes: the topic config and the broker default
// (message.max.bytes, 1048588) enforced on produce.

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// sizedBatch returns a one-record batch of exactly size bytes, its 12-byte
// log overhead included, as Kafka counts a batch against
// max.message.bytes.
func sizedBatch(tg *target, ts int64, size int) []byte {
	tg.t.Helper()
	for n := max(0, size-80); n <= size; n++ {
		if b := plain(ts, strings.Repeat("x", n)).encode(); len(b) == size {
			return b
		}
	}
	tg.t.Fatalf("no one-record batch has %d bytes", size)
	return nil
}

// createTopicWith creates a topic with configs (name, value pairs) and
// waits for it.
func (tg *target) createTopicWith(ctx context.Context, topic string, partitions int32, configs ...string) string {
	tg.t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	for i := 0; i+1 < len(configs); i += 2 {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = configs[i], kmsg.StringPtr(configs[i+1])
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp := tg.send(ctx, vCreateTopics, req).(*kmsg.CreateTopicsResponse)
	if code := resp.Topics[0].ErrorCode; code != 0 {
		return errName(code)
	}
	tg.waitTopic(ctx, topic, partitions)
	return "OK"
}

func scenarioProduceMessageSize(ctx context.Context, tg *target, tr *transcript) {
	ts := recentTs()
	small := tg.name("small")
	tr.add("create with max.message.bytes=1000", "%s", tg.createTopicWith(ctx, small, 2, "max.message.bytes", "1000"))
	send := func(step, topic string, partition int32, records []byte) {
		tr.add(step, "%s", produceResult(tg.produce(ctx, vProduce, nil, -1, topic, partition, records)))
	}
	send("a batch of exactly the limit", small, 0, sizedBatch(tg, ts, 1000))
	send("one byte over", small, 0, sizedBatch(tg, ts, 1001))
	send("over the limit with a bad CRC", small, 0, withBadCRC(sizedBatch(tg, ts, 1500)))
	send("under the limit with a bad CRC", small, 0, withBadCRC(sizedBatch(tg, ts, 500)))

	// One request, two partitions: each batch is judged on its own.
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = small
	for p, size := range []int{2000, 900} {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = int32(p), sizedBatch(tg, ts, size)
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp := tg.send(ctx, vProduce, req).(*kmsg.ProduceResponse)
	// Kafka answers the partitions in no particular order.
	var answers []string
	for _, sp := range resp.Topics[0].Partitions {
		answers = append(answers, fmt.Sprintf("%d:%s", sp.Partition, produceResult(sp)))
	}
	sort.Strings(answers)
	tr.add("two partitions, one batch too large", "%s", strings.Join(answers, "; "))
	for p := int32(0); p < 2; p++ {
		tr.add(fmt.Sprintf("end offset of partition %d", p), "%s", listOffsetResult(tg.listOffset(ctx, small, p, -1, 0, -1)))
	}

	def := tg.name("default-size")
	tg.createTopic(ctx, def, 1)
	send("the broker default, exactly", def, 0, sizedBatch(tg, ts, 1048588))
	send("the broker default, one byte over", def, 0, sizedBatch(tg, ts, 1048589))
	tr.add("end offset of the default topic", "%s", listOffsetResult(tg.listOffset(ctx, def, 0, -1, 0, -1)))
}
