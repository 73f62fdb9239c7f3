package broker

// Share sessions (KIP-932): one per (group, member, node). A ShareFetch
// with epoch 0 opens one, later requests must carry the session's next
// epoch, and both ShareFetch and ShareAcknowledge move the epoch on. A
// session lists the partitions its fetches acquire from; a fetch with
// nothing to hand out waits, up to its MaxWaitMillis, for records to
// arrive or be released.
//
// Records belong to the member, not to the session, and a session ends as
// on Kafka 4.4 (established by experiment, integration/realkafka
// share_semantics_test.go):
//
//   - epoch -1 (ShareFetch or ShareAcknowledge, after the acknowledgements
//     it carries) closes it and releases what the member still holds in
//     its partitions at that node;
//   - the close of the connection that opened it, while it is the last
//     session that connection opened, does the same (Kafka maps each
//     connection to the last session it opened; a connection that only
//     carried later requests of a session, or whose session was replaced,
//     releases nothing);
//   - epoch 0 for a member that has a session there replaces it and
//     releases nothing: the member still holds its records and may
//     acknowledge them in the new session;
//   - leaving the group or being fenced does not end it: the member keeps
//     its records, and the session serves it, until one of the above or
//     the locks expire.
//
// None of these releases lowers a record's delivery count: the delivery
// that was cut short counts.
//
// Kafka keeps a session that no connection will release (the member
// opened it on a connection that has since opened another session) until
// the member closes it; so does this broker while the member is in the
// group, and ends it without releasing anything once the member has left
// or been fenced, so that sessions of departed members never pile up.
// Kafka also forgets the connection of a member's last session when an
// earlier session opened on that connection closes, so that the
// connection's close then releases nothing; this broker releases the last
// session's records (docs/differences.md).
//
// Releasing costs one pass over the in-flight window of each of the
// session's partitions where records are acquired; it is done in slices
// of shareReleaseSlotsPerTurn window slots per turn of the loop, the first
// slice at once (shareRelease).

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
	key   shareSessionKey
	epoch int32 // the epoch the next request must carry
	parts map[shareTP]struct{}
	wait  *shareFetchWait // a ShareFetch parked on the session
	// opener is the connection whose ShareFetch opened the session (nil
	// for a request from no connection).
	opener *clientConn
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

// openSession starts a new session for key, a member of the group, opened
// by a request on cc. A session the member had at that node is replaced
// without releasing anything, as on Kafka. What a release of an earlier
// session of the member still has to do is done first, so that it never
// reaches records acquired in the new one.
func (sc *shareCoordinator) openSession(g *shareGroup, key shareSessionKey, cc *clientConn, now time.Time) *shareSession {
	sc.finishRelease(key, now)
	if old := g.session(key); old != nil {
		sc.endSession(old)
	}
	s := &shareSession{key: key, parts: make(map[shareTP]struct{}), opener: cc}
	if g.sessions == nil {
		g.sessions = make(map[string]map[int32]*shareSession)
	}
	if g.sessions[key.member] == nil {
		g.sessions[key.member] = make(map[int32]*shareSession)
	}
	g.sessions[key.member][key.node] = s
	if cc != nil {
		prev := sc.connSessions[cc]
		sc.connSessions[cc] = s
		cc.shareSessions.Store(true)
		if prev != nil && !sc.inGroup(prev.key.group, prev.key.member) {
			// No connection will release prev any more, and its member
			// is gone: nothing but its member's close could end it.
			sc.endSession(prev)
		}
	}
	return s
}

// session returns the open session a request with epoch continues.
func (sc *shareCoordinator) session(key shareSessionKey, epoch int32) (*shareSession, *kerr.Error) {
	var s *shareSession
	if g := sc.groups[key.group]; g != nil {
		s = g.session(key)
	}
	switch {
	case s == nil:
		return nil, kerr.ShareSessionNotFound
	case epoch != -1 && epoch != s.epoch:
		return nil, kerr.InvalidShareSessionEpoch
	}
	return s, nil
}

// inGroup reports whether member is in the share group.
func (sc *shareCoordinator) inGroup(group, member string) bool {
	g := sc.groups[group]
	return g != nil && g.members[member] != nil
}

// session returns the group's session for key, if any.
func (g *shareGroup) session(key shareSessionKey) *shareSession {
	return g.sessions[key.member][key.node]
}

// releasable reports whether a connection's close would still release s:
// s is the last session its opener opened (a closed opener's entry went
// with the session it released).
func (sc *shareCoordinator) releasable(s *shareSession) bool {
	return s.opener != nil && sc.connSessions[s.opener] == s
}

// memberRemoved ends the sessions of a member that left its group or was
// fenced that no connection would release any more; the others stay, as
// on Kafka, with the records the member holds.
func (sc *shareCoordinator) memberRemoved(g *shareGroup, member string) {
	for _, s := range g.sessions[member] {
		if !sc.releasable(s) {
			sc.endSession(s)
		}
	}
}

// connectionClosed ends the last session cc opened, if it is still open,
// and releases what its member holds in its partitions, as Kafka does when
// a client's connection drops. Its cost is closeSession's.
func (sc *shareCoordinator) connectionClosed(cc *clientConn, now time.Time) {
	sc.c.stats.shareConnCloses++
	s := sc.connSessions[cc]
	if s == nil {
		return
	}
	sc.c.logger.Debug("share session's connection closed; releasing the member's records",
		"group", s.key.group, "member", s.key.member, "node", s.key.node, "partitions", len(s.parts))
	sc.closeSession(s, now)
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
func (sc *shareCoordinator) beginShareCall(r *request, groupID, memberID *string, epoch int32, opens bool, now time.Time) (call shareCall, err *kerr.Error, msg string) {
	call.group, call.member = shareStringOrEmpty(groupID), shareStringOrEmpty(memberID)
	if call.group == "" || call.member == "" {
		return call, kerr.InvalidRequest, "GroupID and MemberID are required"
	}
	call.lockMillis = int32(sc.lockDuration(call.group).Milliseconds())
	key := shareSessionKey{group: call.group, member: call.member, node: r.node.id}
	switch {
	case epoch == 0 && !opens:
		return call, kerr.InvalidShareSessionEpoch, "acknowledgements need an open share session"
	case epoch == 0:
		g := sc.groups[call.group]
		if g == nil || g.members[call.member] == nil {
			return call, kerr.UnknownMemberID, "the member is not in the share group"
		}
		call.session = sc.openSession(g, key, r.cc, now)
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

// closeSession ends a session and releases what its member holds in its
// partitions at the session's node (shareRelease), without lowering a
// delivery count.
func (sc *shareCoordinator) closeSession(s *shareSession, now time.Time) {
	sc.endSession(s)
	if len(s.parts) == 0 {
		return
	}
	job := &shareRelease{key: s.key, parts: make([]shareTP, 0, len(s.parts))}
	for tp := range s.parts {
		job.parts = append(job.parts, tp)
	}
	if sc.releaseSlice(job, now) {
		return
	}
	sc.releasing[job.key] = job
	sc.releaseQueue = append(sc.releaseQueue, job)
	sc.armRelease()
}

// endSession forgets a session; a ShareFetch parked on it is answered with
// what it has.
func (sc *shareCoordinator) endSession(s *shareSession) {
	if g := sc.groups[s.key.group]; g != nil && g.session(s.key) == s {
		delete(g.sessions[s.key.member], s.key.node)
		if len(g.sessions[s.key.member]) == 0 {
			delete(g.sessions, s.key.member)
		}
	}
	if s.opener != nil && sc.connSessions[s.opener] == s {
		// Kafka marks the connection's session stale: the connection's
		// close releases nothing now.
		delete(sc.connSessions, s.opener)
	}
	if s.wait != nil {
		s.wait.answer()
	}
}

// shareReleaseSlotsPerTurn bounds the in-flight window slots one turn of
// the loop scans to release the records of ended sessions (at least one
// partition's window per turn). A session may hold every partition of the
// cluster, each with a window of up to share.partition.max.record.locks
// offsets and a batch: releasing it all at once could hold the loop for
// tens of milliseconds.
const shareReleaseSlotsPerTurn = 1 << 16

// shareRelease is the release of what a member held, when its session
// ended, in that session's partitions at the session's node. The first
// slice runs in the turn that ends the session, so that a small session's
// records are AVAILABLE before anything else happens; the rest run a
// slice per later turn. Records the member acquires later cannot be
// reached: it needs a new session at that node to acquire, and opening
// one (as staging records at that node) finishes the release first
// (finishRelease).
type shareRelease struct {
	key   shareSessionKey
	parts []shareTP
	next  int
}

// releaseSlice releases the member's records in job's next partitions
// until shareReleaseSlotsPerTurn window slots are scanned, and reports
// whether the job is done.
func (sc *shareCoordinator) releaseSlice(job *shareRelease, now time.Time) bool {
	done, scanned := sc.releaseWithin(job, shareReleaseSlotsPerTurn, now)
	sc.c.stats.shareReleaseMaxTurn = max(sc.c.stats.shareReleaseMaxTurn, scanned)
	return done
}

// releaseWithin releases the member's records in job's next partitions
// while budget window slots last (a partition costs one, plus its
// window's length when records are acquired there; the first partition
// of a call may pass the budget), and returns whether the job is done and
// the slots it scanned.
func (sc *shareCoordinator) releaseWithin(job *shareRelease, budget int, now time.Time) (done bool, scanned int) {
	limit := sc.deliveryLimit(job.key.group)
	for job.next < len(job.parts) && scanned < budget {
		tp := job.parts[job.next]
		key := shareKey{group: job.key.group, topicID: tp.topicID, partition: tp.partition}
		sp := sc.live[key]
		if sp == nil || !sp.current() || sp.leader != job.key.node || sp.acquired == 0 {
			job.next++
			scanned++
			continue
		}
		cost := 1 + len(sp.recs)
		if scanned > 0 && scanned+cost > budget {
			break
		}
		job.next++
		scanned += cost
		if n := sp.releaseMember(job.key.member, limit); n > 0 {
			sc.flush(sp, now)
			sc.c.logger.Debug("released member's records", "key", key.String(), "member", job.key.member, "records", n)
		}
	}
	return job.next >= len(job.parts), scanned
}

// finishRelease does at once what a pending release of an earlier
// session of key's member at key's node still has to do: at most the rest
// of one session's release, paid by the member's own request.
func (sc *shareCoordinator) finishRelease(key shareSessionKey, now time.Time) {
	job := sc.releasing[key]
	if job == nil {
		return
	}
	delete(sc.releasing, key)
	sc.releaseWithin(job, math.MaxInt, now)
}

// armRelease schedules a turn of the pending releases.
func (sc *shareCoordinator) armRelease() {
	if sc.releaseArmed {
		return
	}
	sc.releaseArmed = true
	sc.c.after(0, func() { sc.releaseTurn(time.Now()) })
}

// releaseTurn runs one turn's slice of the pending releases, oldest
// first, and schedules the next turn while some remain.
func (sc *shareCoordinator) releaseTurn(now time.Time) {
	sc.releaseArmed = false
	budget, scanned := shareReleaseSlotsPerTurn, 0
	for len(sc.releaseQueue) > 0 && scanned < budget {
		job := sc.releaseQueue[0]
		if sc.releasing[job.key] == job {
			done, n := sc.releaseWithin(job, budget-scanned, now)
			scanned += n
			if !done {
				break
			}
			delete(sc.releasing, job.key)
		}
		sc.releaseQueue[0] = nil
		sc.releaseQueue = sc.releaseQueue[1:]
	}
	sc.c.stats.shareReleaseMaxTurn = max(sc.c.stats.shareReleaseMaxTurn, scanned)
	if len(sc.releaseQueue) == 0 {
		sc.releaseQueue = nil
		return
	}
	sc.armRelease()
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
