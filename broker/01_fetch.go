package broker

// Fetch: versions 4-17.
//
// Sessionless fetches (every response has SessionID 0, so clients send full
// requests; an incremental request gets FETCH_SESSION_ID_NOT_FOUND), topic
// ids from v13, read_uncommitted up to the high watermark and
// read_committed up to the last stable offset with the aborted transactions
// of the returned range, the client's current leader epoch checked
// (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), OFFSET_OUT_OF_RANGE (with
// the offsets of the answer left at -1, as Kafka leaves them), whole
// batches with at least one batch per partition even past the byte limits,
// and MaxWaitMillis long polls answered when MinBytes arrive or the wait
// ends. Skipped: follower fetches (there are no followers), preferred read
// replicas, diverging-epoch truncation hints.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 1, min: 4, max: 17, handle: handleFetch}) }

// fetchWait is a long poll parked until data arrives or its deadline.
type fetchWait struct {
	r        *request
	deadline time.Time
}

func handleFetch(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.FetchRequest)
	if req.Version >= 7 && req.SessionID != 0 || req.SessionEpoch > 0 {
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return resp, nil
	}
	resp, bytes := c.fetch(r)
	if bytes >= int(req.MinBytes) || req.MaxWaitMillis <= 0 || fetchHasError(resp) {
		return resp, nil
	}
	c.fetchWaits = append(c.fetchWaits, &fetchWait{r: r, deadline: time.Now().Add(c.longPoll(req.MaxWaitMillis))})
	return nil, nil
}

func fetchHasError(resp *kmsg.FetchResponse) bool {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return true
			}
		}
	}
	return false
}

// wakeFetches re-runs parked fetches (and parked share fetches) after an
// append, answering those that now have data.
func (c *Cluster) wakeFetches() {
	now := time.Now()
	c.sweepFetches(now)
	c.coordinators.share.sweepWaits(now)
}

func (c *Cluster) sweepFetches(now time.Time) {
	if len(c.fetchWaits) == 0 {
		return
	}
	kept := c.fetchWaits[:0]
	for _, w := range c.fetchWaits {
		req := w.r.kreq.(*kmsg.FetchRequest)
		resp, bytes := c.fetch(w.r)
		if bytes >= int(req.MinBytes) || !now.Before(w.deadline) || fetchHasError(resp) {
			w.r.respond(resp)
			continue
		}
		kept = append(kept, w)
	}
	for i := len(kept); i < len(c.fetchWaits); i++ {
		c.fetchWaits[i] = nil
	}
	c.fetchWaits = kept
}

// fetch builds the response to a fetch as of now, and how many record bytes
// it carries.
func (c *Cluster) fetch(r *request) (*kmsg.FetchResponse, int) {
	req := r.kreq.(*kmsg.FetchRequest)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	maxBytes := req.MaxBytes
	if req.Version < 3 || maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	total := 0
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		t, unknown := c.topicForRequest(req.Version >= 13, rt.Topic, rt.TopicID)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			// Empty, not null: librdkafka refuses a null record set.
			sp.RecordBatches = []byte{}
			limit := rp.PartitionMaxBytes
			if remaining := maxBytes - int32(total); remaining < limit {
				limit = remaining
			}
			if err := c.fetchPartition(r.node.id, t, unknown, req.IsolationLevel, rp, limit, total == 0, &sp); err != nil {
				sp.ErrorCode = err.Code
			}
			total += len(sp.RecordBatches)
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, total
}

func (c *Cluster) fetchPartition(node int32, t *topic, unknown *kerr.Error, isolation int8, rp kmsg.FetchRequestTopicPartition, limit int32, first bool, sp *kmsg.FetchResponseTopicPartition) *kerr.Error {
	if t == nil {
		return unknown
	}
	if rp.Partition < 0 || int(rp.Partition) >= len(t.partitions) {
		return kerr.UnknownTopicOrPartition
	}
	p := t.partitions[rp.Partition]
	if err := p.checkLeader(node, rp.CurrentLeaderEpoch); err != nil {
		if err == kerr.NotLeaderForPartition {
			sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = p.leader, p.leaderEpoch
		}
		return err
	}
	if rp.FetchOffset < p.logStart || rp.FetchOffset > p.next {
		// Kafka leaves the offsets at -1 in this answer too.
		return kerr.OffsetOutOfRange
	}
	sp.HighWatermark = p.next
	sp.LastStableOffset = p.lastStableOffset()
	sp.LogStartOffset = p.logStart
	upTo := p.next
	if isolation == 1 {
		upTo = sp.LastStableOffset
	}
	if limit <= 0 && !first {
		return nil
	}
	batches := p.read(rp.FetchOffset, upTo, limit)
	if len(batches) == 0 {
		return nil
	}
	size := 0
	for _, b := range batches {
		size += len(b.raw)
	}
	out := make([]byte, 0, size)
	for _, b := range batches {
		out = append(out, b.raw...)
	}
	sp.RecordBatches = out
	if isolation == 1 {
		for _, a := range p.abortedIn(rp.FetchOffset, batches[len(batches)-1].last) {
			at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
			at.ProducerID, at.FirstOffset = a.pid, a.first
			sp.AbortedTransactions = append(sp.AbortedTransactions, at)
		}
	}
	return nil
}

// longPoll bounds a client's MaxWaitMillis by the broker's cap.
func (c *Cluster) longPoll(maxWaitMillis int32) time.Duration {
	return min(time.Duration(maxWaitMillis)*time.Millisecond, c.cfg.maxFetchWait)
}
