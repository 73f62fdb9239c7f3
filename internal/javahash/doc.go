// Package javahash places coordinator keys on the partitions of Kafka's
// internal topics (__consumer_offsets, __transaction_state,
// __share_group_state) exactly where Kafka places them, so that the bundled
// broker and the tests that compare it with a real Kafka agree on which
// partition, and so which node, serves a group, a transactional id or a
// share-partition.
package javahash
