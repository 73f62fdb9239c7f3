// Package eos is the exactly-once harness that examples/ctp,
// examples/checkpoint and the integration tests share: it writes input
// records with unique ids, reads the output back with a read_committed
// reader, and reports duplicates and missing ids in one summary.
//
// An input record's value is its id; the transform under test writes one
// output record whose value is the same id. Exactly-once holds when the
// committed output holds every input id exactly once and every input record
// is acknowledged. Run (consume-transform-produce) reads the output topic
// with a read_committed reader; RunCheckpoint, whose readers have no
// producer, checks the in-memory sink that each completed checkpoint
// commits to.
package eos
