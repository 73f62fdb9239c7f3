package broker

// ShareAcknowledge (key 79, KIP-932).
//
// Versions: 1-2 (version 0 was Kafka 4.0's early access). v2 brings
// IsRenewAck (KIP-1222) and answers AcquisitionLockTimeoutMillis.
//
// Behaviour:
//   - Acknowledges records in an open share session, opened with
//     ShareFetch's checks (beginShareCall, share_session.go): GroupID and
//     MemberID are required (INVALID_REQUEST); epoch 0 is
//     INVALID_SHARE_SESSION_EPOCH, an unknown session
//     SHARE_SESSION_NOT_FOUND, a wrong epoch INVALID_SHARE_SESSION_EPOCH;
//     epoch -1 also closes the session after the acknowledgements it
//     carries, releasing what the member still holds in the session's
//     partitions there, without lowering a delivery count (as on Kafka
//     4.4). A ShareAcknowledge never ties a session to its connection:
//     only the connection that opened a session releases it when it
//     closes (ShareFetch).
//   - Types GAP, ACCEPT, RELEASE and REJECT, and RENEW when v2's IsRenewAck
//     is set (KIP-1222; INVALID_REQUEST otherwise; INVALID_RECORD_STATE when
//     the group's share.renew.acknowledge.enable is false), one per range or
//     one per offset.
//   - Each partition is all or nothing: offsets before the start offset are
//     done and ignored, as Kafka ignores them; one past the last offset
//     handed out is INVALID_REQUEST; any other offset that is not ACQUIRED
//     by this member under an unexpired lock fails the partition with
//     INVALID_RECORD_STATE.
//   - A partition this node does not lead answers NOT_LEADER_OR_FOLLOWER
//     with the current leader and its endpoint.
//   - A member that left the group or was fenced keeps its session, and
//     acknowledges in it, as on Kafka (ShareGroupHeartbeat).
//   - A REJECT, and a RELEASE at the delivery limit, of a group with
//     errors.deadletterqueue.topic.name set writes a dead-letter record
//     (KIP-1191, share_dlq.go) before the answer; GAP writes none.
//
// Skipped:
//   - Kafka's UNKNOWN_TOPIC_OR_PARTITION from a node that lost the
//     partition's leadership (a follower now): this node names the new
//     leader with NOT_LEADER_OR_FOLLOWER;
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 79, min: 1, max: 2, handle: handleShareAcknowledge}) }

func handleShareAcknowledge(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ShareAcknowledgeRequest)
	resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
	sc := c.coordinators.share
	now := time.Now()
	call, err, msg := sc.beginShareCall(r, req.GroupID, req.MemberID, req.ShareSessionEpoch, false, now)
	resp.AcquisitionLockTimeoutMillis = call.lockMillis
	if err != nil {
		setError(&resp.ErrorCode, &resp.ErrorMessage, err, msg)
		return resp, nil
	}
	group, member, s := call.group, call.member, call.session
	renew := req.Version >= 2 && req.IsRenewAck
	for _, rt := range req.Topics {
		st := kmsg.NewShareAcknowledgeResponseTopic()
		st.TopicID = rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewShareAcknowledgeResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = -1, -1
			batches := make([]shareAckBatch, 0, len(rp.AcknowledgementBatches))
			for _, b := range rp.AcknowledgementBatches {
				batches = append(batches, shareAckBatch{first: b.FirstOffset, last: b.LastOffset, types: b.AcknowledgeTypes})
			}
			p, err, msg := sc.acknowledge(r.node.id, group, member, shareTP{topicID: rt.TopicID, partition: rp.Partition}, batches, renew, now)
			if err != nil {
				setError(&sp.ErrorCode, &sp.ErrorMessage, err, msg)
				if err == kerr.NotLeaderForPartition {
					sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = p.leader, p.leaderEpoch
					addShareAckEndpoint(c, resp, p.leader)
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if req.ShareSessionEpoch == -1 {
		sc.closeSession(s, now)
	} else {
		s.bump()
	}
	return resp, nil
}

func addShareAckEndpoint(c *Cluster, resp *kmsg.ShareAcknowledgeResponse, id int32) {
	for _, ep := range resp.NodeEndpoints {
		if ep.NodeID == id {
			return
		}
	}
	n := c.nodeByID(id)
	ep := kmsg.NewShareAcknowledgeResponseNodeEndpoint()
	ep.NodeID, ep.Host, ep.Port = n.id, n.host, n.port
	resp.NodeEndpoints = append(resp.NodeEndpoints, ep)
}
