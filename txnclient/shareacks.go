package txnclient

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/wire"
)

// stagedAcks is one StageShareAcks call waiting for commit.
type stagedAcks struct {
	acks *wire.ShareAcks
	meta wire.ShareGroupMetadata
}

// memberKey identifies the share-group member whose records are staged.
type memberKey struct {
	group, member string
	epoch         int32
}

// StageShareAcks adds share acknowledgements to the current transaction.
// Nothing is sent now: at commit, before EndTxn, the Manager sends
// AddShareAcksToTxn once per group to the transaction coordinator and
// TxnShareAcknowledge once per partition leader.
//
// It first checks that the transaction coordinator and every leader of an
// acknowledged partition advertise the KIP-1289 APIs and finalized
// share.version >= 3; if one does not, it returns ErrShareAcksUnsupported
// (naming the broker and what it lacks) and changes nothing. Then it calls
// acks.Tracker.Stage, if set: an error there (an expired acquisition lock,
// say) fails the transaction with ErrAbortable, since committing it without
// these acknowledgements would break exactly-once. Any other failure
// (including ctx ending, before or during the checks) fails the
// transaction the same way.
//
// Once Tracker.Stage has accepted acks, Tracker.Resolve is called exactly
// once: with true when the transaction is known to have committed, with
// false when it aborted, when StageShareAcks itself fails afterwards, or
// when the outcome can no longer be learned (Close, a fatal error). If
// StageShareAcks fails before Tracker.Stage accepted acks, Resolve is
// never called for them.
//
// The Manager keeps acks until then: do not modify it after the call.
// Only ACCEPT, RELEASE and REJECT can be staged.
func (m *Manager) StageShareAcks(ctx context.Context, acks *wire.ShareAcks, meta wire.ShareGroupMetadata) error {
	const op = "send share acknowledgements to transaction"
	if err := ValidateShareAcks(acks, meta); err != nil {
		return Usage(op, err)
	}
	ctx, leave, err := m.enterDooming(ctx, op)
	if err != nil {
		return err
	}
	defer leave()
	deadline, _, err := m.openTxn(op)
	if err != nil {
		return err
	}
	if acks.Len() == 0 {
		return nil
	}
	ctx, cancel := withDeadline(ctx, deadline)
	defer cancel()

	topics := topicsOf(acks)
	_, err = Retry(ctx, func(ctx context.Context) (struct{}, error) {
		coord, err := m.coords.Find(ctx, TransactionCoordinator, m.txnID)
		if err != nil {
			return struct{}{}, retriableOrPermanent(err)
		}
		meta, err := m.topicMeta(ctx, topics, false)
		if err != nil {
			return struct{}{}, err
		}
		nodes := []int32{coord}
		for _, tp := range acks.Partitions() {
			leader, ok := meta[tp.Topic].Leaders[tp.Partition]
			if !ok {
				return struct{}{}, permanent(fmt.Errorf("partition %s/%d: %w", tp.Topic, tp.Partition, kerr.UnknownTopicOrPartition))
			}
			nodes = append(nodes, leader)
		}
		err = m.caps.RequireShareAcks(ctx, op, dedupNodes(nodes))
		if errors.Is(err, ErrShareAcksUnsupported) {
			return struct{}{}, permanent(err)
		}
		return struct{}{}, err
	})
	if errors.Is(err, ErrShareAcksUnsupported) {
		return err
	}
	if err != nil {
		return m.Fail(op, err)
	}
	if acks.Tracker != nil {
		if err := acks.Tracker.Stage(acks); err != nil {
			return m.Fail(op, Abortable(op, err))
		}
	}
	// A failure of the produce path may have ended the transaction since
	// the check above (the state is checked again, and the acknowledgements
	// appended, under the lock that failure takes): the tracker accepted
	// them, so they are resolved at once.
	m.mu.Lock()
	if m.state != StateInTransaction {
		err := m.stateErr(op)
		m.unlock()
		if acks.Tracker != nil {
			acks.Tracker.Resolve(acks, false)
		}
		return err
	}
	m.txn.staged = append(m.txn.staged, stagedAcks{acks: acks, meta: meta})
	m.unlock()
	return nil
}

// ValidateShareAcks reports why acks, the acknowledgements of records that
// member meta holds, cannot be staged in a transaction: nil acks, metadata
// without a group or member id, or an acknowledgement type other than
// ACCEPT, RELEASE and REJECT. StageShareAcks checks this first; the
// acknowledger checks it when a checkpoint is staged, long before its
// transaction. The error is unclassified (callers wrap it with Usage).
func ValidateShareAcks(acks *wire.ShareAcks, meta wire.ShareGroupMetadata) error {
	if acks == nil {
		return errors.New("nil acknowledgements")
	}
	if meta.GroupID == "" || meta.MemberID == "" {
		return fmt.Errorf("share group metadata needs a group id and a member id (got %q, %q)", meta.GroupID, meta.MemberID)
	}
	for _, tp := range acks.Partitions() {
		for _, r := range acks.Records(tp) {
			if !r.Type.Transactional() {
				return fmt.Errorf("offset %d of %s/%d: %s cannot be staged in a transaction", r.Offset, tp.Topic, tp.Partition, r.Type)
			}
		}
	}
	return nil
}

func topicsOf(acks *wire.ShareAcks) []string {
	var out []string
	for _, tp := range acks.Partitions() {
		if len(out) == 0 || out[len(out)-1] != tp.Topic {
			out = append(out, tp.Topic)
		}
	}
	return out
}

func dedupNodes(nodes []int32) []int32 {
	sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
	out := nodes[:0]
	for i, n := range nodes {
		if i == 0 || n != nodes[i-1] {
			out = append(out, n)
		}
	}
	return out
}

// sendStagedShareAcks sends the staged acknowledgements at commit:
// AddShareAcksToTxn once per group, then TxnShareAcknowledge once per
// member and partition leader. The error is unclassified.
func (m *Manager) sendStagedShareAcks(ctx context.Context) error {
	m.mu.Lock()
	staged := append([]stagedAcks(nil), m.txn.staged...)
	m.unlock()
	pid, epoch := m.ProducerID()

	groups := make(map[string]map[string]map[int32]bool)
	merged := make(map[memberKey]*wire.ShareAcks)
	var members []memberKey
	for _, s := range staged {
		g := groups[s.meta.GroupID]
		if g == nil {
			g = make(map[string]map[int32]bool)
			groups[s.meta.GroupID] = g
		}
		for _, tp := range s.acks.Partitions() {
			if g[tp.Topic] == nil {
				g[tp.Topic] = make(map[int32]bool)
			}
			g[tp.Topic][tp.Partition] = true
		}
		k := memberKey{s.meta.GroupID, s.meta.MemberID, s.meta.MemberEpoch}
		if merged[k] == nil {
			merged[k] = new(wire.ShareAcks)
			members = append(members, k)
		}
		merged[k].Merge(s.acks)
	}
	groupIDs := make([]string, 0, len(groups))
	for g := range groups {
		groupIDs = append(groupIDs, g)
	}
	sort.Strings(groupIDs)
	for _, g := range groupIDs {
		if err := m.addShareAcksToTxn(ctx, g, groups[g], pid, epoch); err != nil {
			return err
		}
	}
	for _, k := range members {
		if err := m.stageAtLeaders(ctx, k, merged[k], pid, epoch); err != nil {
			return err
		}
	}
	return nil
}

func (m *Manager) addShareAcksToTxn(ctx context.Context, group string, parts map[string]map[int32]bool, pid int64, epoch int16) error {
	topics := make([]wire.AddShareAcksToTxnTopic, 0, len(parts))
	for t, ps := range parts {
		at := wire.AddShareAcksToTxnTopic{Name: t}
		for p := range ps {
			at.Partitions = append(at.Partitions, p)
		}
		sort.Slice(at.Partitions, func(i, j int) bool { return at.Partitions[i] < at.Partitions[j] })
		topics = append(topics, at)
	}
	sort.Slice(topics, func(i, j int) bool { return topics[i].Name < topics[j].Name })
	_, err := m.coords.callCoordinator(ctx, coordinatorCall{
		op:   "AddShareAcksToTxn",
		typ:  TransactionCoordinator,
		key:  m.txnID,
		sent: m.MarkSent,
		build: func() kmsg.Request {
			return &wire.AddShareAcksToTxnRequest{
				TransactionalID: m.txnID,
				ProducerID:      pid,
				ProducerEpoch:   epoch,
				GroupID:         group,
				Topics:          topics,
			}
		},
		code: func(r kmsg.Response) (int16, *string) { return r.(*wire.AddShareAcksToTxnResponse).ErrorCode, nil },
	})
	return err
}

// leaderRetryCodes are per-partition answers after which the partition is
// retried at its (possibly new) leader after fresh metadata.
var leaderRetryCodes = map[int16]bool{
	kerr.NotLeaderForPartition.Code:     true,
	kerr.UnknownTopicOrPartition.Code:   true,
	kerr.UnknownTopicID.Code:            true,
	kerr.LeaderNotAvailable.Code:        true,
	kerr.FencedLeaderEpoch.Code:         true,
	kerr.KafkaStorageError.Code:         true,
	kerr.RequestTimedOut.Code:           true,
	kerr.NotCoordinator.Code:            true,
	kerr.CoordinatorNotAvailable.Code:   true,
	kerr.CoordinatorLoadInProgress.Code: true,
	kerr.ConcurrentTransactions.Code:    true,
}

// stageAtLeaders sends TxnShareAcknowledge for one member's merged
// acknowledgements, one request per partition leader in parallel, and
// retries partitions whose leader moved until every partition is staged or
// one fails for good (INVALID_RECORD_STATE, a member error, a confirmed
// fencing answer).
func (m *Manager) stageAtLeaders(ctx context.Context, k memberKey, acks *wire.ShareAcks, pid int64, epoch int16) error {
	pending := make(map[wire.TopicPartition]bool)
	for _, tp := range acks.Partitions() {
		pending[tp] = true
	}
	fresh := false
	var chk AnswerCheck
	_, err := Retry(ctx, func(ctx context.Context) (struct{}, error) {
		topics := make([]string, 0, len(pending))
		seen := make(map[string]bool)
		for tp := range pending {
			if !seen[tp.Topic] {
				seen[tp.Topic] = true
				topics = append(topics, tp.Topic)
			}
		}
		meta, err := m.topicMeta(ctx, topics, fresh)
		if err != nil {
			fresh = true
			return struct{}{}, err
		}
		byLeader := make(map[int32]*wire.TxnShareAcknowledgeRequest)
		for tp := range pending {
			tm := meta[tp.Topic]
			leader, ok := tm.Leaders[tp.Partition]
			if !ok {
				return struct{}{}, permanent(fmt.Errorf("partition %s/%d: %w", tp.Topic, tp.Partition, kerr.UnknownTopicOrPartition))
			}
			id, ok := acks.TopicID(tp.Topic)
			if !ok {
				id = tm.ID
			}
			req := byLeader[leader]
			if req == nil {
				req = &wire.TxnShareAcknowledgeRequest{
					TransactionalID: m.txnID, GroupID: k.group, MemberID: k.member, MemberEpoch: k.epoch,
					ProducerID: pid, ProducerEpoch: epoch,
				}
				byLeader[leader] = req
			}
			addToRequest(req, id, tp.Partition, acks.Batches(tp))
		}
		results := m.sendToLeaders(ctx, byLeader)
		fresh = false
		var retryErr error
		// One defense decision per attempt, however many partitions got
		// a stale-suspect answer in it.
		var staleRetry *bool
		confirm := func(code int16) bool {
			if staleRetry == nil {
				r := m.ConfirmAnswer(ctx, code, &chk)
				staleRetry = &r
			}
			return *staleRetry
		}
		for _, res := range results {
			if res.err != nil {
				if isContextErr(res.err) || errors.Is(res.err, kgo.ErrClientClosed) {
					return struct{}{}, permanent(res.err)
				}
				fresh, retryErr = true, res.err
				continue
			}
			for _, t := range res.req.Topics {
				name := nameOf(meta, acks, t.TopicID)
				for _, p := range t.Partitions {
					code, msg, missing := res.codeOf(t.TopicID, p.Partition)
					tp := wire.TopicPartition{Topic: name, Partition: p.Partition}
					if code == 0 && !missing {
						delete(pending, tp)
						continue
					}
					if missing {
						fresh, retryErr = true, fmt.Errorf("TxnShareAcknowledge for %s/%d at node %d: %w", name, p.Partition, res.node, errMissingPartition)
						continue
					}
					perr := fmt.Errorf("TxnShareAcknowledge for %s/%d at node %d: %w%s",
						name, p.Partition, res.node, kerr.ErrorForCode(code), kgoclient.Detail(msg))
					switch {
					case leaderRetryCodes[code]:
						fresh, retryErr = true, perr
					case staleSuspect(code) && confirm(code):
						retryErr = perr
					default:
						return struct{}{}, permanent(perr)
					}
				}
			}
		}
		if len(pending) == 0 {
			return struct{}{}, nil
		}
		if retryErr == nil {
			retryErr = fmt.Errorf("TxnShareAcknowledge: %d partitions not answered", len(pending))
		}
		return struct{}{}, retryErr
	})
	return err
}

func addToRequest(req *wire.TxnShareAcknowledgeRequest, id [16]byte, partition int32, batches []wire.AcknowledgementBatch) {
	var t *wire.TxnShareAcknowledgeTopic
	for i := range req.Topics {
		if req.Topics[i].TopicID == id {
			t = &req.Topics[i]
		}
	}
	if t == nil {
		req.Topics = append(req.Topics, wire.TxnShareAcknowledgeTopic{TopicID: id})
		t = &req.Topics[len(req.Topics)-1]
	}
	t.Partitions = append(t.Partitions, wire.TxnShareAcknowledgePartition{Partition: partition, AcknowledgementBatches: batches})
}

func nameOf(meta map[string]TopicMeta, acks *wire.ShareAcks, id [16]byte) string {
	for name, tm := range meta {
		if aid, ok := acks.TopicID(name); ok && aid == id {
			return name
		}
		if tm.ID == id {
			return name
		}
	}
	return fmt.Sprintf("topic id %x", id)
}

type leaderResult struct {
	node int32
	req  *wire.TxnShareAcknowledgeRequest
	resp *wire.TxnShareAcknowledgeResponse
	err  error
}

// errMissingPartition is a partition that a TxnShareAcknowledge answer
// left out.
var errMissingPartition = errors.New("partition missing from the response")

// codeOf returns the answer for one partition of the request: its own error
// code, else the top-level one. missing reports a partition the response
// leaves out: it was not staged and is retried at fresh metadata (the
// leader accepts the retry of a staging it did apply, so resending is
// safe).
func (r *leaderResult) codeOf(id [16]byte, partition int32) (code int16, msg *string, missing bool) {
	if r.resp.ErrorCode != 0 {
		return r.resp.ErrorCode, nil, false
	}
	for _, t := range r.resp.Topics {
		if t.TopicID != id {
			continue
		}
		for _, p := range t.Partitions {
			if p.Partition == partition {
				return p.ErrorCode, p.ErrorMessage, false
			}
		}
	}
	return 0, nil, true
}

// sendToLeaders sends one request per leader concurrently and waits for
// all answers.
func (m *Manager) sendToLeaders(ctx context.Context, reqs map[int32]*wire.TxnShareAcknowledgeRequest) []leaderResult {
	results := make([]leaderResult, 0, len(reqs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	m.MarkSent()
	for node, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := leaderResult{node: node, req: req}
			kresp, err := m.cl.Broker(int(node)).Request(ctx, req)
			if err != nil {
				res.err = fmt.Errorf("TxnShareAcknowledge at node %d: %w", node, err)
			} else {
				res.resp = kresp.(*wire.TxnShareAcknowledgeResponse)
			}
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return results
}
