package differential_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// metadataResult records a topic's metadata: its error, partition count,
// and whether each partition is led by the one node with itself as the
// only replica.
func (tg *target) metadataResult(st kmsg.MetadataResponseTopic) string {
	if st.ErrorCode != 0 {
		return fmt.Sprintf("%s partitions=%d", errName(st.ErrorCode), len(st.Partitions))
	}
	selfLed := true
	epochs := make([]int32, 0, len(st.Partitions))
	for _, p := range st.Partitions {
		if p.ErrorCode != 0 || p.Leader != tg.node || len(p.Replicas) != 1 || len(p.ISR) != 1 {
			selfLed = false
		}
		epochs = append(epochs, p.LeaderEpoch)
	}
	return fmt.Sprintf("OK partitions=%d selfLed=%t leaderEpochs=%v internal=%t hasID=%t",
		len(st.Partitions), selfLed, epochs, st.IsInternal, st.TopicID != [16]byte{})
}

func scenarioMetadata(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("meta")
	id := tg.createTopic(ctx, topic, 2)

	tr.add("known topic", "%s", tg.metadataResult(tg.metadataTopic(ctx, topic, false)))
	tr.add("unknown topic, no auto-create", "%s", tg.metadataResult(tg.metadataTopic(ctx, tg.name("missing"), false)))

	auto := tg.name("auto")
	tr.add("unknown topic, auto-create: first answer", "%s", tg.metadataResult(tg.metadataTopic(ctx, auto, true)))
	var settled kmsg.MetadataResponseTopic
	tg.retry(ctx, "auto-created topic to settle", func() error {
		settled = tg.metadataTopic(ctx, auto, false)
		if settled.ErrorCode != 0 || len(settled.Partitions) == 0 || settled.Partitions[0].Leader < 0 {
			return fmt.Errorf("%s", tg.metadataResult(settled))
		}
		return nil
	})
	tr.add("unknown topic, auto-create: settled", "%s", tg.metadataResult(settled))
	tr.add("invalid name, auto-create", "%s", tg.metadataResult(tg.metadataTopic(ctx, "bad name!", true)))
	tr.add("invalid name, no auto-create", "%s", tg.metadataResult(tg.metadataTopic(ctx, "bad name!", false)))
	internal := tg.metadataTopic(ctx, "__consumer_offsets", false)
	for i := range internal.Partitions {
		// A long-lived Kafka has moved these leaders on every restart.
		internal.Partitions[i].LeaderEpoch = 0
	}
	tr.add("internal topic by name", "%s", tg.metadataResult(internal))

	byID := func(id [16]byte) kmsg.MetadataResponseTopic {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.TopicID = id
		req.Topics = append(req.Topics, rt)
		resp := tg.send(ctx, vMetadata, req).(*kmsg.MetadataResponse)
		if len(resp.Topics) != 1 {
			tg.t.Fatalf("%s: metadata by id: %d topics", tg.kind, len(resp.Topics))
		}
		return resp.Topics[0]
	}
	known := byID(id)
	tr.add("known topic by id", "%s nameMatches=%t", tg.metadataResult(known), known.Topic != nil && *known.Topic == topic)
	var randomID [16]byte
	_, _ = rand.Read(randomID[:])
	tr.add("unknown topic id", "%s", tg.metadataResult(byID(randomID)))

	all := kmsg.NewPtrMetadataRequest()
	all.Topics = nil
	resp := tg.send(ctx, vMetadata, all).(*kmsg.MetadataResponse)
	listed := make(map[string]bool)
	for _, st := range resp.Topics {
		if st.Topic != nil {
			listed[*st.Topic] = true
		}
	}
	tr.add("all topics", "listsOwn=%t listsConsumerOffsets=%t listsTransactionState=%t",
		listed[topic], listed["__consumer_offsets"], listed["__transaction_state"])
	tr.add("cluster", "brokers=%d controllerIsSelf=%t clusterID=%t", len(resp.Brokers),
		resp.ControllerID == tg.node, resp.ClusterID != nil && *resp.ClusterID != "")

	v3 := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	v3Name := tg.name("v3auto")
	rt.Topic = &v3Name
	v3.Topics = append(v3.Topics, rt)
	v3resp := tg.send(ctx, 3, v3).(*kmsg.MetadataResponse)
	tr.add("v3 unknown topic (always auto-creates): first answer", "%s", tg.metadataResult(v3resp.Topics[0]))
	tg.retry(ctx, "v3 auto-created topic to settle", func() error {
		settled = tg.metadataTopic(ctx, v3Name, false)
		if settled.ErrorCode != 0 {
			return fmt.Errorf("%s", tg.metadataResult(settled))
		}
		return nil
	})
	tr.add("v3 unknown topic: settled", "%s", tg.metadataResult(settled))
}

// createTopicsResult records each topic answer of a CreateTopics response.
func createTopicsResult(resp *kmsg.CreateTopicsResponse, prefix string) string {
	var out []string
	for _, st := range resp.Topics {
		name := strings.ReplaceAll(st.Topic, prefix, "")
		if st.ErrorCode != 0 {
			out = append(out, fmt.Sprintf("%s:%s", name, errName(st.ErrorCode)))
			continue
		}
		out = append(out, fmt.Sprintf("%s:OK partitions=%d rf=%d hasID=%t configsListed=%t", name,
			st.NumPartitions, st.ReplicationFactor, st.TopicID != [16]byte{}, len(st.Configs) > 0))
	}
	return strings.Join(out, "; ")
}

func scenarioCreateTopics(ctx context.Context, tg *target, tr *transcript) {
	create := func(validateOnly bool, topics ...kmsg.CreateTopicsRequestTopic) string {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 30000
		req.ValidateOnly = validateOnly
		req.Topics = topics
		return createTopicsResult(tg.send(ctx, vCreateTopics, req).(*kmsg.CreateTopicsResponse), tg.prefix)
	}
	topic := func(name string, partitions int32, rf int16) kmsg.CreateTopicsRequestTopic {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, rf
		return rt
	}
	withConfig := func(rt kmsg.CreateTopicsRequestTopic, name, value string) kmsg.CreateTopicsRequestTopic {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = name, kmsg.StringPtr(value)
		rt.Configs = append(rt.Configs, c)
		return rt
	}
	withAssignment := func(rt kmsg.CreateTopicsRequestTopic, nodes ...int32) kmsg.CreateTopicsRequestTopic {
		for i, n := range nodes {
			a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			a.Partition, a.Replicas = int32(i), []int32{n}
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
		}
		return rt
	}

	name := tg.name("created")
	tr.add("new topic", "%s", create(false, topic(name, 3, 1)))
	tg.waitTopic(ctx, name, 3)
	tr.add("existing topic", "%s", create(false, topic(name, 3, 1)))
	tr.add("bad name", "%s", create(false, topic("bad name!", 1, 1)))
	tr.add("name of 250 characters", "%s", create(false, topic(strings.Repeat("n", 250), 1, 1)))
	tr.add("replication factor 3 on one node", "%s", create(false, topic(tg.name("rf3"), 1, 3)))
	tr.add("replication factor 0", "%s", create(false, topic(tg.name("rf0"), 1, 0)))
	tr.add("zero partitions", "%s", create(false, topic(tg.name("p0"), 0, 1)))
	tr.add("partitions -2", "%s", create(false, topic(tg.name("pneg"), -2, 1)))
	defaults := tg.name("defaults")
	tr.add("default partitions and replication", "%s", create(false, topic(defaults, -1, -1)))
	tg.waitTopic(ctx, defaults, 1)

	dotted := tg.name("a.b")
	tr.add("dotted name", "%s", create(false, topic(dotted, 1, 1)))
	tg.waitTopic(ctx, dotted, 1)
	tr.add("name colliding with the dotted one", "%s", create(false, topic(tg.name("a_b"), 1, 1)))

	tr.add("existing internal topic", "%s", create(false, topic("__consumer_offsets", 1, 1)))
	tr.add("new name starting with __ (validate only)", "%s", create(true, topic("__"+tg.name("under"), 1, 1)))

	validated := tg.name("validated")
	tr.add("validate only", "%s", create(true, topic(validated, 2, 1)))
	tr.add("validate only leaves no topic", "%s", tg.metadataResult(tg.metadataTopic(ctx, validated, false)))

	dup := tg.name("dup")
	tr.add("same topic twice in one request", "%s", create(false, topic(dup, 1, 1), topic(dup, 1, 1)))

	tr.add("unknown config", "%s", create(false, withConfig(topic(tg.name("cfgunknown"), 1, 1), "no.such.config", "1")))
	tr.add("bad config value", "%s", create(false, withConfig(topic(tg.name("cfgbad"), 1, 1), "cleanup.policy", "sometimes")))
	good := tg.name("cfggood")
	tr.add("valid config", "%s", create(false, withConfig(topic(good, 1, 1), "retention.ms", "3600000")))
	tg.waitTopic(ctx, good, 1)

	assigned := tg.name("assigned")
	tr.add("replica assignment on the node", "%s", create(false, withAssignment(topic(assigned, -1, -1), tg.node, tg.node)))
	tg.waitTopic(ctx, assigned, 2)
	tr.add("replica assignment and a partition count", "%s", create(false, withAssignment(topic(tg.name("both"), 2, -1), tg.node)))
	tr.add("replica assignment on a missing node", "%s", create(false, withAssignment(topic(tg.name("nowhere"), -1, -1), 99)))
}

func scenarioDeleteTopics(ctx context.Context, tg *target, tr *transcript) {
	topic := tg.name("doomed")
	id := tg.createTopic(ctx, topic, 1)
	del := func(byID bool, name string, id [16]byte) string {
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.TimeoutMillis = 30000
		rt := kmsg.NewDeleteTopicsRequestTopic()
		if byID {
			rt.TopicID = id
		} else {
			rt.Topic = kmsg.StringPtr(name)
		}
		req.Topics = append(req.Topics, rt)
		resp := tg.send(ctx, vDeleteTopics, req).(*kmsg.DeleteTopicsResponse)
		if len(resp.Topics) != 1 {
			return fmt.Sprintf("%d topics answered", len(resp.Topics))
		}
		st := resp.Topics[0]
		return fmt.Sprintf("%s nameEchoed=%t idEchoed=%t", errName(st.ErrorCode), st.Topic != nil && *st.Topic == name, st.TopicID == id)
	}
	tr.add("delete by name", "%s", del(false, topic, id))
	tg.retry(ctx, "topic deletion", func() error {
		if st := tg.metadataTopic(ctx, topic, false); st.ErrorCode == 0 {
			return fmt.Errorf("topic still listed")
		}
		return nil
	})
	tr.add("metadata after delete", "%s", tg.metadataResult(tg.metadataTopic(ctx, topic, false)))
	tr.add("delete again", "%s", del(false, topic, [16]byte{}))
	byID := tg.name("doomedbyid")
	id2 := tg.createTopic(ctx, byID, 1)
	tr.add("delete by id", "%s", del(true, byID, id2))
	var randomID [16]byte
	_, _ = rand.Read(randomID[:])
	tr.add("delete unknown id", "%s", del(true, "", randomID))
}
