package shareconsumer

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/wire"
)

// DeadLetter returns the dead-letter copy of r for topic: r's key, value
// and headers, followed by the headers Apache Kafka's share-group
// dead-letter queue writes (KIP-1191; wire.DLQHeaderTopic and the others):
// r's topic, partition and offset, the group, r's delivery count and
// cause's text (wire.DLQMessageRejected when cause is nil). Headers of r
// with those names (r came from a dead-letter topic) are replaced. The
// producer's partitioner places the copy, by r's key.
//
// Produce it in the transaction that acknowledges r with kshare.AckReject:
// r is archived exactly when its dead-letter copy commits, and neither
// happens if the transaction aborts. A broker's own dead-letter queue
// cannot promise that: Kafka writes its copy after the record is
// archived, and skips it on a failure. The copy is not written by
// DeadLetter.
//
// It fails with ErrNotHeld when the consumer does not hold r (it was not
// returned by Poll, or was acknowledged or forgotten since: its delivery
// count is not known), and with kshare.ErrUsage for a nil record or an
// empty topic.
func (c *Consumer) DeadLetter(r *kgo.Record, topic string, cause error) (*kgo.Record, error) {
	const op = "dead letter"
	switch {
	case r == nil:
		return nil, errs.Usage(op, errors.New("nil record"))
	case topic == "":
		return nil, errs.Usage(op, errors.New("empty dead-letter topic"))
	}
	deliveries, ok := c.DeliveryCount(r)
	if !ok {
		return nil, fmt.Errorf("%s: %s/%d offset %d: %w", op, r.Topic, r.Partition, r.Offset, ErrNotHeld)
	}
	msg := wire.DLQMessageRejected
	if cause != nil {
		msg = cause.Error()
	}
	dlq := [...]kgo.RecordHeader{
		{Key: wire.DLQHeaderTopic, Value: []byte(r.Topic)},
		{Key: wire.DLQHeaderPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		{Key: wire.DLQHeaderOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
		{Key: wire.DLQHeaderGroup, Value: []byte(c.cfg.group)},
		{Key: wire.DLQHeaderDeliveryCount, Value: strconv.AppendInt(nil, int64(deliveries), 10)},
		{Key: wire.DLQHeaderMessage, Value: []byte(msg)},
	}
	headers := make([]kgo.RecordHeader, 0, len(r.Headers)+len(dlq))
	for _, h := range r.Headers {
		if !isDLQHeader(h.Key) {
			headers = append(headers, h)
		}
	}
	headers = append(headers, dlq[:]...)
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: headers}, nil
}

// isDLQHeader reports whether key names one of the dead-letter headers.
func isDLQHeader(key string) bool {
	switch key {
	case wire.DLQHeaderTopic, wire.DLQHeaderPartition, wire.DLQHeaderOffset,
		wire.DLQHeaderGroup, wire.DLQHeaderDeliveryCount, wire.DLQHeaderMessage:
		return true
	}
	return false
}
