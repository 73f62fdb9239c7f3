package txn

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/retry"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// GroupMetadata identifies the consumer-group member whose offsets a
// transaction commits, as kgo's GroupTransactSession or the Java client's
// ConsumerGroupMetadata does. The group coordinator refuses the offsets
// (kshare.ErrAbortable) if the member or generation is no longer current. An empty
// MemberID and Generation -1 skip that check.
type GroupMetadata struct {
	GroupID    string
	MemberID   string
	Generation int32
	// InstanceID is the member's group.instance.id (static membership),
	// nil for a dynamic member.
	InstanceID *string
}

// clientAddPartitionsToTxn pins AddPartitionsToTxn to v3, the last version
// a client sends: v4+ is the broker-to-broker form, which kgo would
// otherwise negotiate.
type clientAddPartitionsToTxn struct {
	*kmsg.AddPartitionsToTxnRequest
}

// MaxVersion caps the version kgo negotiates at 3.
func (clientAddPartitionsToTxn) MaxVersion() int16 { return 3 }

// AddPartitions adds partitions to the transaction on TV1 brokers
// (AddPartitionsToTxn v3) before the produce path sends records to them; on
// TV2 brokers it does nothing, as the partition leaders add them. Partitions
// already added in this transaction are skipped. It retries until ctx or the
// transaction deadline ends; a failure is recorded with Fail and returned
// classified.
func (m *Manager) AddPartitions(ctx context.Context, parts map[string][]int32) error {
	const op = "add partitions to transaction"
	m.mu.Lock()
	if m.tv2 {
		m.unlock()
		return nil
	}
	if m.state != StateInTransaction && m.state != StateCommitting {
		err := m.stateErr(op)
		m.unlock()
		return err
	}
	need := make(map[string][]int32)
	for topic, ps := range parts {
		for _, p := range ps {
			if !m.txn.addedParts[topic][p] {
				need[topic] = append(need[topic], p)
			}
		}
	}
	deadline := m.deadline
	m.unlock()
	if len(need) == 0 {
		return nil
	}
	ctx, cancel := m.withDeadline(ctx, deadline)
	defer cancel()
	pid, epoch := m.ProducerID()
	topics := make([]kmsg.AddPartitionsToTxnRequestTopic, 0, len(need))
	for topic, ps := range need {
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		t := kmsg.NewAddPartitionsToTxnRequestTopic()
		t.Topic, t.Partitions = topic, ps
		topics = append(topics, t)
	}
	_, err := m.coords.callCoordinator(ctx, coordinatorCall{
		op:  "AddPartitionsToTxn",
		typ: TransactionCoordinator,
		key: m.txnID,
		build: func() kmsg.Request {
			req := kmsg.NewPtrAddPartitionsToTxnRequest()
			req.TransactionalID = m.txnID
			req.ProducerID, req.ProducerEpoch = pid, epoch
			req.Topics = topics
			return clientAddPartitionsToTxn{req}
		},
		code: func(r kmsg.Response) (int16, *string) {
			return firstPartitionError(r.(*kmsg.AddPartitionsToTxnResponse)), nil
		},
	})
	if err != nil {
		return m.Fail(op, err)
	}
	m.mu.Lock()
	defer m.unlock()
	if m.txn.addedParts == nil {
		m.txn.addedParts = make(map[string]map[int32]bool)
	}
	for topic, ps := range need {
		if m.txn.addedParts[topic] == nil {
			m.txn.addedParts[topic] = make(map[int32]bool)
		}
		for _, p := range ps {
			m.txn.addedParts[topic][p] = true
		}
	}
	return nil
}

// firstPartitionError returns the error that decides an AddPartitionsToTxn
// v3 answer: OPERATION_NOT_ATTEMPTED only says another partition failed.
func firstPartitionError(r *kmsg.AddPartitionsToTxnResponse) int16 {
	var notAttempted int16
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			switch p.ErrorCode {
			case 0:
			case kerr.OperationNotAttempted.Code:
				notAttempted = p.ErrorCode
			default:
				return p.ErrorCode
			}
		}
	}
	return notAttempted
}

// SendOffsets commits consumer-group offsets as part of the current
// transaction. On TV2 brokers it sends TxnOffsetCommit straight to the group
// coordinator, which adds __consumer_offsets to the transaction itself; on
// TV1 brokers AddOffsetsToTxn goes to the transaction coordinator first. It
// retries until ctx or the transaction deadline ends (a lost answer is
// retried too: committing the same offsets again is harmless). Any
// failure, an empty group id, a nil ctx and ctx ending before it could
// start included, dooms the transaction (it must not commit without the
// offsets) and is returned classified.
func (m *Manager) SendOffsets(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset, group GroupMetadata) error {
	const op = "send offsets to transaction"
	if group.GroupID == "" {
		return m.doomWith(op, errs.Usage(op, errors.New("empty group id")))
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
	if len(offsets) == 0 {
		return nil
	}
	ctx, cancel := m.withDeadline(ctx, deadline)
	defer cancel()
	pid, epoch := m.ProducerID()

	if !tv2 && !m.groupAdded(group.GroupID) {
		_, err = m.coords.callCoordinator(ctx, coordinatorCall{
			op:  "AddOffsetsToTxn",
			typ: TransactionCoordinator,
			key: m.txnID,
			build: func() kmsg.Request {
				req := kmsg.NewPtrAddOffsetsToTxnRequest()
				req.TransactionalID = m.txnID
				req.ProducerID, req.ProducerEpoch = pid, epoch
				req.Group = group.GroupID
				return req
			},
			code: func(r kmsg.Response) (int16, *string) { return r.(*kmsg.AddOffsetsToTxnResponse).ErrorCode, nil },
		})
		if err != nil {
			return m.Fail(op, err)
		}
		m.mu.Lock()
		if m.txn.offsetGroups == nil {
			m.txn.offsetGroups = make(map[string]bool)
		}
		m.txn.offsetGroups[group.GroupID] = true
		m.unlock()
	}

	names := make([]string, 0, len(offsets))
	for t := range offsets {
		names = append(names, t)
	}
	meta, err := retry.Do(ctx, func(ctx context.Context) (map[string]TopicMeta, error) {
		return m.topicMeta(ctx, names, false)
	})
	if err != nil {
		return m.Fail(op, err)
	}
	var chk AnswerCheck
	_, err = retry.Do(ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.txnOffsetCommit(ctx, offsets, group, pid, epoch, meta, &chk)
	})
	if err != nil {
		return m.Fail(op, err)
	}
	return nil
}

func (m *Manager) groupAdded(group string) bool {
	m.mu.Lock()
	defer m.unlock()
	return m.txn.offsetGroups[group]
}

// txnOffsetCommit makes one TxnOffsetCommit attempt. Errors that retrying
// cannot fix are returned wrapped with backoff.Permanent.
func (m *Manager) txnOffsetCommit(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset,
	group GroupMetadata, pid int64, epoch int16, meta map[string]TopicMeta, chk *AnswerCheck,
) error {
	node, err := m.coords.Find(ctx, GroupCoordinator, group.GroupID)
	if err != nil {
		return retriableOrPermanent(err)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID = m.txnID
	req.Group = group.GroupID
	req.ProducerID, req.ProducerEpoch = pid, epoch
	req.Generation = group.Generation
	req.MemberID = group.MemberID
	req.InstanceID = group.InstanceID
	for topic, parts := range offsets {
		t := kmsg.NewTxnOffsetCommitRequestTopic()
		t.Topic, t.TopicID = topic, meta[topic].ID
		for p, eo := range parts {
			tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			tp.Partition, tp.Offset, tp.LeaderEpoch = p, eo.Offset, eo.Epoch
			t.Partitions = append(t.Partitions, tp)
		}
		req.Topics = append(req.Topics, t)
	}
	m.MarkSent()
	kresp, err := m.cl.Broker(int(node)).Request(ctx, req)
	if err != nil {
		if isContextErr(err) || errors.Is(err, kgo.ErrClientClosed) {
			return permanent(err)
		}
		m.coords.Forget(GroupCoordinator, group.GroupID, node)
		return fmt.Errorf("TxnOffsetCommit at node %d: %w", node, err)
	}
	resp := kresp.(*kmsg.TxnOffsetCommitResponse)
	var code int16
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				code = p.ErrorCode
			}
		}
	}
	if code == 0 {
		return nil
	}
	kerrErr := kerr.ErrorForCode(code)
	wrapped := fmt.Errorf("TxnOffsetCommit at node %d: %w", node, kerrErr)
	switch {
	case code == kerr.NotCoordinator.Code || code == kerr.CoordinatorNotAvailable.Code || code == kerr.RequestTimedOut.Code:
		m.coords.Forget(GroupCoordinator, group.GroupID, node)
		return wrapped
	case code == kerr.CoordinatorLoadInProgress.Code || code == kerr.ConcurrentTransactions.Code ||
		code == kerr.UnknownTopicOrPartition.Code:
		return wrapped
	case staleSuspect(code):
		if m.ConfirmAnswer(ctx, code, chk) {
			return wrapped
		}
		return permanent(wrapped)
	case kerr.IsRetriable(kerrErr):
		return wrapped
	}
	return permanent(wrapped)
}
