package txn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/internal/retry"
	"github.com/kshare-go/kshare/wire"
)

// stagedAcks is one StageShareAcks call waiting for commit.
type stagedAcks struct {
	acks *acktrack.Set
	meta kshare.ShareGroupMetadata
	// ledger: a claim ledger carries them (StageLedgerAcks); the commit
	// renews their locks instead of sending TxnShareAcknowledge.
	ledger bool
}

// memberKey identifies the share-group member whose records are staged.
type memberKey struct {
	group, member string
	epoch         int32
}

// StageShareAcks adds share acknowledgements to the current transaction.
// Nothing is sent now: at commit, before EndTxn, the Manager sends
// TxnShareAcknowledge v0 once per partition leader, which adds the share
// state partitions to the transaction itself. RELEASE is not sent in the
// transaction (KIP-1289 refuses it): the tracker gives those records back
// with a plain ShareAcknowledge when it learns the outcome, whichever it
// is.
//
// It first checks that the transaction runs version 2 and that the
// transaction coordinator and every leader of an acknowledged partition
// advertise TxnShareAcknowledge v0 and finalized share.version >= 3; if
// not, it returns an ErrUnsupported error (naming the broker and what it
// lacks) and changes nothing. Any other
// failure dooms the transaction, which must not commit without these
// acknowledgements: invalid acknowledgements or metadata, a nil ctx
// (ErrUsage), the
// tracker's refusal (ErrAbortable for an expired lock, the tracker's own
// class otherwise), ctx ending before or during the checks (ErrAbortable).
//
// Once the tracker's Stage has accepted acks, its Resolve is called
// exactly once: with true when the transaction is known to have
// committed, with false when it aborted, when StageShareAcks itself fails
// afterwards, or when the outcome can no longer be learned (Close, a fatal
// error). If StageShareAcks fails before Stage accepted acks, Resolve is
// never called for them.
func (m *Manager) StageShareAcks(ctx context.Context, acks *kshare.ShareAcks, meta kshare.ShareGroupMetadata) error {
	const op = "send share acknowledgements to transaction"
	set := (*acktrack.Set)(acks)
	if err := ValidateShareAcks(set, meta); err != nil {
		return m.doomWith(op, errs.Usage(op, err))
	}
	if ctx == nil {
		return m.doomWith(op, errs.Usage(op, errNilContext))
	}
	ctx, leave, err := m.enterDooming(ctx, op)
	if err != nil {
		return err
	}
	defer leave()
	deadline, tv2, err := m.openTxn(op)
	if err != nil {
		return err
	}
	if set.Len() == 0 {
		return nil
	}
	if !tv2 {
		// KIP-1289's leader adds the share state partition to the
		// transaction as a transaction version 2 leader does; after an
		// EndTxn that keeps the epoch the coordinator refuses that add.
		return errs.Unsupported(op, errors.New("transactional share acknowledgements (KIP-1289) need a transaction version 2 transaction (EndTxn v5, Produce v12); this producer runs version 1"))
	}
	ctx, cancel := m.withDeadline(ctx, deadline)
	defer cancel()

	topics := topicsOf(set)
	_, err = retry.Do(ctx, func(ctx context.Context) (struct{}, error) {
		coord, err := m.coords.Find(ctx, TransactionCoordinator, m.txnID)
		if err != nil {
			return struct{}{}, retriableOrPermanent(err)
		}
		meta, err := m.topicMeta(ctx, topics, false)
		if err != nil {
			return struct{}{}, err
		}
		nodes := []int32{coord}
		for _, tp := range set.Partitions() {
			leader, ok := meta[tp.Topic].Leaders[tp.Partition]
			if !ok {
				return struct{}{}, permanent(fmt.Errorf("partition %s/%d: %w", tp.Topic, tp.Partition, kerr.UnknownTopicOrPartition))
			}
			nodes = append(nodes, leader)
		}
		err = m.caps.RequireShareAcks(ctx, op, dedupNodes(nodes))
		if errors.Is(err, kshare.ErrUnsupported) {
			return struct{}{}, permanent(err)
		}
		return struct{}{}, err
	})
	if errors.Is(err, kshare.ErrUnsupported) {
		return err
	}
	if err != nil {
		return m.Fail(op, err)
	}
	t := set.Tracker()
	if t != nil {
		if err := t.Stage(set, acktrack.Staging{Group: meta.GroupID, Member: meta.MemberID, Deadline: deadline}); err != nil {
			return m.doomWith(op, trackerRefusal(op, err))
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
		if t != nil {
			t.Resolve(set, false)
		}
		return err
	}
	m.txn.staged = append(m.txn.staged, stagedAcks{acks: set, meta: meta})
	m.unlock()
	return nil
}

// trackerRefusal classifies a tracker's refusal to stage: a classified
// refusal keeps its class (ErrAbortable for an expired lock, ErrUsage for
// records the consumer does not hold, ErrClosed for a closed consumer),
// anything else is abortable.
func trackerRefusal(op string, err error) error {
	if c := errs.ClassOf(err); c != nil {
		return errs.New(c, op, err)
	}
	return errs.Abortable(op, err)
}

// doomWith dooms the transaction in progress, which must not commit
// without what op failed to add to it, and returns err. Outside a
// transaction it only returns err.
func (m *Manager) doomWith(op string, err error) error {
	m.mu.Lock()
	defer m.unlock()
	m.doomLocked(op, err)
	return err
}

// DoomTxn dooms transaction txnNum (the number TxnState gave when the
// application handed over what was refused), if it is still in progress,
// and returns err unchanged: the refusal keeps its class for the caller,
// and the transaction, which the application meant it to be part of, can
// no longer commit (kshare.ErrAbortable). The produce path reports records
// it refuses as usage errors here.
func (m *Manager) DoomTxn(txnNum uint64, op string, err error) error {
	m.mu.Lock()
	defer m.unlock()
	if txnNum == m.txnNum {
		m.doomLocked(op, err)
	}
	return err
}

// doomLocked moves a transaction in progress to AbortableError because op
// failed with err. Called with mu held.
func (m *Manager) doomLocked(op string, err error) {
	switch m.state {
	case StateInTransaction, StateCommitting:
		m.setState(StateAbortableError)
		m.err = errs.Abortable(op, fmt.Errorf("the transaction cannot commit: %w", err))
	}
}

// ValidateShareAcks reports why acks, the acknowledgements of records that
// member meta holds, cannot be staged in a transaction: nil acks, metadata
// without a group or member id, acknowledgements merged from two
// consumers, or an acknowledgement type other than ACCEPT, RELEASE and
// REJECT (the types an application gives; RELEASE is sent outside the
// transaction). StageShareAcks checks this first; the acknowledger checks it
// when a checkpoint is staged, long before its transaction. The error is
// unclassified (callers wrap it with errs.Usage).
func ValidateShareAcks(acks *acktrack.Set, meta kshare.ShareGroupMetadata) error {
	if acks == nil {
		return errors.New("nil acknowledgements")
	}
	if meta.GroupID == "" || meta.MemberID == "" {
		return fmt.Errorf("share group metadata needs a group id and a member id (got %q, %q)", meta.GroupID, meta.MemberID)
	}
	if acks.Mixed() {
		return errors.New("the acknowledgements merge those of two consumers; put each consumer's in the transaction on its own")
	}
	for _, tp := range acks.Partitions() {
		for _, r := range acks.Records(tp) {
			if t := kshare.AckType(r.Type); t != kshare.AckAccept && t != kshare.AckRelease && t != kshare.AckReject {
				return fmt.Errorf("offset %d of %s/%d: %s cannot be staged in a transaction", r.Offset, tp.Topic, tp.Partition, kshare.AckType(r.Type))
			}
		}
	}
	return nil
}

func topicsOf(acks *acktrack.Set) []string {
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
// TxnShareAcknowledge v0 once per member and partition leader; each leader
// adds the group's share state partitions to the transaction itself.
// RELEASE acknowledgements are left out (the tracker releases those records
// outside the transaction when it learns the outcome), and so is a
// partition or member left with nothing else. The error is unclassified.
func (m *Manager) sendStagedShareAcks(ctx context.Context) error {
	m.mu.Lock()
	staged := append([]stagedAcks(nil), m.txn.staged...)
	m.unlock()
	pid, epoch := m.ProducerID()

	merged := make(map[memberKey]*acktrack.Set)
	var members []memberKey
	for _, s := range staged {
		if s.ledger {
			continue // renewed after the flush instead (renewLedgerAcks)
		}
		k := memberKey{s.meta.GroupID, s.meta.MemberID, s.meta.MemberEpoch}
		if merged[k] == nil {
			// Sets are never changed: a member's only set is sent as
			// it is, without a copy.
			members = append(members, k)
			merged[k] = s.acks
			continue
		}
		merged[k] = merged[k].Merge(s.acks)
	}
	for _, k := range members {
		if err := m.stageAtLeaders(ctx, k, merged[k], pid, epoch); err != nil {
			return err
		}
	}
	return nil
}

// MemberEpochSource is implemented by the tracker of a share consumer
// (acktrack.Tracker) that knows its member's current epoch.
// TxnShareAcknowledge needs the current epoch (an older one is
// STALE_MEMBER_EPOCH), and a heartbeat may move it between StageShareAcks
// and the commit: the records are still the member's (the leader checks
// that), so the commit sends the epoch the member has then.
type MemberEpochSource interface {
	// CurrentMemberEpoch returns the member's current epoch in group, and
	// false when the tracker is not that member now.
	CurrentMemberEpoch(group, member string) (int32, bool)
}

// memberEpoch returns the epoch to send for k's acknowledgements: the
// tracker's current one when it knows it, else the staged metadata's.
func memberEpoch(k memberKey, acks *acktrack.Set) int32 {
	if src, ok := acks.Tracker().(MemberEpochSource); ok {
		if e, ok := src.CurrentMemberEpoch(k.group, k.member); ok {
			return e
		}
	}
	return k.epoch
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
// fencing answer). STALE_MEMBER_EPOCH is retried when the member's epoch
// has moved on since the request was built (nothing of a refused partition
// was staged).
func (m *Manager) stageAtLeaders(ctx context.Context, k memberKey, acks *acktrack.Set, pid int64, epoch int16) error {
	pending := make(map[acktrack.TopicPartition][]wire.TxnShareAcknowledgeBatch)
	for _, tp := range acks.Partitions() {
		if batches := coalesce(acks.Records(tp)); len(batches) > 0 {
			pending[tp] = batches
		}
	}
	fresh := false
	var chk AnswerCheck
	_, err := retry.Do(ctx, func(ctx context.Context) (struct{}, error) {
		if len(pending) == 0 {
			return struct{}{}, nil
		}
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
		sendEpoch := memberEpoch(k, acks)
		byLeader := make(map[int32]*wire.TxnShareAcknowledgeRequest)
		for tp, batches := range pending {
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
					TransactionalID: m.txnID, GroupID: k.group,
					ProducerID: pid, ProducerEpoch: epoch,
					MemberID: k.member, MemberEpoch: sendEpoch,
				}
				byLeader[leader] = req
			}
			addToRequest(req, id, tp.Partition, batches)
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
				if isContextErr(res.err) || errors.Is(res.err, kgo.ErrClientClosed) || errors.Is(res.err, wire.ErrMalformed) {
					return struct{}{}, permanent(res.err)
				}
				fresh, retryErr = true, res.err
				continue
			}
			for _, t := range res.req.Topics {
				name := nameOf(meta, acks, t.TopicID)
				for _, p := range t.Partitions {
					code, msg, missing := res.codeOf(t.TopicID, p.Partition)
					tp := acktrack.TopicPartition{Topic: name, Partition: p.Partition}
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
					case code == kerr.NotEnoughReplicas.Code:
						// The leader could not reach the transaction
						// coordinator, or the previous transaction is
						// still completing: retry where it is.
						retryErr = perr
					case code == kerr.StaleMemberEpoch.Code && memberEpoch(k, acks) != res.req.MemberEpoch:
						// A heartbeat moved the member on since the
						// request was built: send the epoch it has now.
						retryErr = perr
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

func addToRequest(req *wire.TxnShareAcknowledgeRequest, id [16]byte, partition int32, batches []wire.TxnShareAcknowledgeBatch) {
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

func nameOf(meta map[string]TopicMeta, acks *acktrack.Set, id [16]byte) string {
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

// versionCapped caps the version kgo negotiates for one request (kgo sends
// the newest version both it and the broker serve): EndTxn of a
// transaction version 1 producer must stay below v5.
type versionCapped struct {
	kmsg.Request
	max int16
}

// MaxVersion returns the cap.
func (r versionCapped) MaxVersion() int16 { return r.max }

// minSameTypeRun is the run of consecutive offsets of one type, inside a
// range of mixed types, that coalesce sends as a batch of its own with a
// single type, as upstream's share consumer does (Acknowledgements'
// MAX_RECORDS_WITH_SAME_ACKNOWLEDGE_TYPE); shorter runs stay in the
// per-offset array of their range.
const minSameTypeRun = 10

// coalesce turns one partition's acknowledgements into TxnShareAcknowledge
// batches the way upstream's share consumer builds its acknowledgement
// batches: offsets sorted, the last acknowledgement given for an offset
// winning, RELEASE left out (it is sent outside the transaction), each
// range of consecutive offsets one batch; a range of one type carries that
// type once, a range of mixed types one type per offset, except that a run
// of at least minSameTypeRun offsets of one type becomes a single-type
// batch of its own.
func coalesce(recs []acktrack.Record) []wire.TxnShareAcknowledgeBatch {
	if len(recs) == 0 {
		return nil
	}
	type offType struct {
		off int64
		typ wire.AckType
	}
	var seq []offType
	if ascending(recs) {
		// The usual case (the records of polls, in offset order): no
		// offset repeats, so no map and no sort.
		seq = make([]offType, 0, len(recs))
		for _, r := range recs {
			seq = append(seq, offType{r.Offset, wire.AckType(r.Type)})
		}
	} else {
		last := make(map[int64]wire.AckType, len(recs))
		for _, r := range recs {
			last[r.Offset] = wire.AckType(r.Type)
		}
		seq = make([]offType, 0, len(last))
		for o, t := range last {
			seq = append(seq, offType{o, t})
		}
		slices.SortFunc(seq, func(a, b offType) int { return cmp.Compare(a.off, b.off) })
	}
	var out []wire.TxnShareAcknowledgeBatch
	var types []wire.AckType // the current range's, one per offset
	first := int64(0)
	flush := func() {
		out = appendRange(out, first, types)
		types = nil
	}
	for _, x := range seq {
		if x.typ == wire.AckRelease {
			if len(types) > 0 {
				flush()
			}
			continue
		}
		if len(types) > 0 && first+int64(len(types)) != x.off {
			flush()
		}
		if len(types) == 0 {
			first = x.off
		}
		types = append(types, x.typ)
	}
	if len(types) > 0 {
		flush()
	}
	return out
}

// appendRange appends the batches of one range of consecutive offsets
// starting at first, whose types are types (one per offset).
func appendRange(out []wire.TxnShareAcknowledgeBatch, first int64, types []wire.AckType) []wire.TxnShareAcknowledgeBatch {
	uniform := func(ts []wire.AckType) bool {
		for _, t := range ts[1:] {
			if t != ts[0] {
				return false
			}
		}
		return true
	}
	if uniform(types) {
		return append(out, wire.TxnShareAcknowledgeBatch{FirstOffset: first, LastOffset: first + int64(len(types)) - 1, AcknowledgeTypes: []wire.AckType{types[0]}})
	}
	// Mixed: split off long runs of one type; what lies between them
	// goes per offset.
	start := 0 // first index not yet emitted
	for i := 0; i < len(types); {
		j := i + 1
		for j < len(types) && types[j] == types[i] {
			j++
		}
		if j-i >= minSameTypeRun {
			if start < i {
				out = append(out, perOffset(first, start, types[start:i]))
			}
			out = append(out, wire.TxnShareAcknowledgeBatch{FirstOffset: first + int64(i), LastOffset: first + int64(j) - 1, AcknowledgeTypes: []wire.AckType{types[i]}})
			start = j
		}
		i = j
	}
	if start < len(types) {
		out = append(out, perOffset(first, start, types[start:]))
	}
	return out
}

// perOffset is a batch of offsets first+start... with one type each, or a
// single type when they all have the same one.
func perOffset(first int64, start int, types []wire.AckType) wire.TxnShareAcknowledgeBatch {
	b := wire.TxnShareAcknowledgeBatch{FirstOffset: first + int64(start), LastOffset: first + int64(start+len(types)) - 1}
	same := true
	for _, t := range types[1:] {
		if t != types[0] {
			same = false
		}
	}
	if same {
		b.AcknowledgeTypes = []wire.AckType{types[0]}
	} else {
		b.AcknowledgeTypes = append([]wire.AckType(nil), types...)
	}
	return b
}

// ascending reports whether recs' offsets strictly increase.
func ascending(recs []acktrack.Record) bool {
	for i := 1; i < len(recs); i++ {
		if recs[i].Offset <= recs[i-1].Offset {
			return false
		}
	}
	return true
}
