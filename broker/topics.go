package broker

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kshare-go/kshare/internal/javahash"
	"github.com/kshare-go/kshare/wire"
)

// topic is one topic and its partitions. Owned by the run loop.
type topic struct {
	name       string
	id         [16]byte
	partitions []*partition
	configs    map[string]string
	internal   bool
	retention  retentionPolicy // from configs; see setConfigs
}

// setConfigs installs a topic's configs and what follows from them.
func (c *Cluster) setConfigs(t *topic, configs map[string]string) {
	if configs == nil {
		configs = map[string]string{}
	}
	t.configs = configs
	t.retention = retentionPolicyOf(configs)
	if t.internal {
		return
	}
	now := time.Now()
	for _, p := range t.partitions {
		c.armRetention(p, now)
	}
}

// normalizedTopicName is a topic name with '.' and '_' made alike: Kafka
// refuses two topics whose names differ only there.
func normalizedTopicName(name string) string { return strings.ReplaceAll(name, ".", "_") }

func newTopicID() [16]byte {
	var id [16]byte
	for id == ([16]byte{}) {
		_, _ = rand.Read(id[:]) // crypto/rand.Read never fails on supported platforms
	}
	return id
}

// createTopic makes a topic whose partitions are led round-robin across the
// nodes, starting after the topic's own offset so topics spread out.
func (c *Cluster) createTopic(name string, partitions int32, configs map[string]string, internal bool) *topic {
	t := &topic{name: name, id: newTopicID(), internal: internal}
	start := int32(len(c.topics))
	now := time.Now()
	for i := int32(0); i < partitions; i++ {
		p := newPartition(t, i, (start+i)%int32(len(c.nodes)))
		p.c = c
		// Like Kafka's first retention check, which comes a while after
		// start, a new partition is first checked one interval after
		// its creation.
		p.lastRetention = now
		t.partitions = append(t.partitions, p)
	}
	c.setConfigs(t, configs)
	c.topics[name] = t
	c.topicGen++
	c.topicsByNorm[normalizedTopicName(name)] = t
	c.topicsByID[t.id] = t
	return t
}

func (c *Cluster) createInternalTopics() {
	c.createTopic(wire.TransactionStateTopic, c.cfg.txnStatePartitions, nil, true)
	c.createTopic(wire.ConsumerOffsetsTopic, c.cfg.offsetsPartitions, nil, true)
	c.createTopic(wire.ShareGroupStateTopic, c.cfg.shareStatePartitions, nil, true)
}

func (c *Cluster) deleteTopic(t *topic) {
	delete(c.topics, t.name)
	c.topicGen++
	delete(c.topicsByID, t.id)
	if c.topicsByNorm[normalizedTopicName(t.name)] == t {
		delete(c.topicsByNorm, normalizedTopicName(t.name))
	}
	for _, p := range t.partitions {
		p.deleted = true
	}
	c.partitionsDeleted(t)
	for _, fn := range c.deleteListeners {
		fn(t)
	}
}

// partitionOf returns a partition, or nil.
func (c *Cluster) partitionOf(topicName string, index int32) *partition {
	t := c.topics[topicName]
	if t == nil || index < 0 || int(index) >= len(t.partitions) {
		return nil
	}
	return t.partitions[index]
}

// moveLeader makes node `to` the leader of p, bumps the leader epoch and
// tells the coordinators, exactly as a reassignment completes in Kafka.
func (c *Cluster) moveLeader(p *partition, to int32) {
	old := p.leader
	if old == to {
		return
	}
	p.leader = to
	p.leaderEpoch++
	p.epochStarts = append(p.epochStarts, epochStart{epoch: p.leaderEpoch, start: p.endOffset()})
	c.logger.Info("leadership moved", "topic", p.topic.name, "partition", p.index, "from", old, "to", to, "epoch", p.leaderEpoch)
	for _, fn := range c.leaderListeners {
		fn(p, old)
	}
	c.changed(p)
}

// MoveLeader moves the leadership of a partition to a node at once, the
// same path AlterPartitionReassignments takes. It fails for an unknown
// topic, partition or node.
func (c *Cluster) MoveLeader(topicName string, partition int32, nodeID int32) error {
	var err error
	if derr := c.do(func() {
		p := c.partitionOf(topicName, partition)
		switch {
		case p == nil:
			err = fmt.Errorf("broker: unknown partition %s/%d", topicName, partition)
		case c.nodeByID(nodeID) == nil:
			err = fmt.Errorf("broker: unknown node %d", nodeID)
		default:
			c.moveLeader(p, nodeID)
		}
	}); derr != nil {
		return derr
	}
	return err
}

// Leader returns the node leading a partition.
func (c *Cluster) Leader(topicName string, partition int32) (int32, error) {
	var leader int32
	var err error
	if derr := c.do(func() {
		p := c.partitionOf(topicName, partition)
		if p == nil {
			err = fmt.Errorf("broker: unknown partition %s/%d", topicName, partition)
			return
		}
		leader = p.leader
	}); derr != nil {
		return 0, derr
	}
	return leader, err
}

// Coordinator key types, as FindCoordinator numbers them.
const (
	coordinatorGroup int8 = 0
	coordinatorTxn   int8 = 1
	coordinatorShare int8 = 2
)

// CoordinatorPartition returns the internal-topic partition that serves a
// coordinator key: for groups (0) a __consumer_offsets partition, for
// transactional ids (1) a __transaction_state partition, for share keys (2,
// "group:topicId:partition") a __share_group_state partition. Like Kafka it
// hashes with Java's String.hashCode, so keys land where Kafka puts them.
func (c *Cluster) CoordinatorPartition(keyType int8, key string) int32 {
	switch keyType {
	case coordinatorTxn:
		return javahash.Partition(key, c.cfg.txnStatePartitions)
	case coordinatorShare:
		return javahash.Partition(key, c.cfg.shareStatePartitions)
	default:
		return javahash.Partition(key, c.cfg.offsetsPartitions)
	}
}

// coordinatorTopic names the internal topic behind a key type.
func coordinatorTopic(keyType int8) string {
	switch keyType {
	case coordinatorTxn:
		return wire.TransactionStateTopic
	case coordinatorShare:
		return wire.ShareGroupStateTopic
	default:
		return wire.ConsumerOffsetsTopic
	}
}

// coordinatorPartitionFor returns the partition behind a coordinator key.
func (c *Cluster) coordinatorPartitionFor(keyType int8, key string) *partition {
	return c.partitionOf(coordinatorTopic(keyType), c.CoordinatorPartition(keyType, key))
}

// shareStateKey is the __share_group_state key of one share-partition.
func shareStateKey(group string, topicID [16]byte, partition int32) string {
	return group + ":" + uuidString(topicID) + ":" + strconv.Itoa(int(partition))
}

// uuidString renders a topic id as Kafka does: URL-safe base64, no padding.
func uuidString(id [16]byte) string { return base64.RawURLEncoding.EncodeToString(id[:]) }
