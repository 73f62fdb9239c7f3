package broker

// ShareGroupDescribe (key 77, KIP-932).
//
// Versions: 1.
//
// Behaviour:
//   - Served by the group coordinator of each group (NOT_COORDINATOR per
//     group elsewhere): state (Empty or Stable), group epoch, assignment
//     epoch (the same: assignment is computed at once), the "simple"
//     assignor, and each member's client id and host, rack, subscription and
//     assignment.
//   - GROUP_ID_NOT_FOUND for a name that is no share group.
//
// Skipped:
//   - authorized operations (always the "not requested" value);
//   - authorization.

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 77, min: 1, max: 1, handle: handleShareGroupDescribe}) }

func handleShareGroupDescribe(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ShareGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ShareGroupDescribeResponse)
	for _, name := range req.GroupIDs {
		rg := kmsg.NewShareGroupDescribeResponseGroup()
		rg.GroupID = name
		if err := c.groupCoordinatorError(r.node.id, name); err != nil {
			rg.ErrorCode = err.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		g := c.coordinators.share.groups[name]
		if g == nil {
			rg.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "no share group has this name"
			rg.ErrorMessage = &msg
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.GroupState = g.state()
		rg.GroupEpoch, rg.AssignmentEpoch = g.epoch, g.epoch
		rg.Assignor = "simple"
		ids := make([]string, 0, len(g.members))
		for id := range g.members {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			m := g.members[id]
			rm := kmsg.NewShareGroupDescribeResponseGroupMember()
			rm.MemberID, rm.MemberEpoch, rm.RackID = m.id, m.epoch, m.rack
			rm.ClientID, rm.ClientHost = m.clientID, m.clientHost
			rm.SubscribedTopicNames = append([]string{}, m.topics...)
			for _, a := range c.shareAssignment(m.topics) {
				tp := kmsg.NewShareGroupDescribeResponseGroupMemberAssignmentTopicPartition()
				tp.TopicID, tp.Partitions = a.TopicID, a.Partitions
				if t := c.topicsByID[a.TopicID]; t != nil {
					tp.Topic = t.name
				}
				rm.Assignment.TopicPartitions = append(rm.Assignment.TopicPartitions, tp)
			}
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
