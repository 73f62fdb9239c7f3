package broker

// ShareFetch (key 78, KIP-932).
//
// Versions: 1-2 (version 0 was Kafka 4.0's early access). v2 brings
// IsRenewAck (KIP-1222) and ShareAcquireMode (KIP-1206).
//
// Behaviour:
//   - Share sessions per (group, member, node), opened with
//     ShareAcknowledge's checks (beginShareCall, share_session.go): GroupID
//     and MemberID are required (INVALID_REQUEST); epoch 0 opens a session
//     for a member of the group (UNKNOWN_MEMBER_ID otherwise, deliberately
//     stricter than Kafka, which lets any member id fetch: see
//     docs/differences.md, share_fetch/fetch before joining;
//     acknowledgements on it get INVALID_SHARE_SESSION_EPOCH), replacing
//     a session the member had at the node without releasing anything
//     (the member keeps its records and may acknowledge them in the new
//     session); later epochs must be the session's next
//     (INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_NOT_FOUND); -1 applies
//     the piggybacked acknowledgements and closes the session, releasing
//     what the member holds in its partitions there.
//   - As on Kafka 4.4, the close of the connection whose ShareFetch opened
//     a session, while it is the last session that connection opened,
//     ends the session and releases what its member holds in its
//     partitions, at once (a close the client makes, or the broker: idle,
//     malformed frames, faults); a connection that only carried later
//     requests releases nothing. A ShareFetch parked in a long poll holds
//     its connection until it is answered, so a close during the wait is
//     seen when the wait ends, as on Kafka. Leaving the group or being
//     fenced ends no session (ShareGroupHeartbeat).
//   - No release lowers a delivery count: the delivery cut short counts
//     (Kafka 4.4 never lowers one either).
//   - Topics add partitions to the session, ForgottenTopicsData removes
//     them. A partition that does not exist is answered UNKNOWN_TOPIC_ID
//     (unknown topic id) or UNKNOWN_TOPIC_OR_PARTITION in that answer and
//     not added, so a session holds at most the cluster's partitions.
//   - Piggybacked acknowledgements (GAP, ACCEPT, RELEASE, REJECT; RENEW with
//     v2's IsRenewAck) are applied first, all or nothing per partition, with
//     the outcome in AcknowledgeErrorCode (offsets before the start offset
//     ignored, past the last one handed out INVALID_REQUEST, RENEW refused
//     when share.renew.acknowledge.enable is false); a request with
//     IsRenewAck fetches nothing (KIP-1222).
//   - Piggybacked REJECTs, and RELEASEs at the delivery limit, write the
//     group's dead-letter records (KIP-1191, share_dlq.go), as
//     ShareAcknowledge's do.
//   - Then AVAILABLE records of the session's partitions are acquired for
//     the member, up to MaxRecords (the broker's default when 0) and
//     MaxBytes (capped, like Fetch's, by FetchMaxBytes), as the group's
//     share.isolation.level and share.partition.max.record.locks allow,
//     control records included (share_partition.go). In ShareAcquireMode
//     batch-optimized (0, and v1) MaxRecords is soft, as in Kafka: a new
//     batch whose records are being acquired is acquired to its end; in
//     record-limit (1) acquisition stops at MaxRecords. A share-partition that
//     share.auto.offset.reset=by_duration cannot place yet answers
//     OFFSET_NOT_AVAILABLE.
//   - The answer carries the stored batches that hold them, the
//     AcquiredRecords ranges with their delivery counts, and the group's
//     AcquisitionLockTimeoutMillis.
//   - With nothing to hand out the request waits up to MaxWaitMillis for
//     records to arrive or be released.
//   - A partition this node does not lead answers NOT_LEADER_OR_FOLLOWER
//     with the current leader and its endpoint.
//
// Cost:
//   - O(1) per partition named (the answer's entries are indexed by
//     partition), plus O(S log S) for a session of S partitions per fetch.
//   - A session's release (epoch -1, its connection's close) passes over
//     the in-flight window of each of its S partitions where records are
//     acquired: O(S × W) for windows of W offsets (at most
//     share.partition.max.record.locks plus a batch), in slices of
//     shareReleaseSlotsPerTurn window slots per turn of the loop, the
//     first at once (share_session.go). A connection on which no session
//     was opened costs the loop nothing when it closes.
//
// Skipped:
//   - BatchSize (AcquiredRecords are one range per run of offsets with one
//     delivery count, whatever its size); the batch-optimized mode for
//     records already in flight (redelivered records are acquired up to
//     MaxRecords exactly, which that mode allows);
//   - MinBytes beyond "at least one record";
//   - Kafka's forgetting of a connection's last session when an earlier
//     session opened on the same connection closes (its close then
//     releases nothing on Kafka; here it releases the last session's
//     records: docs/differences.md);
//   - the share session cache limit (SHARE_SESSION_LIMIT_REACHED);
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 78, min: 1, max: 2, handle: handleShareFetch}) }

// hasShareFetchError reports whether an answer has a partition error.
func hasShareFetchError(resp *kmsg.ShareFetchResponse) bool {
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				return true
			}
		}
	}
	return false
}

func handleShareFetch(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ShareFetchRequest)
	resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
	sc := c.coordinators.share
	now := time.Now()
	call, err, msg := sc.beginShareCall(r, req.GroupID, req.MemberID, req.ShareSessionEpoch, true, now)
	resp.AcquisitionLockTimeoutMillis = call.lockMillis
	if err != nil {
		setError(&resp.ErrorCode, &resp.ErrorMessage, err, msg)
		return resp, nil
	}
	group, member, s := call.group, call.member, call.session
	ans := &shareFetchAnswer{ShareFetchResponse: resp}
	for _, rt := range req.Topics {
		t := c.topicsByID[rt.TopicID]
		for _, rp := range rt.Partitions {
			tp := shareTP{topicID: rt.TopicID, partition: rp.Partition}
			// A partition that does not exist is answered and not kept:
			// the session holds only partitions it can serve, so that
			// its size (and every later fetch's work) is bounded by the
			// cluster's partitions, not by what requests name.
			switch {
			case t == nil:
				ans.partition(tp).ErrorCode = kerr.UnknownTopicID.Code
			case rp.Partition < 0 || int(rp.Partition) >= len(t.partitions):
				ans.partition(tp).ErrorCode = kerr.UnknownTopicOrPartition.Code
			default:
				s.parts[tp] = struct{}{}
			}
		}
	}
	renew := req.Version >= 2 && req.IsRenewAck
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if len(rp.AcknowledgementBatches) == 0 {
				continue
			}
			tp := shareTP{topicID: rt.TopicID, partition: rp.Partition}
			out := ans.partition(tp)
			if req.ShareSessionEpoch == 0 {
				out.AcknowledgeErrorCode = kerr.InvalidShareSessionEpoch.Code
				continue
			}
			batches := make([]shareAckBatch, 0, len(rp.AcknowledgementBatches))
			for _, b := range rp.AcknowledgementBatches {
				batches = append(batches, shareAckBatch{first: b.FirstOffset, last: b.LastOffset, types: b.AcknowledgeTypes})
			}
			if _, err, msg := sc.acknowledge(r.node.id, group, member, tp, batches, renew, now); err != nil {
				setError(&out.AcknowledgeErrorCode, &out.AcknowledgeErrorMessage, err, msg)
			}
		}
	}
	for _, ft := range req.ForgottenTopicsData {
		for _, p := range ft.Partitions {
			delete(s.parts, shareTP{topicID: ft.TopicID, partition: p})
		}
	}
	if req.ShareSessionEpoch == -1 {
		sc.closeSession(s, now)
		return resp, nil
	}
	s.bump()
	if renew {
		return resp, nil
	}
	errs := len(resp.Topics) > 0 && hasShareFetchError(resp)
	// ShareAcquireMode 0 (and v1, which has none) is batch-optimized, 1
	// record-limit (KIP-1206).
	lim := shareFetchLimits{maxRecords: int(req.MaxRecords), maxBytes: int(req.MaxBytes), wholeBatches: req.Version < 2 || req.ShareAcquireMode == 0}
	if lim.maxRecords <= 0 {
		lim.maxRecords = int(c.cfg.shareMaxFetchRecords)
	}
	if lim.maxBytes <= 0 || lim.maxBytes > int(c.cfg.fetchMaxBytes) {
		lim.maxBytes = int(c.cfg.fetchMaxBytes)
	}
	n, fetchErrs := sc.fetchInto(r.node.id, s, lim, ans, now)
	if n > 0 || errs || fetchErrs || req.MaxWaitMillis <= 0 {
		return ans, nil
	}
	sc.park(r, s, ans, lim, c.longPoll(req.MaxWaitMillis), now)
	return nil, nil
}
