package broker

// Fetch (key 1).
//
// Versions: 4-17. v13 names topics by id.
//
// Behaviour:
//   - Sessionless: every answer has SessionID 0, so clients send full
//     requests; an incremental request gets FETCH_SESSION_ID_NOT_FOUND.
//   - read_uncommitted reads up to the high watermark, read_committed up to
//     the last stable offset, with the aborted transactions of the returned
//     range.
//   - The client's current leader epoch is checked (FENCED_LEADER_EPOCH,
//     UNKNOWN_LEADER_EPOCH).
//   - OFFSET_OUT_OF_RANGE leaves the answer's offsets at -1, as Kafka leaves
//     them.
//   - Whole batches: the first partition with data gets one batch even past
//     the byte limits (KIP-74), the others only what fits. As in Kafka,
//     MaxBytes is capped by the broker's fetch.max.bytes (FetchMaxBytes, 55
//     MiB) and each partition by its PartitionMaxBytes.
//   - MaxWaitMillis long polls are answered when MinBytes arrive or the wait
//     ends.
//   - A partition named twice is answered once, with the parameters of its
//     last mention, in the place of its first.
//
// Cost:
//   - Finding the batches is O(log n) per partition; the loop only collects
//     references to them, and the connection's goroutine copies the bytes
//     while it encodes the answer (stored batches are never written again).
//   - A parked fetch watches its partitions (watch.go): a change to one of
//     them re-counts that partition's readable bytes in O(log n), from the
//     batches' running byte counts, and the answer is built once, when it is
//     sent.
//
// Skipped:
//   - follower fetches (there are no followers);
//   - preferred read replicas;
//   - diverging-epoch truncation hints.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 1, min: 4, max: 17, handle: handleFetch}) }

func handleFetch(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.FetchRequest)
	if req.Version >= 7 && req.SessionID != 0 || req.SessionEpoch > 0 {
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return resp, nil
	}
	dedupFetchPartitions(req)
	if req.MaxWaitMillis > 0 && req.MinBytes > 0 {
		if w := c.parkFetch(r); w != nil {
			return nil, nil
		}
	}
	return c.fetch(r), nil
}

// dedupFetchPartitions rewrites a fetch that names a partition twice as
// Kafka reads it: once, with its last parameters, in the place of its
// first mention, consecutive partitions of one topic under one topic entry.
func dedupFetchPartitions(req *kmsg.FetchRequest) {
	type key struct {
		name      string
		id        [16]byte
		partition int32
	}
	seen := make(map[key]int)
	type entry struct {
		topic kmsg.FetchRequestTopic
		part  kmsg.FetchRequestTopicPartition
	}
	var entries []entry
	dup := false
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			k := key{id: rt.TopicID, partition: rp.Partition}
			if req.Version < 13 {
				k = key{name: rt.Topic, partition: rp.Partition}
			}
			if i, ok := seen[k]; ok {
				entries[i].part = rp
				dup = true
				continue
			}
			seen[k] = len(entries)
			entries = append(entries, entry{topic: rt, part: rp})
		}
	}
	if !dup {
		return
	}
	var topics []kmsg.FetchRequestTopic
	for _, e := range entries {
		if n := len(topics); n > 0 && topics[n-1].Topic == e.topic.Topic && topics[n-1].TopicID == e.topic.TopicID {
			topics[n-1].Partitions = append(topics[n-1].Partitions, e.part)
			continue
		}
		rt := e.topic
		rt.Partitions = []kmsg.FetchRequestTopicPartition{e.part}
		topics = append(topics, rt)
	}
	req.Topics = topics
}

// fetchAnswer is a Fetch response whose record bytes are copied from the
// stored batches by the connection's goroutine (prepare), not the loop.
type fetchAnswer struct {
	*kmsg.FetchResponse
	fills []fetchFill
}

// fetchFill is one partition's batches, to be copied into its answer.
type fetchFill struct {
	topic, partition int // indexes in Topics and their Partitions
	batches          []*storedBatch
	size             int
}

// prepare copies the batches into the answer; it runs off the loop.
func (a *fetchAnswer) prepare() kmsg.Response {
	for _, f := range a.fills {
		out := make([]byte, 0, f.size)
		for _, b := range f.batches {
			out = append(out, b.raw...)
		}
		a.Topics[f.topic].Partitions[f.partition].RecordBatches = out
	}
	a.fills = nil
	return a.FetchResponse
}

// splice marks the partitions with batches (splice.go).
func (a *fetchAnswer) splice(mark func(int) []byte) (kmsg.Response, [][]*storedBatch) {
	out := make([][]*storedBatch, len(a.fills))
	for i, f := range a.fills {
		a.Topics[f.topic].Partitions[f.partition].RecordBatches = mark(i)
		out[i] = f.batches
	}
	return a.FetchResponse, out
}

// fetch builds the answer to a fetch as of now.
func (c *Cluster) fetch(r *request) *fetchAnswer {
	req := r.kreq.(*kmsg.FetchRequest)
	ans := &fetchAnswer{FetchResponse: req.ResponseKind().(*kmsg.FetchResponse)}
	maxBytes := req.MaxBytes
	if maxBytes <= 0 || maxBytes > c.cfg.fetchMaxBytes {
		maxBytes = c.cfg.fetchMaxBytes
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
			batches, err := c.fetchPartition(r.node.id, t, unknown, req.IsolationLevel, rp, limit, total == 0, &sp)
			if err != nil {
				sp.ErrorCode = err.Code
			}
			if len(batches) > 0 {
				f := fetchFill{topic: len(ans.Topics), partition: len(st.Partitions), batches: batches}
				for _, b := range batches {
					f.size += len(b.raw)
				}
				total += f.size
				ans.fills = append(ans.fills, f)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		ans.Topics = append(ans.Topics, st)
	}
	c.stats.fetchAnswers++
	c.stats.fetchBytes += int64(total)
	return ans
}

// fetchPartition fills sp's offsets and returns the batches to answer with.
func (c *Cluster) fetchPartition(node int32, t *topic, unknown *kerr.Error, isolation int8, rp kmsg.FetchRequestTopicPartition, limit int32, first bool, sp *kmsg.FetchResponseTopicPartition) ([]*storedBatch, *kerr.Error) {
	p, err := fetchablePartition(node, t, unknown, rp)
	if err != nil {
		if err == kerr.NotLeaderForPartition {
			sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = p.leader, p.leaderEpoch
		}
		return nil, err
	}
	sp.HighWatermark = p.next
	sp.LastStableOffset = p.lastStableOffset()
	sp.LogStartOffset = p.logStart
	upTo := p.next
	if isolation == 1 {
		upTo = sp.LastStableOffset
	}
	batches := p.read(rp.FetchOffset, upTo, limit, first)
	if len(batches) > 0 && isolation == 1 {
		for _, a := range p.abortedIn(rp.FetchOffset, batches[len(batches)-1].last) {
			at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
			at.ProducerID, at.FirstOffset = a.pid, a.first
			sp.AbortedTransactions = append(sp.AbortedTransactions, at)
		}
	}
	return batches, nil
}

// fetchablePartition returns the partition a fetch reads, or why it
// cannot; for NOT_LEADER_OR_FOLLOWER it returns the partition too.
func fetchablePartition(node int32, t *topic, unknown *kerr.Error, rp kmsg.FetchRequestTopicPartition) (*partition, *kerr.Error) {
	if t == nil {
		return nil, unknown
	}
	if rp.Partition < 0 || int(rp.Partition) >= len(t.partitions) {
		return nil, kerr.UnknownTopicOrPartition
	}
	p := t.partitions[rp.Partition]
	if err := p.checkLeader(node, rp.CurrentLeaderEpoch); err != nil {
		return p, err
	}
	if rp.FetchOffset < p.logStart || rp.FetchOffset > p.next {
		// Kafka leaves the offsets at -1 in this answer too.
		return nil, kerr.OffsetOutOfRange
	}
	return p, nil
}

// fetchWait is a long poll parked until MinBytes are readable, a partition
// has an error to report, or its deadline.
type fetchWait struct {
	c        *Cluster
	r        *request
	minBytes int64
	total    int64 // the sum of the parts' readable bytes
	parts    map[*partition]*fetchWaitPart
	deadline *timer
}

// fetchWaitPart is one partition a parked fetch reads.
type fetchWaitPart struct {
	rp       kmsg.FetchRequestTopicPartition
	t        *topic
	readable int64
}

// parkFetch parks r if its partitions do not yet hold MinBytes and none has
// an error to answer; it returns nil when r must be answered now.
func (c *Cluster) parkFetch(r *request) *fetchWait {
	req := r.kreq.(*kmsg.FetchRequest)
	w := &fetchWait{c: c, r: r, minBytes: int64(req.MinBytes), parts: make(map[*partition]*fetchWaitPart)}
	for _, rt := range req.Topics {
		t, unknown := c.topicForRequest(req.Version >= 13, rt.Topic, rt.TopicID)
		for _, rp := range rt.Partitions {
			p, err := fetchablePartition(r.node.id, t, unknown, rp)
			if err != nil {
				return nil
			}
			part := &fetchWaitPart{rp: rp, t: t}
			part.readable = w.readable(p, part)
			w.parts[p] = part
			w.total += part.readable
		}
	}
	if w.total >= w.minBytes {
		return nil
	}
	for p := range w.parts {
		c.watch(p, w)
	}
	w.deadline = newTimer(func(time.Time) { w.answer() })
	c.arm(w.deadline, time.Now().Add(c.longPoll(req.MaxWaitMillis)))
	return w
}

// readable is how many bytes a fetch of part could read from p now, as
// Kafka's DelayedFetch counts them: at most the partition's max bytes.
func (w *fetchWait) readable(p *partition, part *fetchWaitPart) int64 {
	upTo := p.next
	if w.r.kreq.(*kmsg.FetchRequest).IsolationLevel == 1 {
		upTo = p.lastStableOffset()
	}
	return min(p.bytesBetween(part.rp.FetchOffset, upTo), int64(max(part.rp.PartitionMaxBytes, 0)))
}

func (w *fetchWait) partitionChanged(p *partition, _ time.Time) {
	part := w.parts[p]
	if part == nil {
		return
	}
	if _, err := fetchablePartition(w.r.node.id, part.t, nil, part.rp); err != nil || p.deleted {
		w.answer() // a partition has an error to report
		return
	}
	n := w.readable(p, part)
	w.total += n - part.readable
	part.readable = n
	if w.total >= w.minBytes {
		w.answer()
	}
}

// answer builds and sends the answer and forgets the wait.
func (w *fetchWait) answer() {
	for p := range w.parts {
		w.c.unwatch(p, w)
	}
	w.c.disarm(w.deadline)
	w.r.respond(w.c.fetch(w.r))
}

// longPoll bounds a client's MaxWaitMillis by the broker's cap.
func (c *Cluster) longPoll(maxWaitMillis int32) time.Duration {
	return min(time.Duration(maxWaitMillis)*time.Millisecond, c.cfg.maxFetchWait)
}
