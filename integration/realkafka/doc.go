// Package realkafka holds the tests that run the SDK and kgo against a real
// Apache Kafka broker (integration/kafka/kafka.sh start) and the Java
// reference clients against it. The transaction coordinator tests and the
// share-group restart test need the two-node cluster of kafka.sh start
// --nodes 2 (KSHARE_KAFKA2_BOOTSTRAP), whose node 2 they stop and start;
// the share-group leader move test moves leadership of its own topic there. Without KSHARE_KAFKA_BOOTSTRAP or
// KSHARE_KAFKA2_BOOTSTRAP the tests that need it skip, saying why; with
// CI=true they fail instead. The package has no non-test code.
package realkafka
