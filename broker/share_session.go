package broker

// Share sessions (KIP-932): one per (group, member, node). A ShareFetch
// with epoch 0 opens one (replacing, and releasing the records of, any
// session the member had at that node), later requests must carry the
// session's next epoch, and epoch -1 closes it and releases what the
// member still holds in its partitions at that node. Both ShareFetch and
// ShareAcknowledge move the epoch on. A session lists the partitions its
// fetches acquire from; a fetch with nothing to hand out waits, up to its
// MaxWaitMillis, for records to arrive or be released.

import (
	"math"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type shareSessionKey struct {
	group, member string
	node          int32
}

// shareTP names a partition by topic id.
type shareTP struct {
	topicID   [16]byte
	partition int32
}

type shareSession struct {
	key    shareSessionKey
	member *shareMember
	epoch  int32 // the epoch the next request must carry
	parts  map[shareTP]struct{}
	wait   *shareFetchWait // a ShareFetch parked on the session
}

func (s *shareSession) bump() {
	if s.epoch == math.MaxInt32 {
		s.epoch = 1
		return
	}
	s.epoch++
}

// sorted returns the session's partitions in a stable order,
// rotated by the epoch so that a small MaxRecords does not starve the
// partitions at the end.
func (s *shareSession) sorted() []shareTP {
	out := make([]shareTP, 0, len(s.parts))
	for tp := range s.parts {
		out = append(out, tp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topicID != out[j].topicID {
			return string(out[i].topicID[:]) < string(out[j].topicID[:])
		}
		return out[i].partition < out[j].partition
	})
	if n := len(out); n > 1 {
		k := int(s.epoch) % n
		out = append(out[k:], out[:k]...)
	}
	return out
}

// openSession starts a new session for key, a member of the group.
func (sc *shareCoordinator) openSession(key shareSessionKey, m *shareMember, now time.Time) *shareSession {
	if old := sc.sessions[key]; old != nil {
		sc.closeSession(old, now)
	}
	s := &shareSession{key: key, member: m, parts: make(map[shareTP]struct{})}
	sc.sessions[key] = s
	if m.sessions == nil {
		m.sessions = make(map[int32]*shareSession)
	}
	m.sessions[key.node] = s
	return s
}

// session returns the open session a request with epoch continues.
func (sc *shareCoordinator) session(key shareSessionKey, epoch int32) (*shareSession, *kerr.Error) {
	s := sc.sessions[key]
	switch {
	case s == nil:
		return nil, kerr.ShareSessionNotFound
	case epoch != -1 && epoch != s.epoch:
		return nil, kerr.InvalidShareSessionEpoch
	}
	return s, nil
}

// shareCall is where a ShareFetch or a ShareAcknowledge stands once the
// checks both open with have passed.
type shareCall struct {
	group, member string
	// lockMillis is the group's acquisition lock, which both answers
	// carry, failed or not, once they name a group.
	lockMillis int32
	session    *shareSession
}

// beginShareCall runs the checks ShareFetch and ShareAcknowledge open
// with: both name a group and a member (INVALID_REQUEST without); epoch 0
// opens a new session for a member of the group when opens is set
// (ShareFetch; UNKNOWN_MEMBER_ID for anyone else) and is
// INVALID_SHARE_SESSION_EPOCH otherwise; any other epoch continues the
// member's session at node (SHARE_SESSION_NOT_FOUND,
// INVALID_SHARE_SESSION_EPOCH). On an error, call holds what was learned
// before it.
func (sc *shareCoordinator) beginShareCall(node int32, groupID, memberID *string, epoch int32, opens bool, now time.Time) (call shareCall, err *kerr.Error, msg string) {
	call.group, call.member = shareStringOrEmpty(groupID), shareStringOrEmpty(memberID)
	if call.group == "" || call.member == "" {
		return call, kerr.InvalidRequest, "GroupID and MemberID are required"
	}
	call.lockMillis = int32(sc.lockDuration(call.group).Milliseconds())
	key := shareSessionKey{group: call.group, member: call.member, node: node}
	switch {
	case epoch == 0 && !opens:
		return call, kerr.InvalidShareSessionEpoch, "acknowledgements need an open share session"
	case epoch == 0:
		g := sc.groups[call.group]
		if g == nil || g.members[call.member] == nil {
			return call, kerr.UnknownMemberID, "the member is not in the share group"
		}
		call.session = sc.openSession(key, g.members[call.member], now)
	default:
		if call.session, err = sc.session(key, epoch); err != nil {
			return call, err, ""
		}
	}
	return call, nil, ""
}

func shareStringOrEmpty(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// closeSession ends a session and releases the member's records in its
// partitions at the session's node.
func (sc *shareCoordinator) closeSession(s *shareSession, now time.Time) {
	sc.endSession(s)
	sc.releaseMemberRecords(s.key.group, s.key.member, s.key.node, s.parts, now)
}

// endSession forgets a session; a ShareFetch parked on it is answered with
// what it has.
func (sc *shareCoordinator) endSession(s *shareSession) {
	if sc.sessions[s.key] == s {
		delete(sc.sessions, s.key)
	}
	if s.member.sessions[s.key.node] == s {
		delete(s.member.sessions, s.key.node)
	}
	if s.wait != nil {
		s.wait.answer()
	}
}

// shareFetchWait is a ShareFetch parked until records can be acquired or
// its wait ends. Its piggybacked acknowledgements were already applied.
type shareFetchWait struct {
	sc       *shareCoordinator
	r        *request
	session  *shareSession
	ans      *shareFetchAnswer
	limits   shareFetchLimits
	watched  []*partition
	deadline *timer
}

// shareFetchLimits bounds one ShareFetch.
type shareFetchLimits struct {
	maxRecords   int
	maxBytes     int
	wholeBatches bool // batch-optimized acquire mode (acquireLimits)
}

// park waits for records in the session's partitions.
func (sc *shareCoordinator) park(r *request, s *shareSession, ans *shareFetchAnswer, lim shareFetchLimits, wait time.Duration, now time.Time) {
	w := &shareFetchWait{sc: sc, r: r, session: s, ans: ans, limits: lim}
	for tp := range s.parts {
		if t := sc.c.topicsByID[tp.topicID]; t != nil && tp.partition >= 0 && int(tp.partition) < len(t.partitions) {
			p := t.partitions[tp.partition]
			w.watched = append(w.watched, p)
			sc.c.watch(p, w)
		}
	}
	s.wait = w
	w.deadline = newTimer(func(time.Time) { w.answer() })
	sc.c.arm(w.deadline, now.Add(wait))
}

// partitionChanged looks for records in p, and answers once it acquires
// some or a partition reports an error.
func (w *shareFetchWait) partitionChanged(p *partition, now time.Time) {
	sc, s := w.sc, w.session
	key := shareKey{group: s.key.group, topicID: p.topic.id, partition: p.index}
	if sp := sc.live[key]; sp != nil && sp.current() && !p.deleted && !sp.hasWork(sc.acquireLimits(s.key.group, w.limits)) {
		return
	}
	if n, errs := sc.fetchInto(w.r.node.id, s, w.limits, w.ans, now); n > 0 || errs {
		w.answer()
	}
}

// answer sends what the fetch has and forgets the wait.
func (w *shareFetchWait) answer() {
	for _, p := range w.watched {
		w.sc.c.unwatch(p, w)
	}
	w.watched = nil
	w.sc.c.disarm(w.deadline)
	if w.session.wait == w {
		w.session.wait = nil
	}
	w.r.respond(w.ans)
}

// acquireLimits is what one acquisition of the group may take.
func (sc *shareCoordinator) acquireLimits(group string, lim shareFetchLimits) acquireLimits {
	return acquireLimits{
		maxRecords:    lim.maxRecords,
		maxBytes:      lim.maxBytes,
		lock:          sc.lockDuration(group),
		limit:         sc.deliveryLimit(group),
		readCommitted: sc.readCommitted(group),
		maxLocks:      sc.maxRecordLocks(group),
		wholeBatches:  lim.wholeBatches,
	}
}

// shareFetchAnswer is a ShareFetch response whose record bytes are copied
// from the stored batches by the connection's goroutine (prepare).
type shareFetchAnswer struct {
	*kmsg.ShareFetchResponse
	fills []shareFetchFill
	// topicIndex and partIndex locate the answer's entries (partition).
	topicIndex map[[16]byte]int
	partIndex  map[shareTP]int
}

type shareFetchFill struct {
	tp      shareTP
	batches []*storedBatch
}

// prepare copies the batches into the answer; it runs off the loop.
func (a *shareFetchAnswer) prepare() kmsg.Response {
	for tp, batches := range a.byPartition() {
		n := 0
		for _, b := range batches {
			n += len(b.raw)
		}
		rp := a.partition(tp)
		rp.Records = make([]byte, 0, n)
		for _, b := range batches {
			rp.Records = append(rp.Records, b.raw...)
		}
	}
	a.fills = nil
	return a.ShareFetchResponse
}

// byPartition gathers the fills by partition (a parked fetch may fill one
// partition twice), in the order they were filled.
func (a *shareFetchAnswer) byPartition() map[shareTP][]*storedBatch {
	out := make(map[shareTP][]*storedBatch, len(a.fills))
	for _, f := range a.fills {
		out[f.tp] = append(out[f.tp], f.batches...)
	}
	return out
}

// splice marks the partitions with batches (splice.go).
func (a *shareFetchAnswer) splice(mark func(int) []byte) (kmsg.Response, [][]*storedBatch) {
	var out [][]*storedBatch
	for tp, batches := range a.byPartition() {
		a.partition(tp).Records = mark(len(out))
		out = append(out, batches)
	}
	return a.ShareFetchResponse, out
}

// fetchInto acquires records for the session's member from the session's
// partitions into resp. It returns how many records it acquired and
// whether a partition reported an error.
func (sc *shareCoordinator) fetchInto(node int32, s *shareSession, lim shareFetchLimits, ans *shareFetchAnswer, now time.Time) (int, bool) {
	resp := ans.ShareFetchResponse
	total, bytes, errs := 0, 0, false
	group, member := s.key.group, s.key.member
	for _, tp := range s.sorted() {
		if total >= lim.maxRecords || bytes >= lim.maxBytes {
			break
		}
		t := sc.c.topicsByID[tp.topicID]
		var p *partition
		var perr *kerr.Error
		switch {
		case t == nil:
			perr = kerr.UnknownTopicID
		case tp.partition < 0 || int(tp.partition) >= len(t.partitions):
			perr = kerr.UnknownTopicOrPartition
		default:
			p = t.partitions[tp.partition]
		}
		var sp *sharePartition
		if perr == nil {
			sp, perr = sc.livePartition(shareKey{group: group, topicID: tp.topicID, partition: tp.partition}, p, node, now)
		}
		if perr != nil {
			rp := ans.partition(tp)
			if rp.ErrorCode == 0 {
				rp.ErrorCode = perr.Code
				if perr == kerr.NotLeaderForPartition {
					rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = p.leader, p.leaderEpoch
					sc.addShareFetchEndpoint(resp, p.leader)
				}
			}
			errs = true
			continue
		}
		alim := sc.acquireLimits(group, shareFetchLimits{maxRecords: lim.maxRecords - total, maxBytes: lim.maxBytes - bytes, wholeBatches: lim.wholeBatches})
		if !sp.hasWork(alim) {
			continue
		}
		ranges, batches := sp.acquire(member, alim, now)
		sc.flush(sp, now)
		if len(ranges) == 0 {
			continue
		}
		rp := ans.partition(tp)
		for _, b := range batches {
			bytes += len(b.raw)
		}
		ans.fills = append(ans.fills, shareFetchFill{tp: tp, batches: batches})
		rp.AcquiredRecords = append(rp.AcquiredRecords, ranges...)
		for _, ar := range ranges {
			total += int(ar.LastOffset - ar.FirstOffset + 1)
		}
	}
	return total, errs
}

// partition returns the answer's entry for tp, adding it if absent. The
// entries are indexed: an answer may name every partition of a session,
// and a scan per partition made building it quadratic (a ShareFetch of
// 80,000 partitions once stopped the loop for seconds).
func (a *shareFetchAnswer) partition(tp shareTP) *kmsg.ShareFetchResponseTopicPartition {
	resp := a.ShareFetchResponse
	if a.topicIndex == nil {
		a.topicIndex = make(map[[16]byte]int)
		a.partIndex = make(map[shareTP]int)
		for ti, rt := range resp.Topics {
			a.topicIndex[rt.TopicID] = ti
			for pi, rp := range rt.Partitions {
				a.partIndex[shareTP{topicID: rt.TopicID, partition: rp.Partition}] = pi
			}
		}
	}
	ti, ok := a.topicIndex[tp.topicID]
	if !ok {
		rt := kmsg.NewShareFetchResponseTopic()
		rt.TopicID = tp.topicID
		resp.Topics = append(resp.Topics, rt)
		ti = len(resp.Topics) - 1
		a.topicIndex[tp.topicID] = ti
	}
	rt := &resp.Topics[ti]
	if pi, ok := a.partIndex[tp]; ok {
		return &rt.Partitions[pi]
	}
	rp := kmsg.NewShareFetchResponseTopicPartition()
	rp.Partition = tp.partition
	rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	a.partIndex[tp] = len(rt.Partitions) - 1
	return &rt.Partitions[len(rt.Partitions)-1]
}

func (sc *shareCoordinator) addShareFetchEndpoint(resp *kmsg.ShareFetchResponse, id int32) {
	for _, ep := range resp.NodeEndpoints {
		if ep.NodeID == id {
			return
		}
	}
	n := sc.c.nodeByID(id)
	ep := kmsg.NewShareFetchResponseNodeEndpoint()
	ep.NodeID, ep.Host, ep.Port = n.id, n.host, n.port
	resp.NodeEndpoints = append(resp.NodeEndpoints, ep)
}
