package broker

// The classic group membership state machine: JoinGroup, SyncGroup,
// Heartbeat and LeaveGroup, and the timeouts that drive a rebalance.
//
// A group is Empty (no members), PreparingRebalance (collecting JoinGroups
// until every member has rejoined or the longest rebalance timeout has
// passed), CompletingRebalance (the generation is chosen; waiting for the
// leader's SyncGroup with the assignments, at most a rebalance timeout) or
// Stable. JoinGroup and SyncGroup answers are deferred: the member keeps the
// request and it is answered when the phase completes, from the run loop,
// which never blocks.

import (
	"crypto/rand"
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type groupState int8

const (
	groupEmpty groupState = iota
	groupPreparingRebalance
	groupCompletingRebalance
	groupStable
)

// String names the state as Kafka's DescribeGroups and ListGroups do.
func (s groupState) String() string {
	switch s {
	case groupPreparingRebalance:
		return "PreparingRebalance"
	case groupCompletingRebalance:
		return "CompletingRebalance"
	case groupStable:
		return "Stable"
	default:
		return "Empty"
	}
}

// classicGroup is one group's entry: its committed offsets and, unless
// consumer is set, its classic membership.
type classicGroup struct {
	name         string
	state        groupState
	protocolType string
	protocol     string
	generation   int32
	leader       string
	members      map[string]*groupMember
	// staticMembers maps a group.instance.id to its current member id.
	staticMembers map[string]string
	// pendingMembers are the member ids handed out with MEMBER_ID_REQUIRED,
	// each valid until its deadline; the join phase waits for them.
	pendingMembers map[string]time.Time
	offsets        map[groupTP]committedOffset
	joinDeadline   time.Time
	syncDeadline   time.Time
	nextJoinSeq    uint64
	// stateSince is when the group last became Empty (or was created).
	stateSince time.Time
	// record and recordOffset are the last group record written for the
	// group and where it sits in the log; compaction keeps it.
	record       []byte
	recordOffset int64
	timer        *timer // the group's next deadline (group_expiry.go)
	// consumer, when set, makes this a KIP-848 consumer group
	// (consumer_group.go): its membership is there, and the classic
	// fields above stay empty.
	consumer *consumerGroup
}

func newClassicGroup(name string) *classicGroup {
	return &classicGroup{
		name:           name,
		members:        make(map[string]*groupMember),
		staticMembers:  make(map[string]string),
		pendingMembers: make(map[string]time.Time),
		offsets:        make(map[groupTP]committedOffset),
	}
}

// groupMember is one member of a classic group.
type groupMember struct {
	id               string
	instanceID       *string
	clientID         string
	clientHost       string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocols        []kmsg.JoinGroupRequestProtocol
	// protocolIndex maps each protocol name to its first position in
	// protocols, built on first use, so that choosing the group's protocol
	// costs O(total protocols), not a scan per name (a JoinGroup under 1
	// MiB may name 80,000 protocols).
	protocolIndex map[string]int
	// protocolSteps counts index entries built and lookups: the work the
	// tests bound.
	protocolSteps   int
	assignment      []byte
	sessionDeadline time.Time
	// joinSeq orders members by when they joined: the earliest remaining
	// member becomes leader when the leader leaves.
	joinSeq uint64
	// join and sync are the requests waiting for this member's JoinGroup
	// and SyncGroup answers.
	join *request
	sync *request
}

// memberSpec is what a JoinGroup says about its member.
type memberSpec struct {
	instanceID       *string
	clientID         string
	clientHost       string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocolType     string
	protocols        []kmsg.JoinGroupRequestProtocol
}

func (m *groupMember) update(spec memberSpec) {
	m.instanceID = spec.instanceID
	m.clientID = spec.clientID
	m.clientHost = spec.clientHost
	m.sessionTimeout = spec.sessionTimeout
	m.rebalanceTimeout = spec.rebalanceTimeout
	m.protocols = spec.protocols
	m.protocolIndex = nil
}

func (m *groupMember) answerJoin(resp *kmsg.JoinGroupResponse) {
	if r := m.join; r != nil {
		m.join = nil
		r.respond(resp)
	}
}

func (m *groupMember) answerSync(resp *kmsg.SyncGroupResponse) {
	if r := m.sync; r != nil {
		m.sync = nil
		r.respond(resp)
	}
}

// protocolPos returns where protocol is in the member's protocols.
func (m *groupMember) protocolPos(protocol string) (int, bool) {
	m.protocolSteps++
	if m.protocolIndex == nil {
		m.protocolSteps += len(m.protocols)
		m.protocolIndex = make(map[string]int, len(m.protocols))
		for i, p := range m.protocols {
			if _, dup := m.protocolIndex[p.Name]; !dup {
				m.protocolIndex[p.Name] = i
			}
		}
	}
	i, ok := m.protocolIndex[protocol]
	return i, ok
}

func (m *groupMember) supports(protocol string) bool {
	_, ok := m.protocolPos(protocol)
	return ok
}

// metadataFor returns the member's metadata for a protocol, or nil.
func (m *groupMember) metadataFor(protocol string) []byte {
	if i, ok := m.protocolPos(protocol); ok {
		return m.protocols[i].Metadata
	}
	return nil
}

func sameProtocols(a, b []kmsg.JoinGroupRequestProtocol) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || string(a[i].Metadata) != string(b[i].Metadata) {
			return false
		}
	}
	return true
}

func joinError(err *kerr.Error) *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.ErrorCode = err.Code
	resp.Generation = -1
	return resp
}

func syncError(err *kerr.Error) *kmsg.SyncGroupResponse {
	resp := kmsg.NewPtrSyncGroupResponse()
	resp.ErrorCode = err.Code
	return resp
}

// newMemberID makes a member id as Kafka does: a prefix (the client id, or
// the group.instance.id of a static member), a dash, a random UUID.
func newMemberID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (grp *classicGroup) orderedMembers() []*groupMember {
	out := make([]*groupMember, 0, len(grp.members))
	for _, m := range grp.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].joinSeq < out[j].joinSeq })
	return out
}

func (grp *classicGroup) maxRebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range grp.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// acceptsProtocols reports whether a member (memberID, possibly new) with
// these protocols can be in the group: same protocol type, and at least one
// protocol every other member supports too.
func (grp *classicGroup) acceptsProtocols(memberID, protocolType string, protocols []kmsg.JoinGroupRequestProtocol) bool {
	others := 0
	for id := range grp.members {
		if id != memberID {
			others++
		}
	}
	if others == 0 {
		return true
	}
	if protocolType != grp.protocolType {
		return false
	}
	for _, p := range protocols {
		common := true
		for id, m := range grp.members {
			if id != memberID && !m.supports(p.Name) {
				common = false
				break
			}
		}
		if common {
			return true
		}
	}
	return false
}

// selectProtocol picks, among the protocols every member supports, the one
// most members prefer (each member votes for its first supported choice);
// ties go to the leader's or earliest member's preference order.
func (grp *classicGroup) selectProtocol() string {
	ordered := grp.orderedMembers()
	if l := grp.members[grp.leader]; l != nil {
		ordered = append([]*groupMember{l}, ordered...)
	}
	var candidates []string
	candidate := make(map[string]bool)
	for _, p := range ordered[0].protocols {
		all := true
		for _, m := range grp.members {
			if !m.supports(p.Name) {
				all = false
				break
			}
		}
		if all && !candidate[p.Name] {
			candidates = append(candidates, p.Name)
			candidate[p.Name] = true
		}
	}
	votes := make(map[string]int)
	for _, m := range grp.members {
		for _, p := range m.protocols {
			if candidate[p.Name] {
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for _, name := range candidates {
		if best == "" || votes[name] > votes[best] {
			best = name
		}
	}
	return best
}

// checkMember validates a request's member id and group.instance.id:
// UNKNOWN_MEMBER_ID for a member the group does not have, FENCED_INSTANCE_ID
// when the instance id belongs to another member id.
func (grp *classicGroup) checkMember(memberID string, instanceID *string) *kerr.Error {
	if instanceID != nil {
		owner, ok := grp.staticMembers[*instanceID]
		switch {
		case !ok:
			return kerr.UnknownMemberID
		case owner != memberID:
			return kerr.FencedInstanceID
		}
	}
	if grp.members[memberID] == nil {
		return kerr.UnknownMemberID
	}
	return nil
}

// joinResponse is the answer a member gets when the join phase completes
// (or when it rejoins a group whose generation is already chosen): the
// leader also gets every member's metadata for the chosen protocol.
func (grp *classicGroup) joinResponse(m *groupMember) *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Generation = grp.generation
	protocolType, protocol := grp.protocolType, grp.protocol
	resp.ProtocolType, resp.Protocol = &protocolType, &protocol
	resp.LeaderID = grp.leader
	resp.MemberID = m.id
	if m.id == grp.leader {
		for _, o := range grp.orderedMembers() {
			rm := kmsg.NewJoinGroupResponseMember()
			rm.MemberID = o.id
			rm.InstanceID = o.instanceID
			rm.ProtocolMetadata = o.metadataFor(grp.protocol)
			resp.Members = append(resp.Members, rm)
		}
	}
	return resp
}

// join serves a JoinGroup. It returns the answer, or nil when the member
// waits for the join phase to complete.
func (g *groupCoordinator) join(st *groupShard, r *request, req *kmsg.JoinGroupRequest, now time.Time) *kmsg.JoinGroupResponse {
	spec := memberSpec{
		instanceID:       req.InstanceID,
		clientID:         r.clientID,
		clientHost:       clientHost(r),
		sessionTimeout:   time.Duration(req.SessionTimeoutMillis) * time.Millisecond,
		rebalanceTimeout: time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond,
		protocolType:     req.ProtocolType,
		protocols:        req.Protocols,
	}
	if req.Version == 0 || spec.rebalanceTimeout <= 0 {
		spec.rebalanceTimeout = spec.sessionTimeout
	}
	switch {
	case req.Group == "":
		return joinError(kerr.InvalidGroupID)
	case spec.sessionTimeout <= 0 || spec.sessionTimeout > g.c.cfg.groupSessionTimeoutMax:
		return joinError(kerr.InvalidSessionTimeout)
	case req.ProtocolType == "" || len(req.Protocols) == 0:
		return joinError(kerr.InconsistentGroupProtocol)
	}
	grp := st.groups[req.Group]
	if grp != nil && grp.consumer != nil {
		if len(grp.consumer.members) > 0 {
			// Kafka would take a classic member into the consumer
			// group; that migration path is not implemented.
			return joinError(kerr.InconsistentGroupProtocol)
		}
		// As on Kafka, the group turns classic at the first JoinGroup,
		// even one answered with MEMBER_ID_REQUIRED.
		if err := g.toClassic(st, grp, now); err != nil {
			return joinError(err)
		}
	}
	if grp == nil {
		if req.MemberID != "" {
			return joinError(kerr.UnknownMemberID)
		}
		grp = st.ensureGroup(req.Group, now)
	}
	if !grp.acceptsProtocols(req.MemberID, req.ProtocolType, req.Protocols) {
		return joinError(kerr.InconsistentGroupProtocol)
	}
	if req.MemberID == "" {
		if req.InstanceID != nil {
			return g.joinStatic(st, grp, r, spec, now)
		}
		id := newMemberID(r.clientID)
		if req.Version >= 4 {
			// KIP-394: the member must come back with this id, so that a
			// client that never learns its id leaves no member behind.
			grp.pendingMembers[id] = now.Add(spec.sessionTimeout)
			resp := joinError(kerr.MemberIDRequired)
			resp.MemberID = id
			return resp
		}
		return g.addMember(st, grp, id, r, spec, now)
	}
	if _, ok := grp.pendingMembers[req.MemberID]; ok && req.InstanceID == nil {
		delete(grp.pendingMembers, req.MemberID)
		return g.addMember(st, grp, req.MemberID, r, spec, now)
	}
	if err := grp.checkMember(req.MemberID, req.InstanceID); err != nil {
		return joinError(err)
	}
	return g.rejoin(st, grp, grp.members[req.MemberID], r, spec, now)
}

// addMember adds a new member waiting for the join phase, which it starts
// if the group was not rebalancing.
func (g *groupCoordinator) addMember(st *groupShard, grp *classicGroup, id string, r *request, spec memberSpec, now time.Time) *kmsg.JoinGroupResponse {
	if len(grp.members) == 0 {
		grp.protocolType = spec.protocolType
	}
	m := &groupMember{id: id, joinSeq: grp.nextJoinSeq}
	grp.nextJoinSeq++
	m.update(spec)
	m.sessionDeadline = now.Add(spec.sessionTimeout)
	m.join = r
	grp.members[id] = m
	if spec.instanceID != nil {
		grp.staticMembers[*spec.instanceID] = id
	}
	g.startRebalance(grp, now)
	g.maybeCompleteJoin(st, grp, now)
	return nil
}

// joinStatic serves the JoinGroup of a static member that has no member id
// yet: a new instance is added; a known instance gets a new member id, its
// old id is fenced, and a restarted follower of a stable group whose
// protocols did not change keeps its assignment without a rebalance.
func (g *groupCoordinator) joinStatic(st *groupShard, grp *classicGroup, r *request, spec memberSpec, now time.Time) *kmsg.JoinGroupResponse {
	instance := *spec.instanceID
	newID := newMemberID(instance)
	oldID, known := grp.staticMembers[instance]
	if !known {
		return g.addMember(st, grp, newID, r, spec, now)
	}
	m := grp.members[oldID]
	m.answerJoin(joinError(kerr.FencedInstanceID))
	m.answerSync(syncError(kerr.FencedInstanceID))
	delete(grp.members, oldID)
	m.id = newID
	grp.members[newID] = m
	grp.staticMembers[instance] = newID
	if grp.leader == oldID {
		grp.leader = newID
	}
	unchanged := sameProtocols(m.protocols, spec.protocols)
	m.update(spec)
	m.sessionDeadline = now.Add(spec.sessionTimeout)
	if grp.state == groupStable && unchanged && grp.leader != newID {
		if err := g.persistGroup(st, grp, now); err != nil {
			g.startRebalance(grp, now)
			return joinError(err)
		}
		return grp.joinResponse(m)
	}
	m.join = r
	g.startRebalance(grp, now)
	g.maybeCompleteJoin(st, grp, now)
	return nil
}

// rejoin serves the JoinGroup of a known member.
func (g *groupCoordinator) rejoin(st *groupShard, grp *classicGroup, m *groupMember, r *request, spec memberSpec, now time.Time) *kmsg.JoinGroupResponse {
	m.sessionDeadline = now.Add(spec.sessionTimeout)
	unchanged := sameProtocols(m.protocols, spec.protocols)
	switch {
	case grp.state == groupCompletingRebalance && unchanged,
		grp.state == groupStable && unchanged && m.id != grp.leader:
		// The member missed the answer of the current generation, or
		// rejoins for nothing: the generation stands.
		m.update(spec)
		return grp.joinResponse(m)
	}
	m.update(spec)
	m.answerJoin(joinError(kerr.RebalanceInProgress)) // superseded by this request
	m.join = r
	g.startRebalance(grp, now)
	g.maybeCompleteJoin(st, grp, now)
	return nil
}

// startRebalance moves a group into PreparingRebalance unless it is there
// already; waiting SyncGroups learn that the generation they sync is gone.
func (g *groupCoordinator) startRebalance(grp *classicGroup, now time.Time) {
	if grp.state == groupPreparingRebalance {
		return
	}
	for _, m := range grp.members {
		m.answerSync(syncError(kerr.RebalanceInProgress))
	}
	grp.state = groupPreparingRebalance
	grp.joinDeadline = now.Add(grp.maxRebalanceTimeout())
}

// maybeCompleteJoin ends the join phase once every member has rejoined and
// no member id handed out with MEMBER_ID_REQUIRED is outstanding.
func (g *groupCoordinator) maybeCompleteJoin(st *groupShard, grp *classicGroup, now time.Time) {
	if grp.state != groupPreparingRebalance || len(grp.pendingMembers) > 0 {
		return
	}
	for _, m := range grp.members {
		if m.join == nil {
			return
		}
	}
	g.completeJoin(st, grp, now)
}

// completeJoin ends the join phase: members that did not rejoin are
// removed, the generation advances, and every member learns it (the leader
// with everyone's metadata). A group left without members becomes Empty.
func (g *groupCoordinator) completeJoin(st *groupShard, grp *classicGroup, now time.Time) {
	for _, m := range grp.members {
		if m.join == nil {
			grp.removeMember(m)
		}
	}
	grp.generation++
	if len(grp.members) == 0 {
		grp.state, grp.protocol, grp.leader = groupEmpty, "", ""
		grp.stateSince = now
		if err := g.persistGroup(st, grp, now); err != nil {
			g.c.logger.Warn("could not record empty group", "group", grp.name, "err", err)
		}
		return
	}
	grp.protocol = grp.selectProtocol()
	ordered := grp.orderedMembers()
	if grp.members[grp.leader] == nil {
		grp.leader = ordered[0].id
	}
	grp.state = groupCompletingRebalance
	grp.syncDeadline = now.Add(grp.maxRebalanceTimeout())
	for _, m := range ordered {
		m.assignment = nil
		m.sessionDeadline = now.Add(m.sessionTimeout)
		m.answerJoin(grp.joinResponse(m))
	}
	g.c.logger.Debug("group join completed", "group", grp.name, "generation", grp.generation, "members", len(ordered), "protocol", grp.protocol)
}

// removeMember drops a member; its waiting requests learn it is gone.
func (grp *classicGroup) removeMember(m *groupMember) {
	m.answerJoin(joinError(kerr.UnknownMemberID))
	m.answerSync(syncError(kerr.UnknownMemberID))
	delete(grp.members, m.id)
	if m.instanceID != nil && grp.staticMembers[*m.instanceID] == m.id {
		delete(grp.staticMembers, *m.instanceID)
	}
}

// membersGone rebalances a group after members left or expired.
func (g *groupCoordinator) membersGone(st *groupShard, grp *classicGroup, now time.Time) {
	if grp.state == groupEmpty {
		return
	}
	g.startRebalance(grp, now)
	g.maybeCompleteJoin(st, grp, now)
}

// clientHost renders the client's address as Kafka does ("/host").
func clientHost(r *request) string {
	if r.cc == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(r.cc.conn.RemoteAddr().String())
	if err != nil {
		return ""
	}
	return "/" + host
}
