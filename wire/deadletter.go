package wire

// The headers of a share group's dead-letter record, as Apache Kafka 4.4's
// share-group dead-letter queue (KIP-1191) writes them; every value is a
// UTF-8 string. The bundled broker writes them, and
// shareconsumer.Consumer.DeadLetter builds a record that carries them.
const (
	DLQHeaderTopic         = "__dlq.errors.topic"          // the source record's topic
	DLQHeaderPartition     = "__dlq.errors.partition"      // its partition, in decimal
	DLQHeaderOffset        = "__dlq.errors.offset"         // its offset, in decimal
	DLQHeaderGroup         = "__dlq.errors.group"          // the share group
	DLQHeaderDeliveryCount = "__dlq.errors.delivery.count" // its delivery count, in decimal
	DLQHeaderMessage       = "__dlq.errors.message"        // why it was archived
)

// The DLQHeaderMessage values Kafka writes.
const (
	DLQMessageRejected = "Offset rejected by client."
	DLQMessageLimit    = "Offset delivery count exceeded the threshold."
)
