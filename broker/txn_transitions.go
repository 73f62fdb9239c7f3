package broker

// The transaction coordinator's state machine: InitProducerId, adding
// partitions, EndTxn (TV1 and TV2) and the coordinator's own aborts. Every
// function runs on the loop, on a shard that shardFor returned.
//
// EndTxn under TV2 (v5+), where "retry" means the request's epoch is the
// stored epoch minus one (or the last epoch of a rotated-away producer id)
// and "current" that it is the stored epoch; FENCED is PRODUCER_FENCED,
// INVALID is INVALID_TXN_STATE, CONCURRENT is CONCURRENT_TRANSACTIONS,
// "ok" answers the current id and epoch without a write, "bump" writes an
// abort of nothing at the next epoch (no marker), "end" prepares the
// transaction at the next epoch and sends its markers:
//
//	state           ABORT retry  ABORT current  COMMIT retry  COMMIT current
//	Empty           FENCED       bump           FENCED        INVALID
//	Ongoing         FENCED       end            FENCED        end
//	PrepareAbort    CONCURRENT   FENCED         INVALID       FENCED
//	PrepareCommit   INVALID      FENCED         CONCURRENT    FENCED
//	CompleteAbort   ok           bump           FENCED        INVALID
//	CompleteCommit  INVALID      bump           ok            INVALID
//
// This is Kafka 4.x's table with one deliberate difference, which DESIGN.md
// section 4 decides: a COMMIT retry against CompleteAbort is
// PRODUCER_FENCED, not INVALID_TXN_STATE; the transaction the producer
// wants committed ended in an abort it did not ask for at that epoch, and
// the producer is told that it lost. A COMMIT with nothing added is
// INVALID_TXN_STATE, as in Kafka (this is the answer KAFKA-21181's stale
// coordinator gives): an empty transaction cannot be committed, only
// aborted, and that abort bumps the epoch and writes no marker.

import (
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// producerIDAndEpoch is what a KIP-360 InitProducerId expects to hold.
type producerIDAndEpoch struct {
	id    int64
	epoch int16
}

// initProducerID serves a transactional InitProducerId: a new id, an epoch
// bump, a retry answered with the current epoch, a rotation to a new id
// when the epoch is exhausted, or a fence of an ongoing transaction (which
// answers CONCURRENT_TRANSACTIONS so that the producer retries once the
// abort is done, as Kafka does).
func (tc *txnCoordinator) initProducerID(node int32, txnID string, timeoutMs int32, expect *producerIDAndEpoch, now time.Time) (int64, int16, *kerr.Error) {
	if txnID == "" {
		return -1, -1, kerr.InvalidRequest
	}
	if timeoutMs <= 0 || time.Duration(timeoutMs)*time.Millisecond > tc.c.cfg.maxTxnTimeout {
		return -1, -1, kerr.InvalidTransactionTimeout
	}
	sh, err := tc.shardFor(node, txnID)
	if err != nil {
		return -1, -1, err
	}
	m := sh.state.txns[txnID]
	created := m == nil
	if created {
		m = &txnMeta{
			id:             txnID,
			producerID:     tc.c.allocProducerID(),
			prevProducerID: -1,
			nextProducerID: -1,
			epoch:          tc.c.cfg.firstProducerEpoch - 1,
			lastEpoch:      -1,
			timeoutMs:      timeoutMs,
			state:          txnEmpty,
			partitions:     map[txnPartition]struct{}{},
			startMs:        -1,
			updateMs:       now.UnixMilli(),
		}
	}
	if expect != nil && !created && expect.id != m.producerID &&
		(expect.id != m.prevProducerID || !epochExhausted(expect.epoch)) {
		return -1, -1, kerr.ProducerFenced
	}
	switch {
	case m.state.preparing():
		return -1, -1, kerr.ConcurrentTransactions
	case m.state == txnOngoing:
		if _, err := tc.fenceAndAbort(sh, m, now); err != nil {
			return -1, -1, err
		}
		return -1, -1, kerr.ConcurrentTransactions
	}
	n := m.next(now)
	n.state = txnEmpty
	n.timeoutMs = timeoutMs
	n.partitions = map[txnPartition]struct{}{}
	n.startMs = -1
	switch {
	case !created && epochExhausted(m.epoch) && (expect == nil || expect.epoch == m.epoch):
		n.prevProducerID = m.producerID
		n.producerID = tc.c.allocProducerID()
		n.epoch = 0
		n.lastEpoch = -1
		if expect != nil {
			n.lastEpoch = m.epoch
		}
		tc.c.logger.Info("producer epoch exhausted; rotating producer id", "transactional_id", txnID,
			"old_id", m.producerID, "new_id", n.producerID)
	case expect == nil:
		n.epoch = m.epoch + 1
		n.lastEpoch = -1
	case created || expect.epoch == m.epoch:
		n.epoch = m.epoch + 1
		n.lastEpoch = m.epoch
		if created {
			n.lastEpoch = -1
		}
	case expect.epoch == m.lastEpoch:
		// A retry of a bump whose answer was lost: answer it again.
	default:
		return -1, -1, kerr.ProducerFenced
	}
	if err := tc.persist(sh, n, now); err != nil {
		return -1, -1, err
	}
	return n.producerID, n.epoch, nil
}

// checkProducer is the check every add and verification starts with.
func checkProducer(m *txnMeta, pid int64, epoch int16) *kerr.Error {
	switch {
	case m == nil, m.producerID != pid:
		return kerr.InvalidProducerIDMapping
	case m.epoch != epoch:
		return kerr.ProducerFenced
	case m.state.preparing():
		return kerr.ConcurrentTransactions
	}
	return nil
}

// addPartitions adds partitions to the producer's transaction, starting
// one (and its timeout clock) if none is ongoing. tv is the transaction
// version of the request. Partitions already in an ongoing transaction
// answer at once, without a write.
func (tc *txnCoordinator) addPartitions(sh *shard[*txnShard], txnID string, pid int64, epoch int16, parts []txnPartition, tv int8, now time.Time) *kerr.Error {
	m := sh.state.txns[txnID]
	if err := checkProducer(m, pid, epoch); err != nil {
		return err
	}
	if tv >= txnVersion2 && m.state.complete() && m.epochKept {
		// A leader's add (Produce v12, TxnOffsetCommit v5,
		// TxnShareAcknowledge) may start a transaction only because
		// transaction version 2 bumps the epoch at every EndTxn, so that a
		// late request of an ended transaction is fenced. This epoch's
		// last transaction ended with EndTxn below v5 and kept its epoch:
		// such a late request would open a transaction of its own. (A
		// timeout or fencing abort bumps the epoch: it does not count.)
		return kerr.TransactionAbortable
	}
	if m.state == txnOngoing {
		added := true
		for _, tp := range parts {
			if _, ok := m.partitions[tp]; !ok {
				added = false
				break
			}
		}
		if added {
			return nil
		}
	}
	n := m.next(now)
	if m.state != txnOngoing {
		n.startMs = now.UnixMilli()
	}
	for _, tp := range parts {
		n.partitions[tp] = struct{}{}
	}
	n.state = txnOngoing
	n.tv = tv
	return tc.persist(sh, n, now)
}

// verifyPartitions answers the verify-only AddPartitionsToTxn of a
// partition leader (produce below v12): which of parts the client added.
// A partition not in the transaction gets TRANSACTION_ABORTABLE.
func (tc *txnCoordinator) verifyPartitions(sh *shard[*txnShard], txnID string, pid int64, epoch int16, parts []txnPartition) (map[txnPartition]*kerr.Error, *kerr.Error) {
	m := sh.state.txns[txnID]
	if err := checkProducer(m, pid, epoch); err != nil {
		return nil, err
	}
	out := make(map[txnPartition]*kerr.Error, len(parts))
	for _, tp := range parts {
		if _, ok := m.partitions[tp]; ok && m.state == txnOngoing {
			out[tp] = nil
		} else {
			out[tp] = kerr.TransactionAbortable
		}
	}
	return out, nil
}

// endTxn serves EndTxn. It returns the producer id and epoch the producer
// continues with (meaningful for TV2).
func (tc *txnCoordinator) endTxn(node int32, txnID string, pid int64, epoch int16, commit bool, tv2 bool, now time.Time) (int64, int16, *kerr.Error) {
	if txnID == "" {
		return -1, -1, kerr.InvalidRequest
	}
	sh, err := tc.shardFor(node, txnID)
	if err != nil {
		return -1, -1, err
	}
	m := sh.state.txns[txnID]
	if m == nil {
		return -1, -1, kerr.InvalidProducerIDMapping
	}
	if tv2 {
		return tc.endTxnV2(sh, m, pid, epoch, commit, now)
	}
	return tc.endTxnV1(sh, m, pid, epoch, commit, now)
}

// endTxnV1 is EndTxn below v5: no epoch bump, strict epoch equality, and a
// repeated EndTxn against the completed transaction succeeds.
func (tc *txnCoordinator) endTxnV1(sh *shard[*txnShard], m *txnMeta, pid int64, epoch int16, commit bool, now time.Time) (int64, int16, *kerr.Error) {
	switch {
	case m.producerID != pid:
		return -1, -1, kerr.InvalidProducerIDMapping
	case m.epoch != epoch:
		return -1, -1, kerr.ProducerFenced
	}
	same := (commit && (m.state == txnCompleteCommit || m.state == txnPrepareCommit)) ||
		(!commit && (m.state == txnCompleteAbort || m.state == txnPrepareAbort))
	switch {
	case m.state == txnOngoing:
		n, err := tc.prepareEnd(sh, m, commit, txnVersionLegacy, false, now)
		if err != nil {
			return -1, -1, err
		}
		return n.producerID, n.epoch, nil
	case m.state.complete() && same:
		return m.producerID, m.epoch, nil
	case m.state.preparing() && same:
		return -1, -1, kerr.ConcurrentTransactions
	}
	tc.logInvalidTransition(m, commit)
	return -1, -1, kerr.InvalidTxnState
}

// endTxnV2 is EndTxn v5+ (see the table at the top of this file).
func (tc *txnCoordinator) endTxnV2(sh *shard[*txnShard], m *txnMeta, pid int64, epoch int16, commit bool, now time.Time) (int64, int16, *kerr.Error) {
	retryOnOverflow := m.prevProducerID == pid && epoch == math.MaxInt16-1 && m.epoch == 0
	retryOnBump := m.producerID == pid && int32(m.epoch) == int32(epoch)+1
	if m.producerID != pid && !retryOnOverflow {
		return -1, -1, kerr.InvalidProducerIDMapping
	}
	retry := retryOnBump || retryOnOverflow
	current := m.producerID == pid && m.epoch == epoch
	var valid bool
	switch {
	case m.state.preparing():
		valid = retryOnBump
	case m.state.complete():
		valid = retry || current
	default:
		valid = current
	}
	if !valid {
		return -1, -1, kerr.ProducerFenced
	}
	prepare := func(commit bool) (int64, int16, *kerr.Error) {
		n, err := tc.prepareEnd(sh, m, commit, txnVersion2, false, now)
		if err != nil {
			return -1, -1, err
		}
		if n.nextProducerID >= 0 {
			return n.nextProducerID, 0, nil
		}
		return n.producerID, n.epoch, nil
	}
	switch m.state {
	case txnOngoing:
		return prepare(commit)
	case txnEmpty:
		if !commit {
			return prepare(false)
		}
	case txnCompleteCommit:
		switch {
		case commit && retry:
			return m.producerID, m.epoch, nil
		case !commit && !retry:
			return prepare(false)
		}
	case txnCompleteAbort:
		switch {
		case !commit && retry:
			return m.producerID, m.epoch, nil
		case !commit:
			return prepare(false)
		case retry:
			tc.c.logger.Info("commit retried after the coordinator aborted the transaction", "transactional_id", m.id,
				"producer_id", pid, "epoch", epoch)
			return -1, -1, kerr.ProducerFenced
		}
	case txnPrepareCommit:
		if commit {
			return -1, -1, kerr.ConcurrentTransactions
		}
	case txnPrepareAbort:
		if !commit {
			return -1, -1, kerr.ConcurrentTransactions
		}
	}
	tc.logInvalidTransition(m, commit)
	return -1, -1, kerr.InvalidTxnState
}

func (tc *txnCoordinator) logInvalidTransition(m *txnMeta, commit bool) {
	result := "ABORT"
	if commit {
		result = "COMMIT"
	}
	tc.c.logger.Warn("invalid transaction state transition", "transactional_id", m.id,
		"state", m.state.String(), "result", result, "producer_id", m.producerID, "epoch", m.epoch)
}

// prepareEnd writes PrepareCommit or PrepareAbort and sends the markers.
// Under TV2 the epoch is bumped first (KIP-890), and an exhausted epoch
// also allocates the producer id the producer continues with; the markers
// carry the bumped epoch of the current id. An abort that fences the
// producer (fence: m already carries the fenced epoch) is written at that
// epoch without another bump and forgets the last epoch, as Kafka 4.4's
// PrepareEpochFence does; the producer's next InitProducerId bumps again
// (or rotates an exhausted id).
func (tc *txnCoordinator) prepareEnd(sh *shard[*txnShard], m *txnMeta, commit bool, tv int8, fence bool, now time.Time) (*txnMeta, *kerr.Error) {
	n := m.next(now)
	n.state = txnPrepareAbort
	if commit {
		n.state = txnPrepareCommit
	}
	n.tv = tv
	n.epochKept = tv < txnVersion2 && !fence
	switch {
	case fence:
		n.lastEpoch = -1
	case tv >= txnVersion2:
		if epochExhausted(m.epoch) {
			n.nextProducerID = tc.c.allocProducerID()
		}
		n.lastEpoch = m.epoch
		if m.epoch < math.MaxInt16 {
			n.epoch = m.epoch + 1
		}
	}
	if m.state != txnOngoing {
		// An abort with nothing added: the transaction starts and ends now.
		n.startMs = now.UnixMilli()
	}
	if err := tc.persist(sh, n, now); err != nil {
		return nil, err
	}
	tc.sendMarkers(sh, n, now)
	return n, nil
}

// fenceAndAbort aborts an ongoing transaction on the coordinator's own
// initiative (a fencing InitProducerId, or the transaction timeout), the
// way Kafka 4.4 does: the epoch is bumped once to fence the producer and
// the abort markers carry that epoch, with the transaction's own version
// (the real Kafka, checked by integration/differential, ends such a
// transaction at epoch+1, and the next InitProducerId answers epoch+2).
func (tc *txnCoordinator) fenceAndAbort(sh *shard[*txnShard], m *txnMeta, now time.Time) (*txnMeta, *kerr.Error) {
	fenced := m.next(now)
	if fenced.epoch < math.MaxInt16 {
		fenced.epoch++
	}
	return tc.prepareEnd(sh, fenced, false, m.tv, true, now)
}

// completeTxn writes CompleteCommit or CompleteAbort once every marker of a
// prepared transaction is written. A rotation prepared by an exhausted
// epoch takes effect here: the producer continues with the new id at
// epoch 0. A failed write leaves the transaction prepared; whichever node
// leads the partition next completes it.
func (tc *txnCoordinator) completeTxn(sh *shard[*txnShard], m *txnMeta, now time.Time) {
	n := m.next(now)
	n.state = txnCompleteAbort
	if m.state == txnPrepareCommit {
		n.state = txnCompleteCommit
	}
	if m.nextProducerID >= 0 {
		n.prevProducerID = m.producerID
		n.producerID = m.nextProducerID
		n.epoch = 0
		n.nextProducerID = -1
	}
	n.partitions = map[txnPartition]struct{}{}
	if err := tc.persist(sh, n, now); err != nil {
		tc.c.logger.Warn("transaction completion not written; the next coordinator completes it",
			"transactional_id", m.id, "err", err)
		return
	}
	tc.c.logger.Debug("transaction complete", "transactional_id", m.id, "state", n.state.String(),
		"producer_id", n.producerID, "epoch", n.epoch)
}
