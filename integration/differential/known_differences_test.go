package differential_test

// knownDifferences lists every step whose answer may differ between the
// real Kafka 4.4 and the bundled broker, with both answers exactly.
// docs/differences.md explains each one under its id (scenario/step).
//
// Three kinds:
//   - deliberate: the bundled broker answers differently on purpose
//     (DESIGN.md, or a broker with one in-memory copy and no controller);
//   - not served: an API or version the bundled broker leaves out;
//   - open: a difference in code this test's author does not own, reported
//     to its owner; the entry goes once the owner fixes it (the test then
//     fails until it is removed).
var knownDifferences = []knownDifference{
	// Deliberate: topics.
	{
		scenario: "metadata", step: "unknown topic, auto-create: first answer",
		kafka:   "UNKNOWN_TOPIC_OR_PARTITION partitions=0",
		bundled: "OK partitions=1 selfLed=true leaderEpochs=[0] internal=false hasID=true",
		why:     "deliberate: the bundled broker creates the topic synchronously and describes it at once",
	},
	{
		scenario: "metadata", step: "v3 unknown topic (always auto-creates): first answer",
		kafka:   "UNKNOWN_TOPIC_OR_PARTITION partitions=0",
		bundled: "OK partitions=1 selfLed=true leaderEpochs=[-1] internal=false hasID=false",
		why:     "deliberate: as above, for the versions that always auto-create",
	},

	// Deliberate: DESIGN.md section 4 (a COMMIT retry against CompleteAbort).
	{
		scenario: "txn_tv2_abort", step: "commit retried with the old epoch",
		kafka: "INVALID_TXN_STATE", bundled: "PRODUCER_FENCED",
		why: "deliberate (DESIGN.md 4): the producer asked to commit what ended in an abort",
	},
	{
		scenario: "txn_timeout", step: "the timed-out producer commits",
		kafka: "INVALID_TXN_STATE", bundled: "PRODUCER_FENCED",
		why: "deliberate (DESIGN.md 4): the same table cell, reached by the coordinator's timeout abort",
	},

	// Not served: API versions and keys.
	{scenario: "api_versions", step: "key 00 Produce", kafka: "v0-13", bundled: "v3-13",
		why: "not served: v0-2 carry only magic 0/1 message sets"},
	{scenario: "api_versions", step: "key 01 Fetch", kafka: "v4-18", bundled: "v4-17",
		why: "not served: v18 only matters to replica fetchers; there are none"},
	{scenario: "api_versions", step: "key 02 ListOffsets", kafka: "v1-11", bundled: "v1-10",
		why: "not served: v11 adds the tiered-storage timestamp -6"},
	{scenario: "api_versions", step: "key 03 Metadata", kafka: "v0-13", bundled: "v0-12",
		why: "not served: v13 adds a top-level error code for re-bootstrapping"},
	{scenario: "api_versions", step: "key 18 ApiVersions", kafka: "v0-5", bundled: "v0-4",
		why: "not served: v5's cluster and node id checks"},
	{scenario: "api_versions", step: "key 19 CreateTopics", kafka: "v2-7", bundled: "v0-7",
		why: "deliberate: the bundled broker still serves versions Kafka 4.0 removed"},
	{scenario: "api_versions", step: "key 20 DeleteTopics", kafka: "v1-6", bundled: "v0-6",
		why: "deliberate: as above"},
	{scenario: "api_versions", step: "key 23 OffsetForLeaderEpoch", kafka: "v2-4", bundled: "v0-4",
		why: "deliberate: as above"},
	{scenario: "api_versions", step: "key 27 WriteTxnMarkers", kafka: "v1-2", bundled: "v0-2",
		why: "deliberate: as above"},
	{scenario: "api_versions", step: "key 32 DescribeConfigs", kafka: "v1-4", bundled: "v0-4",
		why: "deliberate: as above"},
	{scenario: "api_versions", step: "key 95 TxnShareAcknowledge", kafka: "not served", bundled: "v0-0",
		why: "deliberate: KIP-1289 as its draft (apache/kafka PR #22357) has it, which released Kafka does not have"},
	{scenario: "api_versions", step: "other keys served",
		kafka:   "17 21 29 30 31 33 34 35 36 37 38 39 40 41 43 48 49 50 51 55 57 60 64 74 75 80 81 83 84 85 86 87 88 89 93 94",
		bundled: "21",
		why:     "not served: security, quotas, log dirs, KRaft, streams groups, share-state RPCs"},
	{scenario: "api_versions", step: "finalized features",
		kafka:   "eligible.leader.replicas.version=1 group.version=1 kraft.version=1 metadata.version=33 share.version=2 streams.version=1 transaction.version=2",
		bundled: "share.version=3 transaction.version=2",
		why:     "deliberate: share.version 3 announces KIP-1289; the other features describe machinery the bundled broker has not"},

	// Deliberate: share groups.
	{scenario: "share_heartbeat", step: "join",
		kafka:   "OK epoch=2 sameMemberID=true interval>0=true assignment=0 partitions",
		bundled: "OK epoch=2 sameMemberID=true interval>0=true assignment=2 partitions",
		why:     "deliberate: the bundled broker assigns synchronously on join; Kafka's assignor runs later"},
	{scenario: "share_heartbeat", step: "second member joins",
		kafka:   "OK epoch=base+0 sameMemberID=true interval>0=true assignment=0 partitions",
		bundled: "OK epoch=base+1 sameMemberID=true interval>0=true assignment=2 partitions",
		why:     "deliberate: as above; a Kafka member's epoch is that of the last assignment, which its assignor has not recomputed yet"},
	{scenario: "share_fetch", step: "fetch before joining",
		kafka:   "OK lockTimeout>0=true UNKNOWN_SERVER_ERROR ack=OK acquired=[] values=[] controls=[]",
		bundled: "top-level UNKNOWN_MEMBER_ID",
		why:     "deliberate: a share session opens only for a member of the group; Kafka lets any member id acquire records"},
	{scenario: "consumer_heartbeat", step: "second member joins",
		kafka:   "OK epoch=base+0 sameMemberID=true interval=5000 assignment=0 partitions",
		bundled: "OK epoch=base+1 sameMemberID=true interval=5000 assignment=0 partitions",
		why:     "deliberate: the bundled broker computes the new target assignment on the join; Kafka's assignor runs later, so the joiner first gets the old assignment epoch"},

	// Not implemented: classic members inside consumer groups.
	{scenario: "consumer_group_types", step: "JoinGroup to a consumer group with a member",
		kafka:   "MEMBER_ID_REQUIRED",
		bundled: "INCONSISTENT_GROUP_PROTOCOL",
		why:     "not implemented: Kafka takes a classic member into a consumer group (online migration); the bundled broker refuses it"},
	{scenario: "share_fetch", step: "fetch by a member the group does not have",
		kafka:   "OK lockTimeout>0=true OK ack=OK acquired=[] values=[] controls=[]",
		bundled: "top-level UNKNOWN_MEMBER_ID",
		why:     "deliberate: as above, once the share-partition exists"},
}
