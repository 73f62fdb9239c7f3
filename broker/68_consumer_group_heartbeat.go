package broker

// ConsumerGroupHeartbeat (key 68, KIP-848).
//
// Versions: 0-1. v1 is KIP-1082's: the client chooses its member id, and
// SubscribedTopicRegex is there.
//
// Behaviour:
//   - Served by the group coordinator (NOT_COORDINATOR elsewhere).
//   - The request is checked as Kafka checks it (INVALID_REQUEST with
//     Kafka's message): a group id; from v1 a member id, and in v0 one for
//     every epoch but 0 (v0 members that join without one get a UUID); no
//     blank instance or rack id; epoch 0 needs a rebalance timeout, an empty
//     owned-partitions list and a subscription (names or regex); epoch -2
//     needs an instance id; any epoch below -2 is invalid. A regex that does
//     not compile, or is longer than 16 KiB or compiles to more than 20,000
//     instructions (the broker's bounds, regex.go), is
//     INVALID_REGULAR_EXPRESSION, a server assignor other than uniform and
//     range UNSUPPORTED_ASSIGNOR.
//   - A regex subscription is resolved against the topics when it is new
//     and after topics are created or deleted, at the next heartbeat of any
//     member of the group: on the loop while the work (program size times
//     the bytes of the topic names) is under 2^20, else in the background,
//     as Kafka resolves regexes off the request path; the member has the
//     topics of the previous resolution (none at first) until it is done,
//     and the heartbeat after it moves the group epoch.
//   - Epoch 0 joins, creating the group or converting an empty classic group
//     (consumer_group.go), or rejoins an existing member (which then owns
//     nothing).
//   - Another epoch must be the member's (FENCED_MEMBER_EPOCH otherwise,
//     except the previous epoch with owned partitions inside its assignment:
//     the answer that raised it was lost); unknown members are
//     UNKNOWN_MEMBER_ID, a group that is not a consumer group
//     GROUP_ID_NOT_FOUND.
//   - Static members: a new incarnation replaces one that left with epoch -2
//     and inherits its assignment; UNRELEASED_INSTANCE_ID while the old one
//     is still in, FENCED_INSTANCE_ID for a member id the instance id does
//     not belong to.
//   - Epoch -1 leaves (the partitions are reassigned), -2 leaves for a while
//     (the partitions wait for the next incarnation until the session times
//     out).
//   - The answer carries the member id, its epoch, the heartbeat interval
//     (consumer.heartbeat.interval.ms) and the assignment when the request
//     was a full one or the assignment changed (consumer_group_reconcile.go
//     has the state machine, consumer_group_assignors.go the assignors).
//
// Skipped:
//   - GROUP_MAX_SIZE_REACHED;
//   - rack-aware assignment;
//   - classic members inside consumer groups (online upgrade and downgrade);
//   - authorization.

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 68, min: 0, max: 1, handle: handleConsumerGroupHeartbeat}) }

func handleConsumerGroupHeartbeat(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ConsumerGroupHeartbeatRequest)
	fail := func(err *kerr.Error, msg string) (kmsg.Response, error) {
		resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		setError(&resp.ErrorCode, &resp.ErrorMessage, err, msg)
		return resp, nil
	}
	re, err, msg := validateConsumerHeartbeat(req)
	if err != nil {
		return fail(err, msg)
	}
	g := c.coordinators.group
	sh, err := g.shards.lookup(r.node.id, c.CoordinatorPartition(coordinatorGroup, req.Group))
	if err == nil && !sh.current() {
		err = kerr.NotCoordinator // a heartbeat may write: a stale cache may not answer it
	}
	if err != nil {
		return fail(err, "")
	}
	if req.MemberID == "" {
		req.MemberID = newMemberUUID() // v0, joining
	}
	now := time.Now()
	before := consumerShapeOf(sh.state, req.Group)
	resp, herr := g.consumerHeartbeat(sh.state, r, req, re, now)
	g.afterConsumerHeartbeat(sh.state, req.Group, req.MemberID, before, now)
	if herr != nil {
		c.logger.Debug("consumer group heartbeat refused", "group", req.Group, "member", req.MemberID,
			"epoch", req.MemberEpoch, "err", herr.err, "why", herr.msg)
		return fail(herr.err, herr.msg)
	}
	return resp, nil
}

// validateConsumerHeartbeat checks a request as Kafka's coordinator does
// before it looks at the group, and returns its regex compiled (nil for
// none): compiled once per request.
func validateConsumerHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest) (*subscriptionRegex, *kerr.Error, string) {
	blank := func(s *string) bool { return s != nil && strings.TrimSpace(*s) == "" }
	switch {
	case strings.TrimSpace(req.Group) == "":
		return nil, kerr.InvalidRequest, "GroupId can't be empty."
	case req.Version >= 1 && strings.TrimSpace(req.MemberID) == "":
		return nil, kerr.InvalidRequest, "MemberId can't be empty."
	case blank(req.InstanceID):
		return nil, kerr.InvalidRequest, "InstanceId can't be empty."
	case blank(req.RackID):
		return nil, kerr.InvalidRequest, "RackId can't be empty."
	}
	switch e := req.MemberEpoch; {
	case e > 0 || e == cgLeaveEpoch:
		if strings.TrimSpace(req.MemberID) == "" {
			return nil, kerr.InvalidRequest, "MemberId can't be empty."
		}
	case e == 0:
		switch {
		case req.RebalanceTimeoutMillis == -1:
			return nil, kerr.InvalidRequest, "RebalanceTimeoutMs must be provided in first request."
		case req.Topics == nil || len(req.Topics) > 0:
			return nil, kerr.InvalidRequest, "TopicPartitions must be empty when (re-)joining."
		case req.SubscribedTopicNames == nil && req.SubscribedTopicRegex == nil:
			return nil, kerr.InvalidRequest, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
		}
	case e == cgStaticLeaveEpoch:
		switch {
		case strings.TrimSpace(req.MemberID) == "":
			return nil, kerr.InvalidRequest, "MemberId can't be empty."
		case req.InstanceID == nil:
			return nil, kerr.InvalidRequest, "InstanceId can't be null."
		}
	default:
		return nil, kerr.InvalidRequest, "MemberEpoch is invalid."
	}
	var re *subscriptionRegex
	if req.SubscribedTopicRegex != nil && *req.SubscribedTopicRegex != "" {
		var err error
		if re, err = compileSubscriptionRegex(*req.SubscribedTopicRegex); err != nil {
			return nil, kerr.InvalidRegularExpression, err.Error()
		}
	}
	if a := req.ServerAssignor; a != nil && consumerAssignors[*a] == nil {
		return nil, kerr.UnsupportedAssignor, "ServerAssignor " + *a + " is not supported. Supported assignors: " + cgAssignorUniform + ", " + cgAssignorRange + "."
	}
	return re, nil, ""
}
