package broker

// DeleteShareGroupOffsets (key 92, KIP-932).
//
// Versions: 0.
//
// Behaviour:
//   - Deletes the share state of whole topics of an empty share group, at
//     its group coordinator (NOT_COORDINATOR elsewhere), so that the group
//     starts over on them where share.auto.offset.reset says.
//   - Top-level errors: an empty group id is INVALID_GROUP_ID, a name that
//     is no share group GROUP_ID_NOT_FOUND, a group with members
//     NON_EMPTY_GROUP.
//   - Per topic: an unknown topic is UNKNOWN_TOPIC_OR_PARTITION, and so is a
//     topic the group has no share state for ("There is no offset
//     information to delete.", Kafka's message); the others have every
//     share-partition's state tombstoned in __share_group_state.
//   - As on Kafka, the topics deleted come first in the answer, then those
//     that failed.
//
// Skipped:
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() {
	registerAPI(apiSpec{key: 92, min: 0, max: 0, handle: handleDeleteShareGroupOffsets})
}

func handleDeleteShareGroupOffsets(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.DeleteShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteShareGroupOffsetsResponse)
	sc := c.coordinators.share
	if err, msg := sc.checkOffsetsAdmin(r.node.id, req.GroupID, false); err != nil {
		resp.ErrorCode, resp.ErrorMessage = err.Code, &msg
		return resp, nil
	}
	now := time.Now()
	var failed, deleted []kmsg.DeleteShareGroupOffsetsResponseTopic
	for _, rt := range req.Topics {
		st := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
		st.Topic = rt.Topic
		t := c.topics[rt.Topic]
		var err *kerr.Error
		msg := ""
		if t == nil || t.internal {
			err = kerr.UnknownTopicOrPartition
		} else {
			found, werr := sc.deleteShareState(req.GroupID, t.id, now)
			switch {
			case werr != nil:
				err = werr
			case !found:
				err, msg = kerr.UnknownTopicOrPartition, "There is no offset information to delete."
			default:
				st.TopicID = t.id
			}
		}
		if err != nil {
			if msg == "" {
				msg = err.Description
			}
			st.ErrorCode, st.ErrorMessage = err.Code, &msg
			failed = append(failed, st)
			continue
		}
		deleted = append(deleted, st)
	}
	resp.Topics = append(deleted, failed...)
	return resp, nil
}
