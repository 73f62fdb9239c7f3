package broker

// How the transaction coordinator writes its markers: one
// WriteTxnMarkersRequest per partition leader, sent through
// c.internalRequest to the same handler (27_write_txn_markers.go) that
// serves the network. The request is v2 and carries the transaction's
// version, so a leader applies KIP-1228's strict rule to TV2 markers;
// a leader (or a coordinator) that serves only v1 gets v1, learned with
// ApiVersions (mixed_versions.go), and checks it with the legacy rule.
//
// Per partition, as Kafka's marker channel does: success, or
// INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED (the leader has
// seen a newer producer or coordinator, so nothing is left to do) finish
// the partition; a partition whose topic is gone is dropped; anything else
// (NOT_LEADER_OR_FOLLOWER after a move, above all) is retried toward the
// partition's leader of the moment, paced by an exponential backoff with
// jitter. When every partition is done the transaction completes.
//
// Under the LateMarkerCopies debug switch every request is sent once more
// after the configured delay, as a coordinator whose response was lost
// and which retried late would send it.

import (
	"errors"
	"sort"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Marker retry pacing.
const (
	markerRetryInitial = 20 * time.Millisecond
	markerRetryMax     = time.Second
)

// sendMarkers sends the markers of m's pending partitions and completes the
// transaction once none is left.
func (tc *txnCoordinator) sendMarkers(sh *shard[*txnShard], m *txnMeta, now time.Time) {
	if m.pending == nil {
		m.pending = make(map[txnPartition]struct{}, len(m.partitions))
		for tp := range m.partitions {
			m.pending[tp] = struct{}{}
		}
	}
	byLeader := make(map[int32][]txnPartition)
	for _, tp := range sortedPartitions(m.pending) {
		p := tc.c.partitionOf(tp.topic, tp.partition)
		if p == nil || p.deleted {
			tc.c.logger.Info("skipping the marker of a deleted partition", "transactional_id", m.id,
				"topic", tp.topic, "partition", tp.partition)
			delete(m.pending, tp)
			continue
		}
		byLeader[p.leader] = append(byLeader[p.leader], tp)
	}
	leaders := make([]int32, 0, len(byLeader))
	for l := range byLeader {
		leaders = append(leaders, l)
	}
	sort.Slice(leaders, func(i, j int) bool { return leaders[i] < leaders[j] })
	for _, leader := range leaders {
		req := tc.markerRequest(sh, m, byLeader[leader], tc.markerVersion(sh.node, leader))
		resp, err := tc.c.internalRequest(leader, req)
		if d := tc.c.cfg.lateMarkerCopies; d > 0 {
			tc.sendLateCopy(leader, req, d)
		}
		if d := tc.c.cfg.lateCopiesOnNext; d > 0 {
			tc.c.awaitNextTransaction(leader, req, d)
		}
		if err != nil {
			tc.c.logger.Warn("marker request failed; retrying", "transactional_id", m.id, "node", leader, "err", err)
			continue
		}
		tc.markerResults(m, resp.(*kmsg.WriteTxnMarkersResponse))
	}
	if len(m.pending) == 0 {
		tc.completeTxn(sh, m, now)
		return
	}
	if m.retry == nil {
		m.retry = backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(markerRetryInitial),
			backoff.WithMaxInterval(markerRetryMax),
			backoff.WithMaxElapsedTime(0), // a prepared transaction must complete
		)
	}
	m.retryAt = now.Add(m.retry.NextBackOff())
	tc.schedule(sh, m)
}

// markerRequest builds the WriteTxnMarkers request of m for partitions at
// version (v1 has no TransactionVersion).
func (tc *txnCoordinator) markerRequest(sh *shard[*txnShard], m *txnMeta, parts []txnPartition, version int16) *kmsg.WriteTxnMarkersRequest {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = version
	mk := kmsg.NewWriteTxnMarkersRequestMarker()
	mk.ProducerID = m.producerID
	mk.ProducerEpoch = m.epoch
	mk.Committed = m.state == txnPrepareCommit
	mk.CoordinatorEpoch = sh.epoch
	if version >= 2 {
		mk.TransactionVersion = m.tv
	}
	for _, tp := range parts {
		if n := len(mk.Topics); n == 0 || mk.Topics[n-1].Topic != tp.topic {
			t := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			t.Topic = tp.topic
			mk.Topics = append(mk.Topics, t)
		}
		t := &mk.Topics[len(mk.Topics)-1]
		t.Partitions = append(t.Partitions, tp.partition)
	}
	req.Markers = append(req.Markers, mk)
	return req
}

// markerResults removes from m.pending every partition that is done.
func (tc *txnCoordinator) markerResults(m *txnMeta, resp *kmsg.WriteTxnMarkersResponse) {
	for _, rm := range resp.Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				tp := txnPartition{rt.Topic, rp.Partition}
				err := kerr.ErrorForCode(rp.ErrorCode)
				switch {
				case err == nil:
					delete(m.pending, tp)
				case errors.Is(err, kerr.InvalidProducerEpoch), errors.Is(err, kerr.TransactionCoordinatorFenced):
					tc.c.logger.Info("marker refused by the leader; partition done", "transactional_id", m.id,
						"topic", tp.topic, "partition", tp.partition, "err", err)
					delete(m.pending, tp)
				default:
					tc.c.logger.Info("marker not written; retrying", "transactional_id", m.id,
						"topic", tp.topic, "partition", tp.partition, "err", err)
				}
			}
		}
	}
}

// sendLateCopy sends req to node once more after d (LateMarkerCopies).
func (tc *txnCoordinator) sendLateCopy(node int32, req *kmsg.WriteTxnMarkersRequest, d time.Duration) {
	tc.c.after(d, func() { tc.c.sendMarkerCopy(node, req) })
}

// sendMarkerCopy sends a copy of marker request req to node and logs the
// answer.
func (c *Cluster) sendMarkerCopy(node int32, req *kmsg.WriteTxnMarkersRequest) {
	resp, err := c.internalRequest(node, req)
	if err != nil {
		c.logger.Info("late marker copy failed", "node", node, "err", err)
		return
	}
	for _, rm := range resp.(*kmsg.WriteTxnMarkersResponse).Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				c.logger.Info("late marker copy answered", "node", node, "producer_id", rm.ProducerID,
					"topic", rt.Topic, "partition", rp.Partition, "err", kerr.ErrorForCode(rp.ErrorCode))
			}
		}
	}
}

// lateCopy is a marker copy waiting for the next transaction of its
// producer to write to one of its partitions
// (LateMarkerCopiesOnNextTransaction).
type lateCopy struct {
	node  int32
	req   *kmsg.WriteTxnMarkersRequest
	pid   int64
	epoch int16
	parts []*partition
	sent  bool
}

// awaitNextTransaction holds a copy of req (one marker, for partitions
// that node leads) until its producer's next transaction writes to one of
// them, or until maxWait.
func (c *Cluster) awaitNextTransaction(node int32, req *kmsg.WriteTxnMarkersRequest, maxWait time.Duration) {
	mk := req.Markers[0]
	lc := &lateCopy{node: node, req: req, pid: mk.ProducerID, epoch: mk.ProducerEpoch}
	for _, t := range mk.Topics {
		for _, part := range t.Partitions {
			if p := c.partitionOf(t.Topic, part); p != nil {
				lc.parts = append(lc.parts, p)
			}
		}
	}
	if c.lateCopies == nil {
		c.lateCopies = make(map[*partition][]*lateCopy)
	}
	for _, p := range lc.parts {
		c.lateCopies[p] = append(c.lateCopies[p], lc)
	}
	c.after(maxWait, func() { c.sendLateCopyNow(lc) })
}

// lateCopyDue sends, after the event at hand, the marker copies at p that
// wait for a transactional batch of producer pid at epoch.
func (c *Cluster) lateCopyDue(p *partition, b *storedBatch) {
	for _, lc := range c.lateCopies[p] {
		if !lc.sent && lc.pid == b.pid && lc.epoch <= b.epoch {
			c.after(0, func() { c.sendLateCopyNow(lc) })
		}
	}
}

// sendLateCopyNow sends lc once, and forgets it.
func (c *Cluster) sendLateCopyNow(lc *lateCopy) {
	if lc.sent {
		return
	}
	lc.sent = true
	for _, p := range lc.parts {
		waiting := c.lateCopies[p][:0]
		for _, other := range c.lateCopies[p] {
			if other != lc {
				waiting = append(waiting, other)
			}
		}
		if len(waiting) == 0 {
			delete(c.lateCopies, p)
		} else {
			c.lateCopies[p] = waiting
		}
	}
	c.sendMarkerCopy(lc.node, lc.req)
}
