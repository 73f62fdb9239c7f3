package broker

// The share-group dead-letter queue (KIP-1191), as Apache Kafka 4.4 has it
// (share.version=2; the bundled broker finalizes 3, which includes it, or
// 1 with ShareTxnAPIs(false), which, as on Kafka, writes no dead-letter
// records).
//
// A share group whose errors.deadletterqueue.topic.name group config is set
// sends a record to that topic when one of its records is archived
//
//   - by a REJECT acknowledgement (a committed transactional REJECT of
//     KIP-1289 too), with the message "Offset rejected by client.", or
//   - because its delivery count reached share.delivery.count.limit when it
//     was released (RELEASE, lock expiry, the member's session closing, an
//     aborted transaction), with "Offset delivery count exceeded the
//     threshold."
//
// GAP acknowledgements, records of aborted transactions under
// read_committed and records below the log start are archived without one.
//
// The dead-letter record has these headers, every value a UTF-8 string:
// __dlq.errors.topic, __dlq.errors.partition, __dlq.errors.offset (where
// the record came from), __dlq.errors.group, __dlq.errors.delivery.count
// and __dlq.errors.message. With errors.deadletterqueue.copy.record.enable
// true it carries the original record's key and value (not its headers);
// otherwise its key and value are null. Its timestamp is the time it is
// written. It goes to the dead-letter topic's partition numbered the
// source partition modulo the dead-letter topic's partition count.
//
// As on Kafka, the record is archived whatever happens to the dead-letter
// write, and the write is skipped (logged) when the topic name starts with
// "__" or lacks the broker's required prefix (DLQTopicNamePrefix, Kafka's
// errors.deadletterqueue.topic.name.prefix, "dlq." by default), when the
// topic exists without errors.deadletterqueue.group.enable=true, or when it
// does not exist and automatic creation (DLQAutoCreateTopics, Kafka's
// errors.deadletterqueue.auto.create.topics.enable, false by default) is
// off. A created topic has the cluster's default partition count and
// errors.deadletterqueue.group.enable=true,
// message.timestamp.type=CreateTime. Only the "__" rule is checked when
// the group config is set (INVALID_CONFIG); the others at write time, as
// on Kafka.

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/wire"
)

// Group and topic configs of the dead-letter queue.
const (
	dlqTopicConfig       = "errors.deadletterqueue.topic.name"
	dlqCopyConfig        = "errors.deadletterqueue.copy.record.enable"
	dlqTopicEnableConfig = "errors.deadletterqueue.group.enable"
)

// deadRecord is a record archived by REJECT or at the delivery limit.
type deadRecord struct {
	offset     int64
	deliveries int16
	rejected   bool
}

// deadLetter notes that the record at off was archived for the
// dead-letter queue; flush hands it on.
func (sp *sharePartition) deadLetter(off int64, deliveries int16, rejected bool) {
	sp.dead = append(sp.dead, deadRecord{offset: off, deliveries: deliveries, rejected: rejected})
}

// deadLetters writes the dead-letter records of what sp archived since the
// last call, when its group has a usable dead-letter topic.
func (sc *shareCoordinator) deadLetters(sp *sharePartition, now time.Time) {
	if len(sp.dead) == 0 {
		return
	}
	dead := sp.dead
	sp.dead = nil
	group := sp.key.group
	name := sc.c.groupConfigValue(group, dlqTopicConfig)
	if name == "" || !sc.c.cfg.shareTxnAPIsEnabled { // share.version < 2: no DLQ
		return
	}
	dlq, err := sc.c.dlqTopic(group, name)
	if err != nil {
		sc.c.logger.Warn("dead-letter records not written; the records are archived", "group", group, "topic", name, "records", len(dead), "err", err)
		return
	}
	if len(dlq.partitions) == 0 {
		return
	}
	copyRecord := sc.c.groupConfigValue(group, dlqCopyConfig) == "true"
	target := dlq.partitions[int(sp.key.partition)%len(dlq.partitions)]
	recs := make([]kv, 0, len(dead))
	for _, d := range dead {
		rec := kv{headers: dlqHeaders(sp, d)}
		if copyRecord {
			key, value, err := recordAt(sp.p, d.offset)
			if err != nil {
				sc.c.logger.Warn("dead-letter record written without the original record", "group", group, "topic", name, "offset", d.offset, "err", err)
			}
			rec.key, rec.value = key, value
		}
		recs = append(recs, rec)
	}
	if _, kerrv := target.appendInternal(recs, -1, -1, now); kerrv != nil {
		sc.c.logger.Warn("dead-letter records not written; the records are archived", "group", group, "topic", name, "err", kerrv)
		return
	}
	sc.c.changed(target)
}

func dlqHeaders(sp *sharePartition, d deadRecord) []kv {
	msg := wire.DLQMessageLimit
	if d.rejected {
		msg = wire.DLQMessageRejected
	}
	h := func(k, v string) kv { return kv{key: []byte(k), value: []byte(v)} }
	return []kv{
		h(wire.DLQHeaderTopic, sp.p.topic.name),
		h(wire.DLQHeaderPartition, strconv.Itoa(int(sp.key.partition))),
		h(wire.DLQHeaderOffset, strconv.FormatInt(d.offset, 10)),
		h(wire.DLQHeaderGroup, sp.key.group),
		h(wire.DLQHeaderDeliveryCount, strconv.Itoa(int(d.deliveries))),
		h(wire.DLQHeaderMessage, msg),
	}
}

// dlqTopic returns group's dead-letter topic name, creating it when it is
// missing and automatic creation is on, or says why it cannot be used.
func (c *Cluster) dlqTopic(group, name string) (*topic, error) {
	switch prefix := c.cfg.dlqTopicPrefix; {
	case strings.HasPrefix(name, "__"):
		return nil, fmt.Errorf("the dead-letter topic of share group %q, %q, starts with __", group, name)
	case prefix != "" && !strings.HasPrefix(name, prefix):
		return nil, fmt.Errorf("the dead-letter topic of share group %q, %q, lacks the required prefix %q (DLQTopicNamePrefix)", group, name, prefix)
	}
	t := c.topics[name]
	if t == nil {
		if !c.cfg.dlqAutoCreate {
			return nil, fmt.Errorf("the dead-letter topic %q of share group %q does not exist and automatic creation is off (DLQAutoCreateTopics)", name, group)
		}
		if other := c.collidingTopic(name); other != "" {
			return nil, fmt.Errorf("the dead-letter topic %q of share group %q collides with topic %q", name, group, other)
		}
		t = c.createTopic(name, c.cfg.defaultPartitions, map[string]string{
			dlqTopicEnableConfig:     "true",
			"message.timestamp.type": "CreateTime",
		}, false)
		c.logger.Info("dead-letter topic created", "group", group, "topic", name, "partitions", len(t.partitions))
		return t, nil
	}
	if !strings.EqualFold(strings.TrimSpace(t.configs[dlqTopicEnableConfig]), "true") {
		return nil, fmt.Errorf("topic %q, the dead-letter topic of share group %q, does not have %s=true", name, group, dlqTopicEnableConfig)
	}
	return t, nil
}

var (
	decompressorOnce sync.Once
	decompressor     kgo.Decompressor
)

// recordAt returns the key and value of the record at off in p.
func recordAt(p *partition, off int64) (key, value []byte, err error) {
	if off < p.logStart {
		return nil, nil, fmt.Errorf("offset %d is below the log start %d", off, p.logStart)
	}
	batches := p.read(off, off+1, 1, true)
	if len(batches) == 0 {
		return nil, nil, fmt.Errorf("offset %d is not in the log", off)
	}
	b := batches[0]
	raw := b.raw
	if len(raw) < batchHeaderLen {
		return nil, nil, fmt.Errorf("the batch at offset %d is truncated", b.base)
	}
	body := raw[batchHeaderLen:]
	if codec := kgo.CompressionCodecType(raw[offAttributes+1] & 0x7); codec != kgo.CodecNone {
		decompressorOnce.Do(func() { decompressor = kgo.DefaultDecompressor() })
		if body, err = decompressor.Decompress(body, codec); err != nil {
			return nil, nil, fmt.Errorf("decompressing the batch at offset %d: %w", b.base, err)
		}
	}
	n := int32(binary.BigEndian.Uint32(raw[offNumRecords:]))
	r := kbin.Reader{Src: body}
	for i := int32(0); i < n; i++ {
		length := r.Varint()
		rec := kbin.Reader{Src: r.Span(int(length))}
		rec.Int8()
		rec.Varlong()
		delta := rec.Varint()
		k := rec.VarintBytes()
		v := rec.VarintBytes()
		if !r.Ok() || !rec.Ok() {
			return nil, nil, fmt.Errorf("the batch at offset %d is corrupt", b.base)
		}
		if b.base+int64(delta) == off {
			return k, v, nil
		}
	}
	return nil, nil, fmt.Errorf("offset %d is not in its batch (compacted away?)", off)
}
