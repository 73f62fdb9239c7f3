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
	key   shareSessionKey
	epoch int32 // the epoch the next request must carry
	parts map[shareTP]struct{}
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

// openSession starts a new session for key.
func (sc *shareCoordinator) openSession(key shareSessionKey, now time.Time) *shareSession {
	if old := sc.sessions[key]; old != nil {
		sc.closeSession(old, now)
	}
	s := &shareSession{key: key, parts: make(map[shareTP]struct{})}
	sc.sessions[key] = s
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

// closeSession ends a session and releases the member's records in its
// partitions at the session's node.
func (sc *shareCoordinator) closeSession(s *shareSession, now time.Time) {
	if sc.sessions[s.key] == s {
		delete(sc.sessions, s.key)
	}
	sc.releaseMemberRecords(s.key.group, s.key.member, s.key.node, s.parts, now)
}

// shareFetchWait is a ShareFetch parked until records can be acquired or
// its wait ends. Its piggybacked acknowledgements were already applied.
type shareFetchWait struct {
	r        *request
	session  *shareSession
	resp     *kmsg.ShareFetchResponse
	limits   shareFetchLimits
	deadline time.Time
}

// shareFetchLimits bounds one ShareFetch.
type shareFetchLimits struct {
	maxRecords int
	maxBytes   int
}

func (sc *shareCoordinator) sweepWaits(now time.Time) {
	if len(sc.waits) == 0 {
		return
	}
	kept := sc.waits[:0]
	for _, w := range sc.waits {
		if sc.sessions[w.session.key] != w.session {
			w.r.respond(w.resp) // the session was replaced or closed meanwhile
			continue
		}
		n, errs := sc.fetchInto(w.r.node.id, w.session, w.limits, w.resp, now)
		if n > 0 || errs || !now.Before(w.deadline) {
			w.r.respond(w.resp)
			continue
		}
		kept = append(kept, w)
	}
	for i := len(kept); i < len(sc.waits); i++ {
		sc.waits[i] = nil
	}
	sc.waits = kept
}

// fetchInto acquires records for the session's member from the session's
// partitions into resp. It returns how many records it acquired and
// whether a partition reported an error.
func (sc *shareCoordinator) fetchInto(node int32, s *shareSession, lim shareFetchLimits, resp *kmsg.ShareFetchResponse, now time.Time) (int, bool) {
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
			rp := shareFetchPartitionResp(resp, tp)
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
		alim := acquireLimits{
			maxRecords:    lim.maxRecords - total,
			maxBytes:      lim.maxBytes - bytes,
			lock:          sc.lockDuration(group),
			limit:         sc.deliveryLimit(group),
			readCommitted: sc.readCommitted(group),
			maxLocks:      sc.maxRecordLocks(group),
		}
		if !sp.hasWork(alim) {
			continue
		}
		ranges, batches := sp.acquire(member, alim, now)
		sc.flush(sp, now)
		if len(ranges) == 0 {
			continue
		}
		rp := shareFetchPartitionResp(resp, tp)
		for _, b := range batches {
			rp.Records = append(rp.Records, b.raw...)
			bytes += len(b.raw)
		}
		rp.AcquiredRecords = append(rp.AcquiredRecords, ranges...)
		for _, ar := range ranges {
			total += int(ar.LastOffset - ar.FirstOffset + 1)
		}
	}
	return total, errs
}

// shareFetchPartitionResp returns resp's entry for tp, adding it if absent.
func shareFetchPartitionResp(resp *kmsg.ShareFetchResponse, tp shareTP) *kmsg.ShareFetchResponseTopicPartition {
	ti := -1
	for i := range resp.Topics {
		if resp.Topics[i].TopicID == tp.topicID {
			ti = i
			break
		}
	}
	if ti < 0 {
		rt := kmsg.NewShareFetchResponseTopic()
		rt.TopicID = tp.topicID
		resp.Topics = append(resp.Topics, rt)
		ti = len(resp.Topics) - 1
	}
	rt := &resp.Topics[ti]
	for i := range rt.Partitions {
		if rt.Partitions[i].Partition == tp.partition {
			return &rt.Partitions[i]
		}
	}
	rp := kmsg.NewShareFetchResponseTopicPartition()
	rp.Partition = tp.partition
	rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
	rt.Partitions = append(rt.Partitions, rp)
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
