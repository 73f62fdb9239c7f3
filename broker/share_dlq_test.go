package broker

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// dlqCreateTopic creates a topic with configs (name, value pairs) through
// the wire.
func dlqCreateTopic(t *testing.T, cl *kgo.Client, name string, partitions int32, configs ...string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	for i := 0; i+1 < len(configs); i += 2 {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = configs[i], kmsg.StringPtr(configs[i+1])
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
}

// dlqProduce writes one record with a key and a header per value to
// partition 0 of topic.
func dlqProduce(t *testing.T, cl *kgo.Client, topic string, values ...string) {
	t.Helper()
	for _, v := range values {
		r := &kgo.Record{Topic: topic, Key: []byte("k-" + v), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}
		require.NoError(t, cl.ProduceSync(testCtx(t), r).FirstErr())
	}
}

// dlqRecords returns what the partitions of topic hold, in order; the
// bundled broker writes dead-letter records before the acknowledgement
// is answered, so what a test reads after it is complete.
func dlqRecords(t *testing.T, c *Cluster, topic string) []*kmsg.Record {
	t.Helper()
	var out []*kmsg.Record
	require.NoError(t, c.do(func() {
		tp := c.topics[topic]
		if tp == nil {
			return
		}
		for _, p := range tp.partitions {
			for _, b := range p.batches {
				var rb kmsg.RecordBatch
				require.NoError(t, rb.ReadFrom(b.raw))
				src := rb.Records
				for i := int32(0); i < rb.NumRecords; i++ {
					length, n := kbin.Varint(src)
					r := new(kmsg.Record)
					require.NoError(t, r.ReadFrom(src[:n+int(length)]))
					src = src[n+int(length):]
					out = append(out, r)
				}
			}
		}
	}))
	return out
}

func dlqHeaderMap(r *kmsg.Record) map[string]string {
	out := map[string]string{}
	for _, h := range r.Headers {
		out[h.Key] = string(h.Value)
	}
	return out
}

// dlqSetup makes topic t with two records (key k-a/k-b, header h) and a
// member of group g, earliest, that has acquired both.
func dlqSetup(t *testing.T, opts ...Opt) (*Cluster, *kgo.Client, *rawShareMember) {
	t.Helper()
	c := newTestCluster(t, opts...)
	cl := newTestClient(t, c)
	createTopic(t, c, "t", 1)
	dlqProduce(t, cl, "t", "a", "b")
	shareSetGroupConfigs(t, cl, "g", "share.auto.offset.reset", "earliest")
	m := shareJoin(t, c, "g", "m1", "t")
	require.Len(t, shareAcquireEventually(t, m, "t", 0), 2)
	return c, cl, m
}

func TestShareDLQRejectWritesRecord(t *testing.T) {
	c, cl, m := dlqSetup(t)
	dlqCreateTopic(t, cl, "dlq.t", 1, "errors.deadletterqueue.group.enable", "true")
	shareSetGroupConfigs(t, cl, "g", "errors.deadletterqueue.topic.name", "dlq.t", "errors.deadletterqueue.copy.record.enable", "true")

	require.NoError(t, m.acknowledge("t", 0, 0, 0, wire.AckReject))
	require.NoError(t, m.acknowledge("t", 0, 1, 1, wire.AckAccept))

	recs := dlqRecords(t, c, "dlq.t")
	require.Len(t, recs, 1, "only the rejected record")
	require.Equal(t, map[string]string{
		"__dlq.errors.topic":          "t",
		"__dlq.errors.partition":      "0",
		"__dlq.errors.offset":         "0",
		"__dlq.errors.group":          "g",
		"__dlq.errors.delivery.count": "1",
		"__dlq.errors.message":        "Offset rejected by client.",
	}, dlqHeaderMap(recs[0]), "the context headers, and not the original record's")
	require.Equal(t, "k-a", string(recs[0].Key), "copy.record.enable copies the key")
	require.Equal(t, "a", string(recs[0].Value), "and the value")
	require.Equal(t, map[shareRecordState]int{}, shareRecordStates(t, c, "g", "t", 0), "both done: the start offset passed them")
}

func TestShareDLQDeliveryLimitWritesRecord(t *testing.T) {
	c, cl, m := dlqSetup(t)
	dlqCreateTopic(t, cl, "dlq.t", 3, "errors.deadletterqueue.group.enable", "true")
	shareSetGroupConfigs(t, cl, "g", "errors.deadletterqueue.topic.name", "dlq.t", "share.delivery.count.limit", "2")

	require.NoError(t, m.acknowledge("t", 0, 0, 1, wire.AckRelease))
	require.Equal(t, map[int64]int16{0: 2, 1: 2}, shareAcquireEventually(t, m, "t", 0))
	require.Empty(t, dlqRecords(t, c, "dlq.t"), "released below the limit: nothing yet")
	require.NoError(t, m.acknowledge("t", 0, 0, 0, wire.AckRelease))
	require.NoError(t, m.acknowledge("t", 0, 1, 1, wire.AckGap))

	recs := dlqRecords(t, c, "dlq.t")
	require.Len(t, recs, 1, "the record released at the limit; GAP writes none")
	h := dlqHeaderMap(recs[0])
	require.Equal(t, "0", h["__dlq.errors.offset"])
	require.Equal(t, "2", h["__dlq.errors.delivery.count"])
	require.Equal(t, "Offset delivery count exceeded the threshold.", h["__dlq.errors.message"])
	require.Nil(t, recs[0].Key, "copy.record.enable defaults to false: headers only")
	require.Nil(t, recs[0].Value)
	var onPartition0 int64
	require.NoError(t, c.do(func() { onPartition0 = c.topics["dlq.t"].partitions[0].endOffset() }))
	require.Equal(t, int64(1), onPartition0, "source partition 0 modulo 3 partitions")
}

func TestShareDLQSessionCloseAtLimitWritesRecord(t *testing.T) {
	c, cl, m := dlqSetup(t)
	dlqCreateTopic(t, cl, "dlq.t", 1, "errors.deadletterqueue.group.enable", "true")
	shareSetGroupConfigs(t, cl, "g", "errors.deadletterqueue.topic.name", "dlq.t", "share.delivery.count.limit", "2")
	require.NoError(t, m.acknowledge("t", 0, 0, 1, wire.AckRelease))
	require.Len(t, shareAcquireEventually(t, m, "t", 0), 2)
	require.NoError(t, m.closeSession(m.leader("t", 0)), "closing the session releases its records at the limit")
	shareEventually(t, testCtx(t), "two dead-letter records", func() bool { return len(dlqRecords(t, c, "dlq.t")) == 2 })
	recs := dlqRecords(t, c, "dlq.t")
	for i, r := range recs {
		h := dlqHeaderMap(r)
		require.Equal(t, []string{"0", "1"}[i], h["__dlq.errors.offset"])
		require.Equal(t, "Offset delivery count exceeded the threshold.", h["__dlq.errors.message"])
	}
}

func TestShareDLQNotWritten(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []Opt
		topic string // the group's errors.deadletterqueue.topic.name
		make  []string
	}{
		{name: "no DLQ configured", topic: "", make: []string{"dlq.t", "errors.deadletterqueue.group.enable", "true"}},
		{name: "the prefix is missing", topic: "other.t", make: []string{"other.t", "errors.deadletterqueue.group.enable", "true"}},
		{name: "the topic is not enabled", topic: "dlq.t", make: []string{"dlq.t"}},
		{name: "the topic is missing and auto-creation is off", topic: "dlq.t"},
		{name: "share.version=1", opts: []Opt{ShareTxnAPIs(false)}, topic: "dlq.t", make: []string{"dlq.t", "errors.deadletterqueue.group.enable", "true"}},
		{name: "an explicit prefix is missing", opts: []Opt{DLQTopicNamePrefix("dead.")}, topic: "dlq.t", make: []string{"dlq.t", "errors.deadletterqueue.group.enable", "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, cl, m := dlqSetup(t, tc.opts...)
			if tc.make != nil {
				dlqCreateTopic(t, cl, tc.make[0], 1, tc.make[1:]...)
			}
			if tc.topic != "" {
				shareSetGroupConfigs(t, cl, "g", "errors.deadletterqueue.topic.name", tc.topic)
			}
			require.NoError(t, m.acknowledge("t", 0, 0, 1, wire.AckReject))
			require.Equal(t, map[shareRecordState]int{}, shareRecordStates(t, c, "g", "t", 0), "archived all the same")
			for _, name := range []string{"dlq.t", "other.t"} {
				require.Empty(t, dlqRecords(t, c, name), name)
			}
			var exists bool
			require.NoError(t, c.do(func() { exists = c.topics["dlq.t"] != nil }))
			require.Equal(t, tc.make != nil && tc.make[0] == "dlq.t", exists, "no topic is created")
		})
	}
}

func TestShareDLQEmptyPrefixAllowsAnyName(t *testing.T) {
	c, cl, m := dlqSetup(t, DLQTopicNamePrefix(""))
	dlqCreateTopic(t, cl, "anything", 1, "errors.deadletterqueue.group.enable", "true")
	shareSetGroupConfigs(t, cl, "g", "errors.deadletterqueue.topic.name", "anything")
	require.NoError(t, m.acknowledge("t", 0, 0, 1, wire.AckReject))
	require.Len(t, dlqRecords(t, c, "anything"), 2)
}

func TestShareDLQAutoCreatesTopic(t *testing.T) {
	c, cl, m := dlqSetup(t, DLQAutoCreateTopics(true), DefaultPartitions(2))
	shareSetGroupConfigs(t, cl, "g", "errors.deadletterqueue.topic.name", "dlq.auto")
	require.NoError(t, m.acknowledge("t", 0, 1, 1, wire.AckReject))
	recs := dlqRecords(t, c, "dlq.auto")
	require.Len(t, recs, 1)
	require.Equal(t, "1", dlqHeaderMap(recs[0])["__dlq.errors.offset"])
	var configs map[string]string
	var partitions int
	require.NoError(t, c.do(func() {
		configs, partitions = c.topics["dlq.auto"].configs, len(c.topics["dlq.auto"].partitions)
	}))
	require.Equal(t, 2, partitions, "the default partition count")
	require.Equal(t, map[string]string{"errors.deadletterqueue.group.enable": "true", "message.timestamp.type": "CreateTime"}, configs)
}

func TestShareDLQGroupConfigValidation(t *testing.T) {
	c := newTestCluster(t)
	cl := newTestClient(t, c)
	require.ErrorIs(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpSet, "errors.deadletterqueue.topic.name", "__dlq"), kerr.InvalidConfig)
	require.ErrorIs(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpSet, "errors.deadletterqueue.copy.record.enable", "yes"), kerr.InvalidConfig)
	for _, name := range []string{"_dlq", "no-prefix", "dlq.x"} {
		require.NoError(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpSet, "errors.deadletterqueue.topic.name", name),
			"as on Kafka, only __ is refused when the config is set; the prefix is checked when a record is written")
	}
}

func TestShareDLQRecordAtCompressedBatch(t *testing.T) {
	c := newTestCluster(t)
	cl := newTestClient(t, c, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	createTopic(t, c, "z", 1)
	rs := []*kgo.Record{{Topic: "z", Key: []byte("k0"), Value: []byte("v0")}, {Topic: "z", Key: []byte("k1"), Value: []byte("v1")}}
	require.NoError(t, cl.ProduceSync(testCtx(t), rs...).FirstErr())
	require.NoError(t, c.do(func() {
		p := c.topics["z"].partitions[0]
		for off, want := range []string{"v0", "v1"} {
			_, v, err := recordAt(p, int64(off))
			require.NoError(t, err)
			require.Equal(t, want, string(v))
		}
		_, _, err := recordAt(p, 5)
		require.Error(t, err, "past the end")
	}))
}
