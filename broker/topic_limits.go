package broker

// The topic configs the broker enforces (topic_configs.go lists and
// validates them all): max.message.bytes bounds every batch a producer
// writes.

import "strconv"

// defaultMaxMessageBytes is Kafka's message.max.bytes default: one MiB of
// records plus the 12-byte log overhead of a batch.
const defaultMaxMessageBytes = 1048588

// maxMessageBytes is the largest record batch, log overhead included, a
// producer may write to the topic: its max.message.bytes, or the broker
// default. A value IncrementalAlterConfigs stored without validation that
// does not parse counts as the default.
func (t *topic) maxMessageBytes() int {
	if v, ok := t.configs["max.message.bytes"]; ok {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil && n >= 0 {
			return int(n)
		}
	}
	return defaultMaxMessageBytes
}
