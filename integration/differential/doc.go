// Package differential checks the bundled broker against a real Apache
// Kafka: each scenario sends the same sequence of raw Kafka requests
// (through kgo's Broker.Request, at pinned versions) to both, records a
// normalized transcript of the answers (error codes, counts, offsets from
// the start of fresh topics, producer ids named P1, P2, ..., epochs
// relative to the producer's first, booleans such as "visible to
// read_committed"), and requires the two transcripts to be equal, except
// for the steps listed, with both answers, in the allow-list that
// docs/differences.md explains.
//
// The real Kafka is named by KSHARE_KAFKA_BOOTSTRAP (start one with
// integration/kafka/kafka.sh start); without it the test skips, saying
// why, and under CI=true it fails. Every scenario also starts a fresh
// one-node bundled cluster shaped like that Kafka (five partitions per
// internal topic). Names carry a random per-run prefix because the real
// Kafka keeps its state between runs. Scenarios cover topics, produce,
// fetch, list offsets, idempotence, TV1 and TV2 transactions, transactional
// offsets, the transaction admin APIs, FindCoordinator, ApiVersions,
// share-group configs and the share-group APIs.
//
// The package has no non-test code; run it with
//
//	KSHARE_KAFKA_BOOTSTRAP=127.0.0.1:19092 go test -race ./integration/differential/
package differential
