// Package realkafka holds the tests that run the SDK and kgo against a real
// Apache Kafka broker (integration/kafka/kafka.sh start) and the Java
// reference clients against it. Without KSHARE_KAFKA_BOOTSTRAP the tests skip,
// saying why; with CI=true they fail instead. The package has no non-test
// code.
package realkafka
