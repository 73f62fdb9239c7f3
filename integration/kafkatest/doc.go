// Package kafkatest connects integration tests to the real Apache Kafka
// broker and to the Java reference clients that CI provides, and decides what
// a test does when they are missing.
//
// The environment names them:
//
//	KSHARE_KAFKA_BOOTSTRAP  comma-separated host:port list of a real Kafka,
//	                        e.g. started by integration/kafka/kafka.sh start
//	KSHARE_JAVA_RUNNER      path of the built Java runner jar,
//	                        integration/java/target/kshare-javaclients.jar
//	                        (built by integration/java/run.sh or mvn package)
//	KSHARE_KAFKA2_BOOTSTRAP the two host:port entries, node 1 first, of a
//	                        two-node real Kafka started by
//	                        integration/kafka/kafka.sh start --nodes 2
//	KSHARE_KAFKA_SCRIPT     optional: the kafka.sh that stops and starts that
//	                        cluster's node 2 (default: the one in this tree)
//
// When a variable is unset, Bootstrap, Bootstrap2 and JavaClients skip the
// test with a message saying why, so plain `go test ./...` passes on a
// machine without Kafka. With CI=true they fail the test instead: CI must never skip these
// tests silently.
package kafkatest
