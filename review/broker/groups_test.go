package brokerreview_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinWithProtocols builds a JoinGroup v3 (no MEMBER_ID_REQUIRED round)
// naming n distinct protocols with empty metadata: about 13 bytes each.
func joinWithProtocols(group string, n int) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 3
	req.Group = group
	req.SessionTimeoutMillis = 30000
	req.RebalanceTimeoutMillis = 30000
	req.ProtocolType = "consumer"
	for i := 0; i < n; i++ {
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name = fmt.Sprintf("p%06d", i)
		p.Metadata = []byte{}
		req.Protocols = append(req.Protocols, p)
	}
	return req
}

// TestJoinGroupWithManyProtocolsDoesNotFreezeTheBroker: one JoinGroup of
// under 1 MiB naming 80,000 protocols.
//
// Today: the join completes at once (one member), and selectProtocol
// (group_membership.go) checks each of the first member's protocols with
// m.supports, a linear scan of that member's protocols: O(P^2) string
// compares on the loop, 3.2e9 for P = 80,000. Every client of every node
// waits meanwhile (measured: the prober's produce waited ~20 s).
// Kafka's selectProtocol intersects sets: linear.
func TestJoinGroupWithManyProtocolsDoesNotFreezeTheBroker(t *testing.T) {
	c, pl := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	req := joinWithProtocols("g-protocols", 80000)
	require.Less(t, len(frame(req, 1)), 1<<20)
	var resp *kmsg.JoinGroupResponse
	worst := measure(t, p, "JoinGroup with 80,000 protocols", func() {
		resp = rc.must(req).(*kmsg.JoinGroupResponse)
	})
	require.Zero(t, resp.ErrorCode)
	require.Empty(t, pl.count())
	require.Less(t, worst, freezeBound, "one JoinGroup stalled every other client")
}

// consumerJoin builds a KIP-848 first heartbeat subscribing to topics.
func consumerJoin(group, member string, topics ...string) *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group = group
	req.MemberID = member
	req.MemberEpoch = 0
	req.RebalanceTimeoutMillis = 60000
	req.SubscribedTopicNames = topics
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	return req
}

// TestConsumerGroupSecondMemberJoiningALargeTopicDoesNotFreezeTheBroker:
// a KIP-848 group of one member holding a 10,000-partition topic (the
// largest CreateTopics allows), and a second member joining: two small
// heartbeats.
//
// Today: the uniform assignor's balancing pass (consumer_group_assignors.go)
// moves one partition per iteration and re-sorts the giver's whole
// holding (held[from].sorted()) every time: 5,000 moves x a sort of up to
// 10,000 partitions, on the loop, inside the joiner's heartbeat. Measured:
// the heartbeat and the prober both waited ~10 s (BenchmarkConsumerAssignors
// only measures 1,000 partitions, where it is 0.8 ms).
func TestConsumerGroupSecondMemberJoiningALargeTopicDoesNotFreezeTheBroker(t *testing.T) {
	c, pl := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	createTopic(t, rc, "wide", 10000, nil)
	first := rc.must(consumerJoin("g-wide", "member-a", "wide")).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Zero(t, first.ErrorCode, "%v", first.ErrorMessage)
	require.NotNil(t, first.Assignment)
	require.Len(t, first.Assignment.Topics[0].Partitions, 10000)
	var second *kmsg.ConsumerGroupHeartbeatResponse
	worst := measure(t, p, "second KIP-848 member joins a 10,000-partition topic", func() {
		second = rc.must(consumerJoin("g-wide", "member-b", "wide")).(*kmsg.ConsumerGroupHeartbeatResponse)
	})
	require.Zero(t, second.ErrorCode, "%v", second.ErrorMessage)
	require.Empty(t, pl.count())
	require.Less(t, worst, freezeBound, "a member joining stalled every other client")
}

// heavyRegex is a valid RE2 expression under 1 MiB whose NFA keeps ~60,000
// threads alive on every character of the input: alternatives that each
// start with a different negated class (so that the parser cannot factor
// them), each matching any topic name character.
func heavyRegex() string {
	var b strings.Builder
	for i := 0; b.Len() < 900<<10; i++ {
		if i > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, `[^\x{%x}]*Z`, 0x100+i)
	}
	return b.String()
}

// TestConsumerGroupRegexSubscriptionDoesNotFreezeTheBroker: one KIP-848
// heartbeat (< 1 MiB) subscribing by a regular expression, in a cluster
// with four topics of 249-character names.
//
// Today: the heartbeat compiles the expression on the loop (twice:
// validateConsumerHeartbeat and updateConsumerMember, ~0.5 s each), then
// matches it against every topic name in consumerMetadata and again in
// updateTarget (consumer_group.go subscribedTopics), all on the loop: Go's
// regexp is linear in the input but also in the program, ~1.3 s per
// 249-character name here. The whole broker stops for the heartbeat
// (measured ~14 s), and again at every later heartbeat of any member of
// the group, since the metadata fingerprint re-matches every member's
// regex against every topic each time. Kafka resolves regexes off the
// request path, in the background, at most every
// group.consumer.regex.refresh.interval.ms; the expression should also be
// bounded in size.
func TestConsumerGroupRegexSubscriptionDoesNotFreezeTheBroker(t *testing.T) {
	c, pl := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	for i := 0; i < 4; i++ {
		createTopic(t, rc, fmt.Sprintf("%d%s", i, strings.Repeat("t", 248)), 1, nil)
	}
	req := consumerJoin("g-regex", "member-a")
	req.SubscribedTopicNames = nil
	req.SubscribedTopicRegex = kmsg.StringPtr(heavyRegex())
	require.Less(t, len(frame(req, 1)), 1<<20)
	var resp *kmsg.ConsumerGroupHeartbeatResponse
	worst := measure(t, p, "KIP-848 heartbeat with a heavy regex, 4 long topic names", func() {
		resp = rc.must(req).(*kmsg.ConsumerGroupHeartbeatResponse)
	})
	require.Empty(t, pl.count())
	require.Less(t, worst, freezeBound, "one heartbeat stalled every other client (answer: error %d)", resp.ErrorCode)
}
