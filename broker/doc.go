// Package broker is kshare's bundled Kafka-compatible cluster: N nodes in
// the calling process, each listening on its own loopback TCP port and
// speaking the Kafka wire protocol through kmsg.
//
// It exists so that everything kshare does (TV2 transactions, share groups,
// transactional share acknowledgements) runs and is tested on one machine,
// and it implements the protocol extensions that upstream Kafka does not
// have yet: KIP-1289's TxnShareAcknowledge, as its draft (apache/kafka PR
// #22357) has it,
// KIP-1228's strict checks of TV2 transaction markers, and coordinators
// that check their leadership before every answer (KAFKA-21181).
//
// Every partition, data or internal, has one leader node; a reassignment
// (AlterPartitionReassignments, or Cluster.MoveLeader) moves leadership at
// once. Coordinators keep their state as records in the internal topics
// (__transaction_state, __consumer_offsets, __share_group_state) and a new
// leader rebuilds it by replaying that partition's log.
//
// What it does not do: replication (each partition has one copy, in memory),
// persistence across restarts, ACLs, quotas, SASL/TLS, key compaction of
// data topics (retention works per batch; coordinator logs are compacted).
// The handler of each API lives in a file named after its key
// (00_produce.go, 01_fetch.go, ...), whose opening comment lists, under
// "Versions:", "Behaviour:" and "Skipped:", what it serves, what it
// implements and what it leaves out.
package broker
