package txnclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// State is where a Manager is in the transaction life cycle.
type State int32

// The states. A Manager starts Uninitialized; InitProducerID makes it Ready;
// Begin moves it to InTransaction; Commit passes through Committing and
// Abort through Aborting back to Ready. A failure that dooms the current
// transaction moves it to AbortableError (only Abort, or InitProducerID,
// leaves it); one that dooms the producer moves it to FatalError, which
// nothing leaves.
const (
	StateUninitialized State = iota
	StateReady
	StateInTransaction
	StateCommitting
	StateAborting
	StateAbortableError
	StateFatalError
)

// String names the state, e.g. "in transaction".
func (s State) String() string {
	switch s {
	case StateUninitialized:
		return "uninitialized"
	case StateReady:
		return "ready"
	case StateInTransaction:
		return "in transaction"
	case StateCommitting:
		return "committing"
	case StateAborting:
		return "aborting"
	case StateAbortableError:
		return "abortable error"
	case StateFatalError:
		return "fatal error"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// DefaultTransactionTimeout is Kafka's default transaction.timeout.ms.
const DefaultTransactionTimeout = 60 * time.Second

// Config configures a Manager.
type Config struct {
	// Client is the transport: connections, version negotiation and
	// metadata. The Manager never closes it.
	Client *kgo.Client
	// TransactionalID identifies the producer across restarts; a new
	// Manager with the same id fences the old one. Required.
	TransactionalID string
	// TransactionTimeout is sent in InitProducerId; the coordinator aborts
	// a transaction that stays open longer. It also bounds every retry
	// inside a transaction. Zero means DefaultTransactionTimeout.
	TransactionTimeout time.Duration
	// Logger receives debug and info events; nil discards them.
	Logger *slog.Logger
}

// Stats are a Manager's counters since it was created.
type Stats struct {
	Committed          int64 // transactions committed
	Aborted            int64 // transactions aborted
	ShareAcksCommitted int64 // acknowledged offsets in committed transactions
}

// Manager is a transactional producer's transaction manager: it owns the
// producer id and epoch, the transaction state machine, coordinator
// discovery and the requests to the transaction coordinator (InitProducerId,
// AddPartitionsToTxn and AddOffsetsToTxn on TV1 brokers, AddShareAcksToTxn,
// EndTxn), and it stages share acknowledgements until commit. The produce
// path (package producer) asks it for the producer id and epoch and reports
// failures to it.
//
// Operations that change the state (InitProducerID, Begin, Commit, Abort,
// SendOffsets, StageShareAcks) are serialized; ProducerID, State, Fail,
// MarkSent, AddPartitions and ConfirmAnswer may be called concurrently with
// them.
type Manager struct {
	cl      *kgo.Client
	txnID   string
	timeout time.Duration
	logger  *slog.Logger
	coords  *Coordinators
	caps    *Capabilities

	opMu sync.Mutex // serializes the state-changing operations

	// stateA mirrors state and txnNum, packed (txnNum<<8 | state), so
	// that TxnState reads both at once without blocking.
	stateA atomic.Uint64
	sent   atomic.Bool // something of this transaction may have reached a broker
	ids    atomic.Pointer[producerIDEpoch]

	mu       sync.Mutex
	state    State
	err      error // why the state is AbortableError or FatalError
	pid      int64
	epoch    int16
	tv2      bool
	deadline time.Time
	txnNum   uint64 // transactions begun so far
	txn      txnScope
	stats    Stats
}

// txnScope is what one transaction accumulated; Begin resets it.
type txnScope struct {
	addedParts    map[string]map[int32]bool // TV1: partitions added to the coordinator
	offsetGroups  map[string]bool           // TV1: groups added with AddOffsetsToTxn
	staged        []stagedAcks              // share acks waiting for commit
	needBump      bool                      // TV1: sequences uncertain, bump the epoch after abort
	suspectFenced bool                      // a leader answered with an epoch error
	endTxnInDoubt bool                      // an EndTxn(COMMIT) may have been applied
	aborted       bool                      // the coordinator already aborted it
}

type producerIDEpoch struct {
	id    int64
	epoch int16
}

// New returns a Manager in StateUninitialized. It sends nothing.
func New(cfg Config) (*Manager, error) {
	if cfg.Client == nil {
		return nil, Usage("new transaction manager", errors.New("Config.Client is nil"))
	}
	if cfg.TransactionalID == "" {
		return nil, Usage("new transaction manager", errors.New("Config.TransactionalID is empty"))
	}
	if cfg.TransactionTimeout < 0 {
		return nil, Usage("new transaction manager", fmt.Errorf("negative transaction timeout %v", cfg.TransactionTimeout))
	}
	if cfg.TransactionTimeout == 0 {
		cfg.TransactionTimeout = DefaultTransactionTimeout
	}
	if cfg.TransactionTimeout/time.Millisecond > 1<<31-1 {
		return nil, Usage("new transaction manager", fmt.Errorf("transaction timeout %v overflows int32 milliseconds", cfg.TransactionTimeout))
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("transactional_id", cfg.TransactionalID)
	m := &Manager{
		cl:      cfg.Client,
		txnID:   cfg.TransactionalID,
		timeout: cfg.TransactionTimeout,
		logger:  logger,
		coords:  NewCoordinators(cfg.Client, logger),
		caps:    NewCapabilities(cfg.Client),
		pid:     -1,
		epoch:   -1,
	}
	m.ids.Store(&producerIDEpoch{-1, -1})
	return m, nil
}

// TransactionalID returns the transactional id.
func (m *Manager) TransactionalID() string { return m.txnID }

// TransactionTimeout returns the transaction timeout.
func (m *Manager) TransactionTimeout() time.Duration { return m.timeout }

// Coordinators returns the coordinator cache the Manager uses.
func (m *Manager) Coordinators() *Coordinators { return m.coords }

// Capabilities returns the ApiVersions cache the Manager uses.
func (m *Manager) Capabilities() *Capabilities { return m.caps }

// State returns the current state without blocking.
func (m *Manager) State() State {
	st, _ := m.TxnState()
	return st
}

// TxnState returns the current state and the number of the transaction it
// concerns (Begin numbers transactions 1, 2, ...; 0 before the first),
// read together without blocking. The produce path tags what it buffers
// with the number, so that when a transaction fails it fails only what
// that transaction buffered, never the records of the next one.
func (m *Manager) TxnState() (State, uint64) {
	v := m.stateA.Load()
	return State(v & 0xff), v >> 8
}

// Err returns the error that put the Manager in AbortableError or
// FatalError, or nil.
func (m *Manager) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// ProducerID returns the current producer id and epoch (-1, -1 before
// InitProducerID) without blocking. On TV2 brokers the epoch changes at
// every transaction end, and the produce path restarts its sequence numbers
// whenever it does. Within a transaction it does not change.
func (m *Manager) ProducerID() (int64, int16) {
	ids := m.ids.Load()
	return ids.id, ids.epoch
}

// setIDsLocked stores a new producer id and epoch. Called with mu held.
func (m *Manager) setIDsLocked(id int64, epoch int16) {
	m.pid, m.epoch = id, epoch
	m.ids.Store(&producerIDEpoch{id, epoch})
}

// TV2 reports whether the transaction coordinator runs transaction version
// 2, as detected at the last InitProducerID.
func (m *Manager) TV2() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tv2
}

// Deadline returns when the current transaction times out: its Begin plus
// the transaction timeout. It is zero outside a transaction.
func (m *Manager) Deadline() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deadline
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// MarkSequenceGap records that a batch which was given sequence numbers
// failed, so the partition's next sequence may not follow what the broker
// has. On TV2 brokers the abort's epoch bump restarts sequences anyway; on
// TV1 brokers Abort then bumps the epoch with InitProducerId.
func (m *Manager) MarkSequenceGap() {
	m.mu.Lock()
	m.txn.needBump = true
	m.mu.Unlock()
}

// MarkSent records that a request of the current transaction (a produce
// request on TV2) was handed to the transport, so the transaction must be
// ended with EndTxn even if it failed.
func (m *Manager) MarkSent() { m.sent.Store(true) }

// setState moves to s. Called with mu held.
func (m *Manager) setState(s State) {
	m.state = s
	m.stateA.Store(m.txnNum<<8 | uint64(s))
}

// stateErr is the error a state-changing call gets in a state that does not
// allow it. Called with mu held.
func (m *Manager) stateErr(op string) error {
	switch m.state {
	case StateAbortableError, StateFatalError:
		return m.err
	case StateUninitialized:
		return Usage(op, errors.New("InitTransactions has not succeeded"))
	case StateReady:
		return Usage(op, errors.New("no transaction in progress"))
	}
	return Usage(op, fmt.Errorf("not allowed while %s", m.state))
}

// openTxn returns the deadline of the transaction in progress and whether
// it runs TV2, or, when none is in progress, the error op gets.
func (m *Manager) openTxn(op string) (deadline time.Time, tv2 bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != StateInTransaction {
		return time.Time{}, false, m.stateErr(op)
	}
	return m.deadline, m.tv2, nil
}

// Fail records that the current transaction cannot commit because of err
// (a failed produce, for example) and returns err classified. A fatal
// error makes the Manager fatal; an abortable one moves a transaction in
// progress to AbortableError. Outside a transaction it only classifies.
func (m *Manager) Fail(op string, err error) error {
	cerr := Classify(op, err)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failLocked(cerr)
	return cerr
}

func (m *Manager) failLocked(cerr error) {
	var ke *kerr.Error
	if errors.As(cerr, &ke) {
		switch ke.Code {
		case kerr.InvalidProducerEpoch.Code, kerr.ProducerFenced.Code, kerr.UnknownProducerID.Code:
			m.txn.suspectFenced = true
		}
		switch ke.Code {
		case kerr.OutOfOrderSequenceNumber.Code, kerr.UnknownProducerID.Code, kerr.InvalidProducerEpoch.Code:
			m.txn.needBump = true
		}
	}
	if errors.Is(cerr, ErrFatal) {
		m.toFatalLocked(cerr)
		return
	}
	switch m.state {
	case StateInTransaction, StateCommitting:
		m.setState(StateAbortableError)
		m.err = cerr
	}
}

// toFatalLocked makes the Manager fatal. A transaction in progress can no
// longer commit, so its staged acknowledgements resolve as aborted.
func (m *Manager) toFatalLocked(cerr error) {
	if m.state == StateFatalError {
		return
	}
	m.logger.Warn("producer is now unusable", "err", cerr)
	m.setState(StateFatalError)
	m.err = cerr
	m.resolveStagedLocked(false)
	m.deadline = time.Time{}
}

// InitProducerID gets a producer id and epoch from the transaction
// coordinator. Called again after an abortable error, it aborts the
// transaction in progress: on brokers that accept it (InitProducerId v3+),
// it passes the current id and epoch, so that the coordinator bumps the
// epoch of this producer rather than treating it as a new one, and answers
// PRODUCER_FENCED if a newer producer took over. It retries until ctx or the
// transaction timeout ends. It also detects whether the coordinator runs
// TV2.
func (m *Manager) InitProducerID(ctx context.Context) error {
	const op = "init producer id"
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	switch m.state {
	case StateUninitialized, StateReady, StateAbortableError:
	default:
		err := m.stateErr(op)
		m.mu.Unlock()
		return err
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	if err := m.initProducerIDLocked(ctx); err != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		if errors.Is(err, ErrFatal) {
			m.toFatalLocked(err)
		}
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == StateAbortableError {
		// The coordinator aborted the open transaction for us.
		m.resolveStagedLocked(false)
		m.stats.Aborted++
	}
	m.setState(StateReady)
	m.err = nil
	m.deadline = time.Time{}
	m.txn = txnScope{}
	m.sent.Store(false)
	return nil
}

// initProducerIDLocked sends InitProducerId (with the current id and epoch
// when there is one) and stores the answer. Called with opMu held.
func (m *Manager) initProducerIDLocked(ctx context.Context) error {
	const op = "init producer id"
	pid, epoch := m.ProducerID()
	resp, err := m.coords.callCoordinator(ctx, coordinatorCall{
		op:  "InitProducerId",
		typ: TransactionCoordinator,
		key: m.txnID,
		build: func() kmsg.Request {
			req := kmsg.NewPtrInitProducerIDRequest()
			req.TransactionalID = &m.txnID
			req.TransactionTimeoutMillis = int32(m.timeout / time.Millisecond)
			req.ProducerID, req.ProducerEpoch = pid, epoch
			return req
		},
		code: func(r kmsg.Response) (int16, *string) {
			return r.(*kmsg.InitProducerIDResponse).ErrorCode, nil
		},
	})
	if err != nil {
		return Classify(op, err)
	}
	r := resp.(*kmsg.InitProducerIDResponse)
	tv2 := false
	if node, ok := m.coords.Cached(TransactionCoordinator, m.txnID); ok {
		caps, err := m.caps.Of(ctx, node)
		if err != nil {
			return Classify(op, err)
		}
		tv2 = m.caps.tv2(caps)
	}
	m.mu.Lock()
	m.setIDsLocked(r.ProducerID, r.ProducerEpoch)
	m.tv2 = tv2
	m.mu.Unlock()
	m.logger.Debug("producer id initialized", "producer_id", r.ProducerID, "epoch", r.ProducerEpoch, "tv2", tv2)
	return nil
}

// Begin starts a transaction. It sends nothing: on TV2 brokers the
// partition leaders add partitions to the transaction themselves, and on
// TV1 brokers the produce path calls AddPartitions. The transaction timeout
// starts now and bounds every retry until the transaction ends.
func (m *Manager) Begin() error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != StateReady {
		if m.state == StateInTransaction {
			return Usage("begin transaction", errors.New("a transaction is already in progress"))
		}
		return m.stateErr("begin transaction")
	}
	m.txn = txnScope{}
	m.sent.Store(false)
	m.deadline = time.Now().Add(m.timeout)
	m.txnNum++
	m.setState(StateInTransaction)
	return nil
}

// resolveStagedLocked tells every staged acknowledgement's tracker how the
// transaction ended, once, and forgets them.
func (m *Manager) resolveStagedLocked(committed bool) {
	staged := m.txn.staged
	m.txn.staged = nil
	for _, s := range staged {
		if committed {
			m.stats.ShareAcksCommitted += int64(s.acks.Len())
		}
		if s.acks.Tracker != nil {
			s.acks.Tracker.Resolve(s.acks, committed)
		}
	}
}

// AnswerCheck carries the stale-answer defense across the attempts of one
// request that the producer sends without talking to the transaction
// coordinator first (a TV2 produce, TxnOffsetCommit, TxnShareAcknowledge).
// The zero value is ready to use.
type AnswerCheck struct {
	seen  bool
	coord int32
}

// ConfirmAnswer applies the stale-answer defense to a stale-suspect error
// code (INVALID_TXN_STATE, PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING)
// that a broker returned on behalf of the transaction coordinator. The
// client cannot see which coordinator the broker asked, so it finds the
// coordinator again: the first such answer is always retried (true), and a
// repeated one is final (false) only if the coordinator has not moved since
// the previous one; a moved or unreachable coordinator means another retry.
// Other codes are final at once.
func (m *Manager) ConfirmAnswer(ctx context.Context, code int16, chk *AnswerCheck) bool {
	if !staleSuspect(code) {
		return false
	}
	now, err := m.coords.Refresh(ctx, TransactionCoordinator, m.txnID)
	if err != nil {
		return true
	}
	if chk.seen && chk.coord == now {
		return false
	}
	m.logger.Info("answer may come from a former transaction coordinator; retrying",
		"answer", kerr.ErrorForCode(code).Error(), "coordinator", now, "first", !chk.seen)
	chk.seen, chk.coord = true, now
	return true
}
