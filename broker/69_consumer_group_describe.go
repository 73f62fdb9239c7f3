package broker

// ConsumerGroupDescribe (key 69, KIP-848).
//
// Versions: 0-1. v1 adds the member type.
//
// Behaviour:
//   - Describes consumer groups, each at its own coordinator
//     (NOT_COORDINATOR per group from any other node): state (Empty,
//     Reconciling, Stable; Assigning never shows, since assignments are
//     computed at once), group and assignment epochs, the assignor the group
//     uses, and every member with its instance and rack ids, member epoch,
//     client id and host, subscription (names and regex as the member sent
//     them; "" for no regex, as Kafka answers), current and target
//     assignment (by topic id and name), and (v1) member type 1 (a
//     consumer-protocol member; classic members do not exist here).
//   - An empty group id is INVALID_GROUP_ID, a name that is no consumer
//     group (none, a classic or a share group) GROUP_ID_NOT_FOUND.
//   - With IncludeAuthorizedOperations every group operation is allowed
//     (there are no ACLs).
//
// Skipped:
//   - authorization (there are no ACLs).

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 69, min: 0, max: 1, handle: handleConsumerGroupDescribe}) }

func handleConsumerGroupDescribe(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ConsumerGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	g := c.coordinators.group
	for _, name := range req.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group = name
		if req.IncludeAuthorizedOperations {
			rg.AuthorizedOperations = groupOperationsAllowed
		}
		fail := func(err *kerr.Error, msg string) {
			setError(&rg.ErrorCode, &rg.ErrorMessage, err, msg)
			resp.Groups = append(resp.Groups, rg)
		}
		if name == "" {
			fail(kerr.InvalidGroupID, "")
			continue
		}
		st, err := g.shardFor(r.node.id, name)
		if err != nil {
			fail(err, "")
			continue
		}
		grp, err, msg := g.consumerGroupFor(st, name, false)
		if err != nil {
			fail(err, msg)
			continue
		}
		cg := grp.consumer
		rg.State = cg.state()
		rg.Epoch, rg.AssignmentEpoch = cg.epoch, cg.assignmentEpoch
		rg.AssignorName = cg.preferredAssignor()
		for _, m := range cg.orderedMembers() {
			rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
			rm.MemberID, rm.InstanceID, rm.RackID = m.id, m.instanceID, m.rackID
			rm.MemberEpoch = m.epoch
			rm.ClientID, rm.ClientHost = m.clientID, m.clientHost
			rm.SubscribedTopics = m.topics
			if rm.SubscribedTopics == nil {
				rm.SubscribedTopics = []string{}
			}
			rm.SubscribedTopicRegex = m.regex
			if rm.SubscribedTopicRegex == nil {
				rm.SubscribedTopicRegex = new(string) // Kafka says "" for none
			}
			rm.Assignment = c.describedAssignment(m.assigned)
			rm.TargetAssignment = c.describedAssignment(cg.target[m.id])
			rm.MemberType = 1
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

// describedAssignment renders partitions by topic id and name; a topic that
// no longer exists has an empty name.
func (c *Cluster) describedAssignment(parts cgPartitions) kmsg.Assignment {
	a := kmsg.NewAssignment()
	a.TopicPartitions = []kmsg.AssignmentTopicPartition{}
	for _, tp := range parts.byTopic() {
		at := kmsg.NewAssignmentTopicPartition()
		at.TopicID, at.Partitions = tp.topicID, tp.partitions
		if t := c.topicsByID[tp.topicID]; t != nil {
			at.Topic = t.name
		}
		a.TopicPartitions = append(a.TopicPartitions, at)
	}
	return a
}
