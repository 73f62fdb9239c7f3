package broker

// OffsetCommit (key 8).
//
// Versions: 2-10 (Kafka 4 removed 0-1). v9 answers GROUP_ID_NOT_FOUND for a
// missing group; v10 names topics by id.
//
// Behaviour:
//   - Commits at the group's coordinator (NOT_COORDINATOR from any other
//     node).
//   - Classic groups, by Kafka's rules: generation -1 without a member
//     commits only while the group has no members (and creates a group that
//     does not exist yet); otherwise the member (and its group.instance.id:
//     FENCED_INSTANCE_ID) must belong to the group at the request's
//     generation (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION; a missing group is
//     ILLEGAL_GENERATION below v9 and GROUP_ID_NOT_FOUND from v9), and not
//     while the group awaits its leader's assignment
//     (REBALANCE_IN_PROGRESS).
//   - KIP-848 consumer groups take the member epoch as the generation
//     (consumer_group_reconcile.go): a commit without member only while the
//     group has no members, else the member must exist (UNKNOWN_MEMBER_ID)
//     and commit with v9+ (UNSUPPORTED_VERSION), and its epoch must not be
//     ahead of the member's (STALE_MEMBER_EPOCH); an older epoch is accepted
//     per partition for partitions assigned to the member at that epoch or
//     before (KIP-1251), STALE_MEMBER_EPOCH for the others.
//   - Unknown topics or partitions get UNKNOWN_TOPIC_OR_PARTITION
//     (UNKNOWN_TOPIC_ID by id, v10), metadata over 4096 bytes
//     OFFSET_METADATA_TOO_LARGE.
//   - The valid partitions are written as one batch to __consumer_offsets
//     and applied at once; a batch that would take the stored bytes past
//     the MaxBytes budget is not written, and each of its partitions gets
//     INVALID_COMMIT_OFFSET_SIZE (Kafka's answer to a commit it cannot
//     store).
//   - Offsets expire by the broker's OffsetsRetention (group_expiry.go).
//
// Skipped:
//   - v2-4's per-request retention time (the broker-wide one applies).

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 8, min: 2, max: 10, handle: handleOffsetCommit}) }

func handleOffsetCommit(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.OffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	g := c.coordinators.group
	now := time.Now()
	byID := req.Version >= 10

	who := offsetCommitter{
		memberID:   req.MemberID,
		instanceID: req.InstanceID,
		generation: req.Generation,
		version:    req.Version,
	}
	st, groupErr := g.commitShard(r.node.id, req.Group, who)
	var writes []offsetWrite
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			w := c.newOffsetWrite(byID, rt.Topic, rt.TopicID, rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, now)
			if groupErr != nil {
				w.err = groupErr
			} else {
				g.checkCommitPartition(st, req.Group, who, &w)
			}
			writes = append(writes, w)
		}
	}
	if groupErr == nil {
		g.writeOffsets(st, req.Group, writes, -1, -1, now)
	}
	i := 0
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = rp.Partition
			if err := writes[i].err; err != nil {
				sp.ErrorCode = err.Code
			}
			i++
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
