package broker

// Share group membership (KIP-932), served by the group coordinator: the
// node leading the group's __consumer_offsets partition, checked before
// every answer. Membership is held by the cluster rather than written to
// __consumer_offsets: Kafka persists it there so that a new coordinator
// replays it, and here a coordinator move keeps it the same way.
//
// Assignment is KIP-932's simple assignor in its degenerate form: every
// member gets every partition of every topic it subscribes to. The group
// epoch moves by one when a member leaves or is fenced, when a member's
// subscription changes (a new member's first one included) and when the
// subscribed topics' metadata changes (a new group's first subscription
// included, which is why a new group's first member gets epoch 2, as on
// Kafka); a member takes the group epoch at its next heartbeat, and a
// heartbeat at its previous epoch is still accepted.

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

type shareGroup struct {
	name    string
	epoch   int32
	members map[string]*shareMember
	// metadata fingerprints the subscribed topics' ids and partition
	// counts, so a topic created, deleted or grown moves the epoch.
	metadata string
	// sessions are the group's share sessions, by member id and node.
	// They outlive the member's time in the group (share_session.go).
	sessions map[string]map[int32]*shareSession
}

type shareMember struct {
	id         string
	epoch      int32
	prevEpoch  int32 // the epoch before the current one (0 when none)
	joinEpoch  int32 // the first epoch the member took
	clientID   string
	clientHost string
	rack       *string
	topics     []string // sorted
	assigned   []kmsg.ShareGroupHeartbeatResponseAssignmentTopicPartition
	lastSeen   time.Time
	session    *timer // fires when the member's session times out
}

// shareGroupState is the state ShareGroupDescribe and ListGroups report.
func (g *shareGroup) state() string {
	if len(g.members) == 0 {
		return "Empty"
	}
	return "Stable"
}

// groupCoordinatorError is NOT_COORDINATOR unless node leads the group's
// __consumer_offsets partition.
func (c *Cluster) groupCoordinatorError(node int32, group string) *kerr.Error {
	p := c.coordinatorPartitionFor(coordinatorGroup, group)
	if p == nil || p.leader != node {
		return kerr.NotCoordinator
	}
	return nil
}

// shareAssignment is what a member subscribed to topics gets: every
// partition of each existing topic, by topic name.
func (c *Cluster) shareAssignment(topics []string) []kmsg.ShareGroupHeartbeatResponseAssignmentTopicPartition {
	var out []kmsg.ShareGroupHeartbeatResponseAssignmentTopicPartition
	for _, name := range topics {
		t := c.topics[name]
		if t == nil || t.internal {
			continue
		}
		tp := kmsg.NewShareGroupHeartbeatResponseAssignmentTopicPartition()
		tp.TopicID = t.id
		for i := range t.partitions {
			tp.Partitions = append(tp.Partitions, int32(i))
		}
		out = append(out, tp)
	}
	return out
}

func sameShareAssignment(a, b []kmsg.ShareGroupHeartbeatResponseAssignmentTopicPartition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].TopicID != b[i].TopicID || len(a[i].Partitions) != len(b[i].Partitions) {
			return false
		}
	}
	return true
}

// metadataFingerprint describes the topics the members subscribe to.
func (c *Cluster) metadataFingerprint(g *shareGroup) string {
	names := map[string]bool{}
	for _, m := range g.members {
		for _, t := range m.topics {
			names[t] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var b strings.Builder
	for _, n := range sorted {
		if t := c.topics[n]; t != nil {
			fmt.Fprintf(&b, "%s:%s:%d;", n, uuidString(t.id), len(t.partitions))
		}
	}
	return b.String()
}

// heartbeat runs one ShareGroupHeartbeat at the coordinator, answering as
// Kafka 4.4 does: a non-zero epoch needs the group (GROUP_ID_NOT_FOUND)
// and the member (UNKNOWN_MEMBER_ID); epoch 0 joins, or rejoins an
// existing member keeping its epoch unless its subscription changed; any
// other epoch must be the member's current or previous one (the client
// lost the answer that raised it), else FENCED_MEMBER_EPOCH.
func (sc *shareCoordinator) heartbeat(r *request, req *kmsg.ShareGroupHeartbeatRequest, resp *kmsg.ShareGroupHeartbeatResponse, now time.Time) (*kerr.Error, string) {
	g := sc.groups[req.GroupID]
	var m *shareMember
	if g != nil {
		m = g.members[req.MemberID]
	}
	switch {
	case req.MemberEpoch < -1:
		return kerr.InvalidRequest, fmt.Sprintf("member epoch %d", req.MemberEpoch)
	case req.MemberEpoch == 0 && len(req.SubscribedTopicNames) == 0:
		return kerr.InvalidRequest, "a member joining (epoch 0) must subscribe to at least one topic"
	case req.MemberEpoch != 0 && g == nil:
		return kerr.GroupIDNotFound, fmt.Sprintf("share group %q does not exist", req.GroupID)
	case req.MemberEpoch != 0 && m == nil:
		return kerr.UnknownMemberID, "the member is not in the group"
	case req.MemberEpoch == -1:
		sc.removeMember(g, m, "left")
		resp.MemberID = kmsg.StringPtr(m.id)
		resp.MemberEpoch = -1
		return nil, ""
	case req.MemberEpoch == 0:
		if st, err := sc.c.coordinators.group.shardFor(r.node.id, req.GroupID); g == nil && err == nil && st.groups[req.GroupID] != nil {
			return kerr.GroupIDNotFound, fmt.Sprintf("group %q is a classic group, not a share group", req.GroupID)
		}
		if g == nil {
			g = &shareGroup{name: req.GroupID, members: make(map[string]*shareMember)}
			sc.groups[g.name] = g
			sc.c.logger.Info("share group created", "group", g.name)
		}
		if m == nil {
			m = &shareMember{id: req.MemberID}
			g.members[m.id] = m
			sc.c.logger.Info("share group member joined", "group", g.name, "member", m.id)
		}
	case req.MemberEpoch != m.epoch && (req.MemberEpoch > m.epoch || req.MemberEpoch != m.prevEpoch):
		return kerr.FencedMemberEpoch, fmt.Sprintf("member epoch %d is neither the current %d nor the previous %d", req.MemberEpoch, m.epoch, m.prevEpoch)
	}
	if req.SubscribedTopicNames != nil {
		topics := append([]string(nil), req.SubscribedTopicNames...)
		sort.Strings(topics)
		if strings.Join(topics, ",") != strings.Join(m.topics, ",") {
			m.topics = topics
			g.bump(m)
		}
	}
	if req.RackID != nil {
		m.rack = req.RackID
	}
	m.clientID = r.clientID
	if r.cc != nil {
		m.clientHost = r.cc.conn.RemoteAddr().String()
	}
	m.lastSeen = now
	sc.armSession(g, m)
	if fp := sc.c.metadataFingerprint(g); fp != g.metadata {
		g.metadata = fp
		g.bump(m)
	}
	g.catchUp(m)
	assignment := sc.c.shareAssignment(m.topics)
	if req.MemberEpoch == 0 || req.SubscribedTopicNames != nil || !sameShareAssignment(assignment, m.assigned) {
		resp.Assignment = &kmsg.ShareGroupHeartbeatResponseAssignment{TopicPartitions: assignment}
		m.assigned = assignment
		sc.initAssigned(g.name, assignment, now)
	}
	resp.MemberID = &m.id
	resp.MemberEpoch = m.epoch
	resp.HeartbeatIntervalMillis = int32(sc.heartbeatInterval(g.name).Milliseconds())
	return nil, ""
}

// bump moves the group epoch on for a change the heartbeating member m
// made (its subscription, or the subscribed topics' metadata it was the
// first to see), and m with it.
func (g *shareGroup) bump(m *shareMember) {
	g.epoch++
	g.catchUp(m)
}

// catchUp gives m the group epoch, remembering the epoch it had: a
// heartbeat at that previous epoch is still accepted.
func (g *shareGroup) catchUp(m *shareMember) {
	if m.epoch == g.epoch {
		return
	}
	m.prevEpoch, m.epoch = m.epoch, g.epoch
	if m.joinEpoch == 0 {
		m.joinEpoch = m.epoch
	}
}

// shareInitsPerTurn bounds the share-partitions whose state one turn of
// the loop initializes (each writes a __share_group_state record), and
// shareInitChecksPerTurn the assigned partitions one turn looks at: a
// member subscribing to 20 topics of 10,000 partitions once stopped the
// loop for 8 s initializing all 200,000 at once.
const (
	shareInitsPerTurn      = 250
	shareInitChecksPerTurn = 20000
)

// shareInitJob is the share-partitions of a group still to initialize.
type shareInitJob struct {
	keys []shareKey
	next int
}

// initAssigned initializes the share state of newly assigned partitions,
// as Kafka's group coordinator does when it first assigns them, so that
// share.auto.offset.reset=latest starts where the group began reading. It
// does a bounded slice now and the rest in later turns of the loop (Kafka
// also initializes them asynchronously); a fetch that comes first
// initializes its own partition (livePartition). A newer assignment of the
// same group replaces the work still pending.
func (sc *shareCoordinator) initAssigned(group string, assignment []kmsg.ShareGroupHeartbeatResponseAssignmentTopicPartition, now time.Time) {
	job := &shareInitJob{}
	for _, tp := range assignment {
		for _, i := range tp.Partitions {
			job.keys = append(job.keys, shareKey{group: group, topicID: tp.TopicID, partition: i})
		}
	}
	_, pending := sc.initJobs[group]
	sc.initJobs[group] = job
	if !pending {
		sc.initSlice(group, now)
	}
}

// initSlice does one turn's share of group's pending initializations and
// schedules the next turn when some remain.
func (sc *shareCoordinator) initSlice(group string, now time.Time) {
	job := sc.initJobs[group]
	if job == nil {
		return
	}
	inits := 0
	for checks := 0; job.next < len(job.keys) && inits < shareInitsPerTurn && checks < shareInitChecksPerTurn; checks++ {
		key := job.keys[job.next]
		job.next++
		t := sc.c.topicsByID[key.topicID]
		if t == nil || int(key.partition) >= len(t.partitions) || sc.groups[group] == nil {
			continue
		}
		if sh, err := sc.stateShard(key); err == nil && sh.state.parts[key] != nil {
			continue
		}
		inits++
		switch err := sc.initState(key, t.partitions[key.partition], now); err {
		case nil:
		case kerr.OffsetNotAvailable:
			// by_duration found no record recent enough; every
			// fetch tries again, as on Kafka.
			sc.c.logger.Debug("share state not initialized yet", "key", key.String(), "err", err)
		default:
			sc.c.logger.Warn("share state not initialized", "key", key.String(), "err", err)
		}
	}
	sc.c.stats.shareInitsMaxTurn = max(sc.c.stats.shareInitsMaxTurn, inits)
	if job.next >= len(job.keys) {
		delete(sc.initJobs, group)
		return
	}
	sc.c.after(0, func() { sc.initSlice(group, time.Now()) })
}

// removeMember takes a member out of its group. As on Kafka, where the
// group coordinator does not tell the share-partition leaders, this
// releases nothing: the member keeps what it holds, and its share
// sessions serve it, until a session closes, its connection closes, or the
// locks expire (share_session.go). Sessions no connection would release
// end.
func (sc *shareCoordinator) removeMember(g *shareGroup, m *shareMember, why string) {
	delete(g.members, m.id)
	g.epoch++
	sc.c.disarm(m.session)
	sc.memberRemoved(g, m.id)
	sc.c.logger.Info("share group member removed", "group", g.name, "member", m.id, "why", why, "group_epoch", g.epoch)
}

// armSession arms the member's session timer: it is fenced once it has not
// heartbeated for the group's session timeout.
func (sc *shareCoordinator) armSession(g *shareGroup, m *shareMember) {
	if m.session == nil {
		m.session = newTimer(func(now time.Time) {
			if g.members[m.id] != m || sc.groups[g.name] != g {
				return
			}
			if now.Sub(m.lastSeen) >= sc.sessionTimeout(g.name) {
				sc.removeMember(g, m, "session timed out")
				return
			}
			sc.armSession(g, m)
		})
	}
	sc.c.arm(m.session, m.lastSeen.Add(sc.sessionTimeout(g.name)))
}

// checkMemberEpoch validates a member and epoch for a transactional
// acknowledgement, as the draft of KIP-1289 does: the member must be in the
// group (UNKNOWN_MEMBER_ID) at its current epoch. An older epoch is
// STALE_MEMBER_EPOCH (a heartbeat moved the member on; the client retries
// with the epoch it now has), a newer one FENCED_MEMBER_EPOCH (an epoch the
// member never had).
func (sc *shareCoordinator) checkMemberEpoch(group, member string, epoch int32) (*kerr.Error, string) {
	g := sc.groups[group]
	if g == nil {
		return kerr.UnknownMemberID, fmt.Sprintf("share group %q does not exist", group)
	}
	m := g.members[member]
	if m == nil {
		return kerr.UnknownMemberID, fmt.Sprintf("member %q is not in share group %q", member, group)
	}
	switch {
	case epoch < m.epoch:
		return kerr.StaleMemberEpoch, fmt.Sprintf("member epoch %d is older than the member's current epoch %d", epoch, m.epoch)
	case epoch > m.epoch:
		return kerr.FencedMemberEpoch, fmt.Sprintf("member epoch %d is newer than the member's current epoch %d", epoch, m.epoch)
	}
	return nil, ""
}

// shareStateKeys returns every initialized share-partition of a group, as
// the share coordinators know them.
func (sc *shareCoordinator) shareStateKeys(group string) []shareKey {
	var out []shareKey
	for _, p := range sc.c.topics[wire.ShareGroupStateTopic].partitions {
		sh, err := sc.states.lookup(p.leader, p.index)
		if err != nil {
			continue
		}
		for key := range sh.state.parts {
			if key.group == group {
				out = append(out, key)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topicID != out[j].topicID {
			return string(out[i].topicID[:]) < string(out[j].topicID[:])
		}
		return out[i].partition < out[j].partition
	})
	return out
}

// deleteShareGroup deletes an empty share group and its share state (a
// tombstone per share-partition in __share_group_state; staged
// acknowledgements of open transactions go with it). It returns
// GROUP_ID_NOT_FOUND if no share group has that name and NON_EMPTY_GROUP
// if it has members. The caller (DeleteGroups) checks that this node
// coordinates the group.
func (c *Cluster) deleteShareGroup(name string) *kerr.Error {
	sc := c.coordinators.share
	g := sc.groups[name]
	if g == nil {
		return kerr.GroupIDNotFound
	}
	if len(g.members) > 0 {
		return kerr.NonEmptyGroup
	}
	now := time.Now()
	for _, key := range sc.shareStateKeys(name) {
		if err := sc.writeState(key, nil, -1, -1, now); err != nil {
			return err
		}
	}
	for key := range sc.liveByGroup[name] {
		sc.dropLive(key)
	}
	// Sessions of members that left go with the group: their state is
	// gone, and a fetch in them must not start it again.
	for _, byNode := range g.sessions {
		for _, s := range byNode {
			sc.endSession(s)
		}
	}
	delete(sc.groups, name)
	c.logger.Info("share group deleted", "group", name)
	return nil
}

// shareGroupStates returns every share group's name and state (Empty or
// Stable), for ListGroups.
func (c *Cluster) shareGroupStates() map[string]string {
	out := make(map[string]string, len(c.coordinators.share.groups))
	for name, g := range c.coordinators.share.groups {
		out[name] = g.state()
	}
	return out
}
