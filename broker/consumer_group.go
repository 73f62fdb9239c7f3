package broker

// KIP-848 consumer groups (group type "consumer"), served by the group
// coordinator beside classic groups.
//
// A group name has one entry in its __consumer_offsets shard (a
// classicGroup, which also holds the group's committed offsets); the entry
// is of type consumer while its consumer field is set. So the offsets of a
// consumer group are the classic storage: OffsetCommit, TxnOffsetCommit and
// OffsetFetch serve both types, with the member epoch in place of the
// generation.
//
// Which type a group is follows Kafka: ConsumerGroupHeartbeat at epoch 0
// creates a consumer group, or converts a classic group that has no members
// (one that only holds offsets, say); JoinGroup converts a consumer group
// with no members back to classic. Kafka's online upgrade and downgrade of
// groups that have members (classic members inside a consumer group) are
// not implemented: a ConsumerGroupHeartbeat to a classic group with members
// answers GROUP_ID_NOT_FOUND, which is what Kafka answers with
// group.consumer.migration.policy=disabled, and a JoinGroup to a consumer
// group with members answers INCONSISTENT_GROUP_PROTOCOL.
//
// The state machine is KIP-848's: the group epoch moves when a member joins,
// leaves or changes its subscription and when the subscribed topics'
// metadata changes; a new target assignment is computed at once by the
// group's server assignor (consumer_group_assignors.go), so the assignment
// epoch always equals the group epoch after a heartbeat (Kafka computes it
// on the next heartbeat or in the background and may briefly report the
// group as Assigning). Each member then reconciles towards its target on
// its own heartbeats (consumer_group_reconcile.go): partitions to revoke
// first, partitions still held by another member once that member has
// released them. Members that miss consumer.session.timeout.ms, and members
// that do not revoke within their rebalance timeout, are fenced.

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Consumer group states, as ConsumerGroupDescribe and ListGroups name them.
const (
	cgStateEmpty       = "Empty"
	cgStateAssigning   = "Assigning"
	cgStateReconciling = "Reconciling"
	cgStateStable      = "Stable"
)

// Special member epochs of ConsumerGroupHeartbeat.
const (
	cgLeaveEpoch       int32 = -1
	cgStaticLeaveEpoch int32 = -2
)

// cgMemberState is where a member is in its reconciliation.
type cgMemberState int8

const (
	// cgStable: the member holds its whole target assignment.
	cgStable cgMemberState = iota
	// cgUnrevoked: the member must give up partitions before it may
	// take the next epoch.
	cgUnrevoked
	// cgUnreleased: the member is at the target epoch but waits for
	// partitions another member still holds.
	cgUnreleased
)

func (s cgMemberState) String() string {
	switch s {
	case cgUnrevoked:
		return "UNREVOKED_PARTITIONS"
	case cgUnreleased:
		return "UNRELEASED_PARTITIONS"
	default:
		return "STABLE"
	}
}

// cgTP is one partition of a topic, by topic id, as assignments name it.
type cgTP struct {
	topicID   [16]byte
	partition int32
}

// cgPartitions maps partitions to an epoch: for a member's assigned and
// revoking partitions, the member epoch at which each was assigned to it
// (KIP-1251's assignment epoch); for a target, the value is unused.
type cgPartitions map[cgTP]int32

func (s cgPartitions) clone() cgPartitions {
	out := make(cgPartitions, len(s))
	for tp, e := range s {
		out[tp] = e
	}
	return out
}

// byTopic lists the partitions grouped by topic id, both in order.
func (s cgPartitions) byTopic() []cgTopicPartitions {
	var out []cgTopicPartitions
	for _, tp := range s.sorted() {
		if n := len(out); n == 0 || out[n-1].topicID != tp.topicID {
			out = append(out, cgTopicPartitions{topicID: tp.topicID})
		}
		last := &out[len(out)-1]
		last.partitions = append(last.partitions, tp.partition)
	}
	return out
}

// cgTopicPartitions is one topic's partitions of an assignment.
type cgTopicPartitions struct {
	topicID    [16]byte
	partitions []int32
}

// sorted lists the partitions by topic id, then partition.
func (s cgPartitions) sorted() []cgTP {
	out := make([]cgTP, 0, len(s))
	for tp := range s {
		out = append(out, tp)
	}
	sort.Slice(out, func(i, j int) bool { return lessTP(out[i], out[j]) })
	return out
}

func lessTP(a, b cgTP) bool {
	if a.topicID != b.topicID {
		return string(a.topicID[:]) < string(b.topicID[:])
	}
	return a.partition < b.partition
}

func samePartitions(a, b cgPartitions) bool {
	if len(a) != len(b) {
		return false
	}
	for tp := range a {
		if _, ok := b[tp]; !ok {
			return false
		}
	}
	return true
}

// consumerGroup is the membership of a group of type consumer.
type consumerGroup struct {
	epoch           int32
	assignmentEpoch int32
	members         map[string]*consumerMember
	// static maps a group.instance.id to the member that holds it.
	static map[string]string
	// target is every member's target assignment at assignmentEpoch.
	target map[string]cgPartitions
	// owners names, for every partition a member holds (assigned or
	// still revoking), that member: a partition is given to its next
	// owner only once the previous one released it.
	owners map[cgTP]string
	// metadata fingerprints the subscribed topics (ids and partition
	// counts) as of the last epoch bump, so that a topic created,
	// deleted or grown moves the epoch.
	metadata string
}

func newConsumerGroup() *consumerGroup {
	return &consumerGroup{
		members: make(map[string]*consumerMember),
		static:  make(map[string]string),
		target:  make(map[string]cgPartitions),
		owners:  make(map[cgTP]string),
	}
}

// consumerMember is one member of a consumer group.
type consumerMember struct {
	id               string
	instanceID       *string
	rackID           *string
	clientID         string
	clientHost       string
	rebalanceTimeout time.Duration
	// assignor is the server assignor the member asked for; "" for none.
	assignor string
	// topics is the subscription by name, sorted; regex the subscription
	// by regular expression (v1), and re its compiled form and resolution.
	topics []string
	regex  *string
	re     *subscriptionRegex

	state     cgMemberState
	epoch     int32
	prevEpoch int32
	assigned  cgPartitions
	revoking  cgPartitions

	// lastSeen starts the session timeout; revokeBy, set while the member
	// is cgUnrevoked, is when it is fenced unless it revoked.
	lastSeen time.Time
	revokeBy time.Time
}

// state is the group state Kafka reports for it.
func (cg *consumerGroup) state() string {
	switch {
	case len(cg.members) == 0:
		return cgStateEmpty
	case cg.epoch > cg.assignmentEpoch:
		return cgStateAssigning
	}
	for _, m := range cg.members {
		if m.state != cgStable || m.epoch != cg.assignmentEpoch {
			return cgStateReconciling
		}
	}
	return cgStateStable
}

// orderedMembers lists the members by member id.
func (cg *consumerGroup) orderedMembers() []*consumerMember {
	out := make([]*consumerMember, 0, len(cg.members))
	for _, m := range cg.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// subscriptionRegex is a member's compiled regex subscription and the
// topics it resolved to. A resolution reflects the topics of one topic
// generation (Cluster.topicGen); a new generation makes the next heartbeat
// resolve again, on the loop when that is cheap, else in the background
// (regex.go), the member meanwhile keeping the topics of the last one.
type subscriptionRegex struct {
	re    *regexp.Regexp
	insts int
	// matched are the names the regex matched at topic generation gen,
	// sorted; resolving is set while a background resolution runs.
	matched   []string
	gen       uint64
	resolved  bool
	resolving bool
}

// compileSubscriptionRegex compiles a subscription regex as Kafka matches
// it: against the whole topic name, within the broker's bounds (regex.go).
// Go's RE2 syntax is what Kafka's RE2/J accepts, but for constructs only
// one of them knows (docs/broker.md).
func compileSubscriptionRegex(expr string) (*subscriptionRegex, error) {
	re, insts, err := boundedRegex(expr)
	if err != nil {
		return nil, err
	}
	return &subscriptionRegex{re: re, insts: insts}, nil
}

// resolveSubscription brings a regex subscription up to the current
// topics, unless it is already or a background resolution runs.
func (c *Cluster) resolveSubscription(sr *subscriptionRegex) {
	if sr == nil || sr.resolving || sr.resolved && sr.gen == c.topicGen {
		return
	}
	names := make([]string, 0, len(c.topics))
	for name := range c.topics {
		names = append(names, name)
	}
	gen := c.topicGen
	if cost := regexCost(sr.insts, names); cost <= regexSyncSteps {
		c.stats.regexLoopSteps += cost
		sr.matched, _ = matchNames(sr.re, names, nil)
		sr.gen, sr.resolved = gen, true
		return
	}
	sr.resolving = true
	c.inBackground(c.regexSem, func(stop <-chan struct{}) (any, bool) {
		return matchNames(sr.re, names, stop)
	}, func(res any) {
		sr.matched, sr.gen, sr.resolved, sr.resolving = res.([]string), gen, true, false
	})
}

// subscribedTopics returns the names of the topics the member subscribes
// to: its names, and every existing topic (internal ones included, as on
// Kafka) its regex matched when last resolved.
func (c *Cluster) subscribedTopics(m *consumerMember) []string {
	if m.re == nil {
		return m.topics
	}
	out := slices.Clone(m.topics)
	for _, name := range m.re.matched {
		if _, named := slices.BinarySearch(m.topics, name); !named && c.topics[name] != nil {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// subscribedTopicNames is the union of every member's subscribed topics.
func (c *Cluster) consumerSubscribedTopics(cg *consumerGroup) map[string]bool {
	out := make(map[string]bool)
	for _, m := range cg.members {
		for _, t := range c.subscribedTopics(m) {
			out[t] = true
		}
	}
	return out
}

// consumerMetadata fingerprints the topics the group subscribes to that
// exist: name, id and partition count.
func (c *Cluster) consumerMetadata(cg *consumerGroup) string {
	names := make([]string, 0)
	for name := range c.consumerSubscribedTopics(cg) {
		if c.topics[name] != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		t := c.topics[n]
		b.WriteString(n + ":" + uuidString(t.id) + ":" + strconv.Itoa(len(t.partitions)) + ";")
	}
	return b.String()
}

// preferredAssignor is the server assignor most members ask for (ties go
// to the name first in order), or the default, uniform.
func (cg *consumerGroup) preferredAssignor() string {
	counts := make(map[string]int)
	for _, m := range cg.members {
		if m.assignor != "" {
			counts[m.assignor]++
		}
	}
	best := ""
	for name, n := range counts {
		if best == "" || n > counts[best] || n == counts[best] && name < best {
			best = name
		}
	}
	if best == "" {
		return cgAssignorUniform
	}
	return best
}

// consumerSessionTimeout is the group's consumer.session.timeout.ms.
func (c *Cluster) consumerSessionTimeout(group string) time.Duration {
	n, _ := strconv.ParseInt(c.groupConfigValue(group, "consumer.session.timeout.ms"), 10, 64) // validated on the way in
	return time.Duration(n) * time.Millisecond
}

// consumerHeartbeatInterval is the group's consumer.heartbeat.interval.ms.
func (c *Cluster) consumerHeartbeatInterval(group string) time.Duration {
	n, _ := strconv.ParseInt(c.groupConfigValue(group, "consumer.heartbeat.interval.ms"), 10, 64)
	return time.Duration(n) * time.Millisecond
}

// empty reports whether the group has no members of either protocol: a
// consumer group's entry is always in the classic state Empty, so code
// that decides by the classic state alone (deleting or expiring groups)
// must ask this instead.
func (grp *classicGroup) empty() bool {
	if grp.consumer != nil {
		return len(grp.consumer.members) == 0
	}
	return grp.state == groupEmpty && len(grp.members) == 0
}

// consumerGroupFor returns the consumer group of name for a heartbeat.
// create (epoch 0) makes a new group, or converts a classic group without
// members; otherwise the name must already be a consumer group. A share
// group or a classic group with members of that name is
// GROUP_ID_NOT_FOUND.
func (g *groupCoordinator) consumerGroupFor(st *groupShard, name string, create bool) (*classicGroup, *kerr.Error, string) {
	grp := st.groups[name]
	switch {
	case grp != nil && grp.consumer != nil:
		return grp, nil, ""
	case !create && grp == nil:
		return nil, kerr.GroupIDNotFound, fmt.Sprintf("Consumer group %s not found.", name)
	case grp != nil && (!create || !grp.empty() || len(grp.pendingMembers) > 0):
		return nil, kerr.GroupIDNotFound, fmt.Sprintf("Group %s is not a consumer group.", name)
	case g.c.coordinators.share.groups[name] != nil:
		return nil, kerr.GroupIDNotFound, fmt.Sprintf("Group %s is not a consumer group.", name)
	}
	if grp == nil {
		grp = st.ensureGroup(name, time.Now())
		g.c.logger.Info("consumer group created", "group", name)
	} else {
		g.c.logger.Info("empty classic group converted to a consumer group", "group", name)
	}
	grp.consumer = newConsumerGroup()
	return grp, nil, ""
}

// toClassic turns a consumer group without members back into a classic
// group (JoinGroup to it), keeping its offsets.
func (g *groupCoordinator) toClassic(st *groupShard, grp *classicGroup, now time.Time) *kerr.Error {
	recs := []kv{consumerGroupRecord(grp.name, nil)}
	if _, err := g.appendRecords(st, recs, -1, -1, now); err != nil {
		return err
	}
	grp.consumer = nil
	g.c.logger.Info("empty consumer group converted to a classic group", "group", grp.name)
	return nil
}

// cgChanges collects what one operation changed in a consumer group, so
// that it is written as one batch of records at the end.
type cgChanges struct {
	members map[string]bool // true: write the member; false: tombstone it
}

func newCGChanges() *cgChanges { return &cgChanges{members: make(map[string]bool)} }

func (ch *cgChanges) touch(id string)  { ch.members[id] = true }
func (ch *cgChanges) remove(id string) { ch.members[id] = false }

// records encodes the changed members and the group's epochs.
func (ch *cgChanges) records(grp *classicGroup) []kv {
	ids := make([]string, 0, len(ch.members))
	for id := range ch.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	recs := make([]kv, 0, len(ids)+1)
	for _, id := range ids {
		var m *consumerMember
		if ch.members[id] {
			m = grp.consumer.members[id]
		}
		recs = append(recs, consumerMemberRecord(grp.name, id, m, grp.consumer.target[id]))
	}
	return append(recs, consumerGroupRecord(grp.name, grp.consumer))
}

// removeConsumerMember takes a member out of the group: the partitions it
// holds are free, the group epoch moves and the target assignment is
// computed again for the others.
func (g *groupCoordinator) removeConsumerMember(grp *classicGroup, m *consumerMember, why string, ch *cgChanges) {
	cg := grp.consumer
	delete(cg.members, m.id)
	delete(cg.target, m.id)
	if m.instanceID != nil && cg.static[*m.instanceID] == m.id {
		delete(cg.static, *m.instanceID)
	}
	for tp, owner := range cg.owners {
		if owner == m.id {
			delete(cg.owners, tp)
		}
	}
	ch.remove(m.id)
	if len(cg.members) == 0 {
		grp.stateSince = time.Now() // offset retention and deletion count from here
	}
	cg.epoch++
	g.c.logger.Info("consumer group member removed", "group", grp.name, "member", m.id, "why", why, "group_epoch", cg.epoch)
	g.c.updateTarget(grp, ch)
}

// sweepConsumerGroup fences the members whose session expired and those
// that did not revoke within their rebalance timeout.
func (g *groupCoordinator) sweepConsumerGroup(st *groupShard, grp *classicGroup, now time.Time) {
	cg := grp.consumer
	timeout := g.c.consumerSessionTimeout(grp.name)
	ch := newCGChanges()
	for _, m := range cg.orderedMembers() {
		why := ""
		switch {
		case now.Sub(m.lastSeen) > timeout:
			why = "session timed out"
		case m.state == cgUnrevoked && now.After(m.revokeBy):
			why = "did not revoke within its rebalance timeout"
		default:
			continue
		}
		g.removeConsumerMember(grp, m, why, ch)
	}
	if len(ch.members) == 0 {
		return
	}
	if _, err := g.appendRecords(st, ch.records(grp), -1, -1, now); err != nil {
		g.c.logger.Warn("could not record fenced consumer group members", "group", grp.name, "err", err)
	}
}

// newMemberUUID makes a member id as Kafka makes one for a v0 member that
// joins without one: a random UUID in Kafka's base64 form.
func newMemberUUID() string { return uuidString(newTopicID()) }
