// Package shareconsumer is kshare's KIP-932 share-group consumer, with an
// acknowledgement mode in which acknowledgements commit atomically with a
// Kafka transaction (KIP-1289).
//
// It uses kgo as the transport (connections, TLS/SASL, version negotiation,
// metadata, record decoding with kgo.ProcessFetchPartition, kgo.Record) and
// runs the share-group protocol itself: a ShareGroupHeartbeat loop that
// joins the group, follows assignment changes and rejoins with epoch 0 when
// the coordinator fences the member (FENCED_MEMBER_EPOCH,
// UNKNOWN_MEMBER_ID); one share session per partition leader, owned by one
// goroutine that sends ShareFetch and ShareAcknowledge strictly one at a
// time with the session epochs KIP-932 prescribes; leader moves
// (NOT_LEADER_OR_FOLLOWER and friends) trigger a metadata refresh and move
// the partition to the new leader's session. Only records inside the
// broker's AcquiredRecords ranges are returned; acquired offsets without a
// record (control records, compacted gaps) are acknowledged GAP at once.
//
// kgo's own share consumer cannot serve exactly-once pipelines: it accepts
// every record of a poll on the next poll, so a record whose
// acknowledgement belonged to an aborted transaction would be accepted
// anyway. This consumer never acknowledges in Transactional mode.
//
// # Acknowledgement modes
//
// Implicit (the default, as in KIP-932): every record a Poll returns is
// accepted when Poll is called again, or at Close. The acceptance travels
// with the next ShareFetch to its leader.
//
// Explicit: the application marks records with Ack (ACCEPT, RELEASE or
// REJECT); Commit (synchronous), CommitAsync, the next Poll and Close send
// the marks. Records never marked stay locked until their lock runs out,
// and Close releases them.
//
// Transactional: the consumer never acknowledges a record by itself. The
// application turns polled records into a *kshare.ShareAcks with Acks and
// hands it to a transaction (producer.SendShareAcksToTransaction, or the
// acknowledger package). The consumer follows the acknowledgements it
// built, and thereby learns:
//
//   - that the records join a transaction: it refuses (with
//     ErrLockExpired, which the producer reports as kshare.ErrAbortable) a
//     record whose acquisition lock has passed or was lost, and (with
//     kshare.ErrUsage) records it does not hold, another member's metadata,
//     acknowledgements already staged in another transaction or checkpoint
//     that has not ended (stage each ShareAcks once) or a call outside
//     Transactional mode; from then on it renews the records' locks
//     (ShareAcknowledge RENEW, KIP-1222) when less than half of the lock
//     duration is left, until the transaction ends. A transaction (or an
//     acknowledger checkpoint) may thus stay open longer than the lock
//     duration without the records being delivered to anyone else, but not
//     longer than its transaction timeout: at its deadline a transaction
//     can no longer commit, so the consumer stops renewing its records and
//     releases them, even if the application never ends it. Brokers without
//     ShareAcknowledge v2 cannot renew; the consumer logs it once and the
//     records keep their first lock.
//   - how the transaction ended. Committed records are forgotten, except
//     those the transaction carried as RELEASE: KIP-1289 does not stage
//     RELEASE, so the producer leaves them out of TxnShareAcknowledge and
//     the consumer releases them now (ShareAcknowledge RELEASE). After an
//     abort the broker makes every record whose acknowledgement reached it
//     available again; records whose acknowledgement never left the client
//     (the producer sends them at commit, so an abort before commit leaves
//     them all locked) are released by the consumer (ShareAcknowledge
//     RELEASE), so the group gets them again at once. That release is how
//     every dropped acknowledgement comes back (an aborted transaction, a
//     failed or aborted checkpoint, an acknowledger that closes, a RELEASE
//     in a committed transaction), and the
//     only acknowledgement a Transactional consumer ever sends, besides GAP
//     for offsets without a record and RENEW.
//
// With RenewHeldLocks(true), the records Poll returned that are not staged
// yet are renewed the same way, so an application may work on a record
// for longer than the lock duration before it stages it. A record it never
// stages is then held until Close (or until a renewal fails: a lost
// session, a broker without RENEW), not until its first lock runs out:
// stage every record you poll, with AckRelease for those to give back. By
// default such records keep their first lock.
//
// Close releases the records that were never put into a transaction and
// leaves those staged in one to their transaction; see Consumer.Close and,
// for the lifecycle of the whole pipeline (cancellation, lost answers,
// in-doubt commits), docs/design.md.
//
// # The group's configuration
//
// A share group starts reading a partition at its latest offset unless
// its share.auto.offset.reset config says otherwise, so a program that
// writes its input before its consumer joins reads nothing. SetGroupConfig
// sets that config (and the lock duration, the delivery limit and the
// isolation level) before the consumer first joins; AlterGroupConfig sets
// them through any kgo client.
//
// # Errors
//
// Every error matches exactly one class of package kshare. Poll returns
// kshare.ErrAbortable when its context ends, kshare.ErrUsage when a
// subscribed topic does not exist (once metadata has said so for 5
// seconds), kshare.ErrFatal or kshare.ErrUnsupported when the consumer
// cannot go on (refused, unauthorized, a cluster without share groups),
// and kshare.ErrClosed after Close. ErrLockExpired refines
// kshare.ErrAbortable and ErrNotHeld kshare.ErrUsage; *AckError (acks the
// brokers did not apply) is kshare.ErrAbortable.
//
// Delivery counts: every delivery raises a record's count; an aborted
// transaction does not (the broker puts its records back as they were),
// but the redelivery that follows does, so a record whose transactions
// keep aborting reaches the group's share.delivery.count.limit and is
// archived.
//
// # Records, delivery counts and locks
//
// Poll returns *kgo.Record values. kgo.Record has no field for the share
// fields, so the consumer answers for them: DeliveryCount(r) and
// LockDeadline(r) look the record up by topic, partition and offset. The
// lock deadline is the time the fetch was sent plus the broker's
// AcquisitionLockTimeoutMillis, so it errs early. kgo's own accessors
// (Record.DeliveryCount and Record.AcquisitionDeadline, franz-go 1.22.3)
// read state that only kgo's share consumer can attach to a record (under
// an unexported context key): on records from this consumer they return 0
// and the zero time. Use the consumer's.
//
// Work on a record that may outlast its lock calls Renew (Explicit and
// Transactional mode): a RENEW (KIP-1222) of exactly the records given,
// sent at once and answered record by record in a *RenewError; after it,
// LockDeadline says until when the record is held. The Java client and
// kgo mark a record RENEW and send it with the next commit or poll;
// Renew's answer says whether the lock was actually extended.
//
// # Fetching ahead of Poll, and MaxPollRecords
//
// A Poll returns at most MaxPollRecords records. A consumer fetches
// nothing before its first Poll. While a Poll waits, each leader's session
// long-polls its leader; after a Poll returned, each session fetches once
// more ahead of the application (without waiting at the leader), so that
// the next Poll finds records ready. The leader starts a record's lock when
// it hands the record out, so the consumer renews (RENEW, KIP-1222) the
// locks of what it fetched ahead until a Poll returns it: a record is never
// left to expire, and use up one of its deliveries, before the application
// has seen it. Metrics().ExpiredUnseen counts what expired anyway (a
// renewal that failed; each occurrence is logged at WARN). When no Poll
// comes for MaxPollInterval, what was fetched ahead is released. Against a
// broker without RENEW the sessions fetch only while a Poll waits.
//
// In Transactional mode, records whose transaction ended before their
// acknowledgements were staged (work that failed, or an abort before
// SendShareAcksToTransaction) are given back at once with Release; no
// transaction outcome would give them back.
//
// # A group that starts at the latest offset
//
// When the group begins to read a partition at its latest offset while
// the partition already holds records (share.auto.offset.reset is not
// "earliest"), the consumer says so once, at INFO, with the records it
// skipped.
package shareconsumer
