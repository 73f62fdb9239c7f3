package differential_test

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/testkit"
)

// scenarioShareDLQ compares the share-group dead-letter queue (KIP-1191):
// which archived records reach the group's DLQ topic (REJECT and the
// delivery limit, by RELEASE or by lock expiry, do; ACCEPT does not), on
// which of its partitions (the source partition modulo their count), the
// DLQ records' key, value and headers (copy.record.enable on and off), the
// config refusals, and the cases that write nothing while the record is
// archived all the same: no DLQ configured, a topic without
// errors.deadletterqueue.group.enable, a name without the "dlq." prefix, a
// missing topic (kafka.sh leaves
// errors.deadletterqueue.auto.create.topics.enable at false, so the real
// Kafka creates none). That nothing was written is shown by a later record
// of the same share-partition that does arrive: the DLQ writes of one
// share-partition are made in order. Header values naming the run's topic
// and group are shown without the run's prefix; timestamps are not shown.
func scenarioShareDLQ(ctx context.Context, tg *target, tr *transcript) {
	alter := func(step, group, name, value string) {
		tr.add(step, "%s", tg.alterGroupConfig(ctx, group, 0, name, kmsg.StringPtr(value), false))
	}
	dlq := "dlq." + tg.name("dlq")
	tr.add("create the DLQ topic", "%s", tg.createTopicWith(ctx, dlq, 1, "errors.deadletterqueue.group.enable", "true"))
	disabled := "dlq." + tg.name("dlq-off")
	tr.add("create a topic not enabled as a DLQ", "%s", tg.createTopicWith(ctx, disabled, 1))
	unprefixed := tg.name("dlq-noprefix")
	tr.add("create an enabled topic without the prefix", "%s", tg.createTopicWith(ctx, unprefixed, 1, "errors.deadletterqueue.group.enable", "true"))

	// The config refusals.
	g := tg.name("dlq-config")
	alter("config: a name starting with __", g, "errors.deadletterqueue.topic.name", "__dlq")
	alter("config: a name without the prefix", g, "errors.deadletterqueue.topic.name", "nodlq")
	alter("config: a missing topic", g, "errors.deadletterqueue.topic.name", "dlq.missing")
	alter("config: copy not a boolean", g, "errors.deadletterqueue.copy.record.enable", "yes")
	tr.add("config: described", "%s", tg.groupConfigsSettled(ctx, g, []string{"errors.deadletterqueue.topic.name", "errors.deadletterqueue.copy.record.enable"}, "dlq.missing"))

	src := tg.name("dlq-src")
	tg.createTopic(ctx, src, 1)
	tg.produceKeyed(ctx, src, 0, "a", "b", "c", "d")
	var n int
	group := func(configs ...string) (string, *testkit.ShareMember) {
		n++
		name := tg.name(fmt.Sprintf("dlq-g%d", n))
		tg.alterGroupConfig(ctx, name, 0, "share.auto.offset.reset", kmsg.StringPtr("earliest"), false)
		tg.alterGroupConfig(ctx, name, 0, "share.record.lock.duration.ms", kmsg.StringPtr("60000"), false)
		for i := 0; i+1 < len(configs); i += 2 {
			tr.add(fmt.Sprintf("g%d: set %s", n, configs[i]), "%s", tg.alterGroupConfig(ctx, name, 0, configs[i], kmsg.StringPtr(configs[i+1]), false))
			tg.dlqConfigSettled(ctx, name, configs[i], configs[i+1])
		}
		return name, testkit.JoinShare(ctx, tg.t, tg.seeds, name, src, 0)
	}
	ack := func(step string, m *testkit.ShareMember, first, last int64, typ int8) {
		top, part := m.Acknowledge(ctx, false, testkit.Ack(first, last, typ))
		tr.add(step, "%s/%s", errName(top), errName(part))
	}
	acquire := func(step string, m *testkit.ShareMember) {
		tr.add(step, "%s", testkit.FormatDeliveries(m.Acquire(ctx)))
	}
	dlqHas := func(step string, want int) {
		tr.add(step, "%s", tg.eventually(ctx, func() string { return tg.dlqRecords(ctx, dlq, 0) }, func(s string) bool {
			return strings.Count(s, "\n  ") >= want
		}))
	}

	// REJECT, ACCEPT, RELEASE and the delivery limit, copying the record.
	_, m := group("errors.deadletterqueue.topic.name", dlq, "errors.deadletterqueue.copy.record.enable", "true", "share.delivery.count.limit", "2")
	acquire("g1: first delivery", m)
	ack("g1: reject 0", m, 0, 0, testkit.AckReject)
	ack("g1: accept 1", m, 1, 1, testkit.AckAccept)
	ack("g1: release 2-3", m, 2, 3, testkit.AckRelease)
	acquire("g1: second delivery", m)
	ack("g1: release 2-3 at the limit", m, 2, 3, testkit.AckRelease)
	dlqHas("g1: the DLQ", 3)

	// Without the copy: headers only.
	_, m = group("errors.deadletterqueue.topic.name", dlq)
	acquire("g2: first delivery", m)
	ack("g2: reject 1", m, 1, 1, testkit.AckReject)
	dlqHas("g2: the DLQ", 4)

	// Cases that write nothing, each followed by a record that arrives.
	for _, c := range []struct{ what, topic string }{
		{"no DLQ", ""},
		{"not enabled", disabled},
		{"no prefix", unprefixed},
		{"missing", "dlq." + tg.name("dlq-missing")},
	} {
		var configs []string
		if c.topic != "" {
			configs = []string{"errors.deadletterqueue.topic.name", c.topic}
		}
		name, m := group(configs...)
		acquire(c.what+": first delivery", m)
		ack(c.what+": reject 0", m, 0, 0, testkit.AckReject)
		tg.alterGroupConfig(ctx, name, 0, "errors.deadletterqueue.topic.name", kmsg.StringPtr(dlq), false)
		tg.dlqConfigSettled(ctx, name, "errors.deadletterqueue.topic.name", dlq)
		ack(c.what+": reject 1 with the DLQ", m, 1, 1, testkit.AckReject)
	}
	dlqHas("the DLQ after the cases that write nothing", 8)
	for _, topic := range []string{disabled, unprefixed} {
		tr.add("nothing in "+strings.ReplaceAll(topic, tg.prefix, ""), "%s", tg.dlqRecords(ctx, topic, 0))
	}

	// Lock expiry at the delivery limit (kafka.sh lowers Kafka's lock
	// floor to 1 s).
	_, m = group("errors.deadletterqueue.topic.name", dlq, "share.delivery.count.limit", "2", "share.record.lock.duration.ms", "1000")
	acquire("expiry: first delivery", m)
	acquire("expiry: second delivery, after the lock expired", m)
	dlqHas("expiry: the DLQ after the second lock expired", 12)

	// The DLQ partition is the source partition modulo the DLQ's count.
	src2 := tg.name("dlq-src2")
	tg.createTopic(ctx, src2, 4)
	tg.produceKeyed(ctx, src2, 3, "p3")
	dlq2 := "dlq." + tg.name("dlq2")
	tr.add("create a DLQ topic of 2 partitions", "%s", tg.createTopicWith(ctx, dlq2, 2, "errors.deadletterqueue.group.enable", "true"))
	g2p := tg.name("dlq-2p")
	tg.alterGroupConfig(ctx, g2p, 0, "share.auto.offset.reset", kmsg.StringPtr("earliest"), false)
	tg.alterGroupConfig(ctx, g2p, 0, "errors.deadletterqueue.topic.name", kmsg.StringPtr(dlq2), false)
	tg.dlqConfigSettled(ctx, g2p, "errors.deadletterqueue.topic.name", dlq2)
	m = testkit.JoinShare(ctx, tg.t, tg.seeds, g2p, src2, 3)
	acquire("partition 3: delivery", m)
	ack("partition 3: reject 0", m, 0, 0, testkit.AckReject)
	tr.add("partition 3: DLQ partition 1", "%s", tg.eventually(ctx, func() string { return tg.dlqRecords(ctx, dlq2, 1) }, func(s string) bool {
		return strings.Count(s, "\n  ") >= 1
	}))
	tr.add("partition 3: DLQ partition 0", "%s", tg.dlqRecords(ctx, dlq2, 0))

	missing := tg.metadataTopic(ctx, "dlq."+tg.name("dlq-missing"), false)
	tr.add("the missing topic was not created", "%s", errName(missing.ErrorCode))
}

// dlqConfigSettled waits until the group describes name=value: the real
// Kafka applies a group config through its metadata log, so a share
// partition can act on the old value for a moment after the alteration
// was answered.
func (tg *target) dlqConfigSettled(ctx context.Context, group, name, value string) {
	tg.t.Helper()
	tg.groupConfigsSettled(ctx, group, []string{name}, name+"="+value+"(")
}

// produceKeyed writes one record per value to a partition of topic, keyed
// "k-"+value and with a header h=x, through a kgo producer.
func (tg *target) produceKeyed(ctx context.Context, topic string, partition int32, values ...string) {
	tg.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(tg.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		tg.t.Fatal(err)
	}
	defer cl.Close()
	for _, v := range values {
		r := &kgo.Record{Topic: topic, Partition: partition, Key: []byte("k-" + v), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			tg.t.Fatalf("%s: produce to %s: %v", tg.kind, topic, err)
		}
	}
}

// dlqRecords lists the records of a partition of topic, one a line: offset,
// key, value and headers (sorted by key), with the run's prefix taken out
// of the header values.
func (tg *target) dlqRecords(ctx context.Context, topic string, partition int32) string {
	tg.t.Helper()
	_, p := tg.fetch(ctx, topic, partition, 0, fetchOpts{})
	if p.ErrorCode != 0 {
		return errName(p.ErrorCode)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "hwm=%d\n", p.HighWatermark)
	raw := p.RecordBatches
	for len(raw) >= 61 {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(raw); err != nil {
			tg.t.Fatalf("%s: %s: batch: %v", tg.kind, topic, err)
		}
		raw = raw[int(rb.Length)+12:]
		if rb.Attributes&0x7 != 0 {
			tg.t.Fatalf("%s: %s: compressed batch", tg.kind, topic)
		}
		src := rb.Records
		for i := int32(0); i < rb.NumRecords; i++ {
			length, n := kbin.Varint(src)
			if n == 0 || int(length)+n > len(src) {
				tg.t.Fatalf("%s: %s: record %d does not decode", tg.kind, topic, i)
			}
			var r kmsg.Record
			if err := r.ReadFrom(src[:n+int(length)]); err != nil {
				tg.t.Fatalf("%s: %s: record %d: %v", tg.kind, topic, i, err)
			}
			src = src[n+int(length):]
			str := func(v []byte) string {
				if v == nil {
					return "null"
				}
				return fmt.Sprintf("%q", v)
			}
			var hs []string
			for _, h := range r.Headers {
				hs = append(hs, h.Key+"="+strings.ReplaceAll(string(h.Value), tg.prefix, ""))
			}
			sort.Strings(hs)
			fmt.Fprintf(&b, "  %d key=%s value=%s headers=[%s]\n", rb.FirstOffset+int64(r.OffsetDelta), str(r.Key), str(r.Value), strings.Join(hs, " "))
		}
	}
	return b.String()
}
