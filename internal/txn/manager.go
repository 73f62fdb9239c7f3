package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// State is where a Manager is in the transaction life cycle.
type State int32

// The states. A Manager starts Uninitialized; InitProducerID makes it Ready;
// Begin moves it to InTransaction; Commit passes through Committing and
// Abort through Aborting back to Ready. A failure that dooms the current
// transaction moves it to AbortableError (only Abort, InitProducerID or
// Close leaves it); a commit whose EndTxn(COMMIT) answer never came moves
// it to InDoubt (Commit, Abort, InitProducerID or Close learns the outcome
// and leaves it); one that dooms the producer moves it to FatalError,
// which only Close leaves. Close moves every state to Closed.
const (
	StateUninitialized State = iota
	StateReady
	StateInTransaction
	StateCommitting
	StateAborting
	StateAbortableError
	StateFatalError
	StateInDoubt
	StateClosed
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
	case StateInDoubt:
		return "commit in doubt"
	case StateClosed:
		return "closed"
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
	// Dials follows Client's connection attempts: an operation that runs
	// out of time while no broker can be reached names the connection
	// error. Nil for none.
	Dials *kgoclient.Dials
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
// AddPartitionsToTxn and AddOffsetsToTxn on TV1 brokers, EndTxn), and it stages share acknowledgements until commit. The produce
// path (package producer) asks it for the producer id and epoch and reports
// failures to it.
//
// Operations that change the state (InitProducerID, Begin, Commit, Abort,
// SendOffsets, StageShareAcks, Close) are serialized: each waits for the
// one in progress, within its context. ProducerID, State, Fail, FailTxn,
// MarkSent, AddPartitions and ConfirmAnswer may be called concurrently
// with them.
type Manager struct {
	cl      *kgo.Client
	dials   *kgoclient.Dials
	txnID   string
	timeout time.Duration
	logger  *slog.Logger
	coords  *Coordinators
	caps    *Capabilities

	// sem serializes the state-changing operations (a channel rather than
	// a mutex, so that waiting for it can end with a context).
	sem chan struct{}
	// opsCtx ends when Close gives up waiting for the operation in
	// progress: every operation's context is derived from it.
	opsCtx  context.Context
	stopOps context.CancelFunc

	// stateA mirrors state and txnNum, packed (txnNum<<8 | state), so
	// that TxnState reads both at once without blocking.
	stateA atomic.Uint64
	sent   atomic.Bool // something of this transaction may have reached a broker
	ids    atomic.Pointer[producerIDEpoch]

	mu sync.Mutex
	// resolutions are the Tracker.Resolve calls decided under mu; unlock
	// makes them once mu is released, so that a tracker may call back
	// into the Manager (or the producer) without deadlocking.
	resolutions []func()
	state       State
	closing     bool  // Close has begun: no new operation starts
	err         error // why the state is AbortableError, InDoubt or FatalError
	pid         int64
	epoch       int16
	tv2         bool
	deadline    time.Time
	txnNum      uint64 // transactions begun so far
	txn         txnScope
	stats       Stats
}

// txnScope is what one transaction accumulated; Begin resets it.
type txnScope struct {
	addedParts    map[string]map[int32]bool // TV1: partitions added to the coordinator
	offsetGroups  map[string]bool           // TV1: groups added with AddOffsetsToTxn
	staged        []stagedAcks              // share acks waiting for the outcome
	needBump      bool                      // TV1: sequences uncertain, bump the epoch after abort
	suspectFenced bool                      // a leader answered with an epoch error
	// inDoubt: an attempt of EndTxn(COMMIT) was sent and its answer was
	// lost, so it may have been applied. Only a learned outcome clears it.
	inDoubt bool
	aborted bool // the coordinator already aborted it (the fencing probe)
	// over: the transaction's outcome is settled and accounted for; only
	// the InitProducerId that refreshes the epoch is left to do.
	over bool
}

type producerIDEpoch struct {
	id    int64
	epoch int16
}

// New returns a Manager in StateUninitialized. It sends nothing.
func New(cfg Config) (*Manager, error) {
	if cfg.Client == nil {
		return nil, errs.Usage("new transaction manager", errors.New("Config.Client is nil"))
	}
	if cfg.TransactionalID == "" {
		return nil, errs.Usage("new transaction manager", errors.New("Config.TransactionalID is empty"))
	}
	if cfg.TransactionTimeout < 0 {
		return nil, errs.Usage("new transaction manager", fmt.Errorf("negative transaction timeout %v", cfg.TransactionTimeout))
	}
	if cfg.TransactionTimeout == 0 {
		cfg.TransactionTimeout = DefaultTransactionTimeout
	}
	if cfg.TransactionTimeout < time.Millisecond {
		// InitProducerId carries it in milliseconds: it would be 0, and
		// every call would give up at once.
		return nil, errs.Usage("new transaction manager", fmt.Errorf("transaction timeout %v is below one millisecond", cfg.TransactionTimeout))
	}
	if cfg.TransactionTimeout/time.Millisecond > 1<<31-1 {
		return nil, errs.Usage("new transaction manager", fmt.Errorf("transaction timeout %v overflows int32 milliseconds", cfg.TransactionTimeout))
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("transactional_id", cfg.TransactionalID)
	m := &Manager{
		cl:      cfg.Client,
		dials:   cfg.Dials,
		txnID:   cfg.TransactionalID,
		timeout: cfg.TransactionTimeout,
		logger:  logger,
		coords:  NewCoordinators(cfg.Client, logger),
		caps:    NewCapabilities(cfg.Client),
		sem:     make(chan struct{}, 1),
		pid:     -1,
		epoch:   -1,
	}
	m.opsCtx, m.stopOps = context.WithCancel(context.Background())
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

// Err returns the error that put the Manager in AbortableError, InDoubt
// or FatalError, or nil.
func (m *Manager) Err() error {
	m.mu.Lock()
	defer m.unlock()
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
	defer m.unlock()
	return m.tv2
}

// Deadline returns when the current transaction times out: its Begin plus
// the transaction timeout. It is zero outside a transaction.
func (m *Manager) Deadline() time.Time {
	m.mu.Lock()
	defer m.unlock()
	return m.deadline
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.unlock()
	return m.stats
}

// MarkSequenceGap records that a batch which was given sequence numbers
// failed, so the partition's next sequence may not follow what the broker
// has. On TV2 brokers the abort's epoch bump restarts sequences anyway; on
// TV1 brokers Abort then bumps the epoch with InitProducerId.
func (m *Manager) MarkSequenceGap() {
	m.mu.Lock()
	m.txn.needBump = true
	m.unlock()
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
// allow it: in an error state, the error that put it there, in its class
// and under op's name (the stored error names the call that failed).
// Called with mu held.
func (m *Manager) stateErr(op string) error {
	switch m.state {
	case StateAbortableError, StateFatalError, StateInDoubt:
		return errs.New(errs.ClassOf(m.err), op, fmt.Errorf("an earlier call failed: %w", m.err))
	case StateClosed:
		return errClosed(op)
	case StateUninitialized:
		return errs.Usage(op, errors.New("InitTransactions has not succeeded"))
	case StateReady:
		return errs.Usage(op, errors.New("no transaction in progress"))
	}
	return errs.Usage(op, fmt.Errorf("not allowed while %s", m.state))
}

// errClosed is what every call gets once Close has begun.
func errClosed(op string) error { return errs.Closed(op, errors.New("producer is closed")) }

// errNilContext is the cause of the kshare.ErrUsage error of a call given a nil
// context.
var errNilContext = errors.New("nil context")

// openTxn returns the deadline of the transaction in progress and whether
// it runs TV2, or, when none is in progress, the error op gets.
func (m *Manager) openTxn(op string) (deadline time.Time, tv2 bool, err error) {
	m.mu.Lock()
	defer m.unlock()
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
	cerr := m.classify(op, err)
	m.mu.Lock()
	defer m.unlock()
	m.failLocked(cerr)
	return cerr
}

// FailTxn is Fail for a failure that belongs to transaction txnNum (the
// number TxnState gave when the failed record was buffered): it dooms that
// transaction only if it is still the current one, so that a late failure
// of an ended transaction never touches the next. Every record that fails
// while its transaction is open must be reported here (or with Fail)
// before its failure is counted as resolved, so that a flush that sees
// nothing outstanding also sees the doomed state.
func (m *Manager) FailTxn(txnNum uint64, op string, err error) error {
	cerr := m.classify(op, err)
	m.mu.Lock()
	defer m.unlock()
	if txnNum == m.txnNum || isFatal(cerr) {
		m.failLocked(cerr)
	}
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
	if isFatal(cerr) {
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
// longer commit, so its staged acknowledgements resolve as not committed
// (also when a commit of it is in doubt: the producer can no longer learn
// the outcome, and the error says so with kshare.ErrInDoubt).
func (m *Manager) toFatalLocked(cerr error) {
	if m.state == StateFatalError || m.state == StateClosed {
		return
	}
	m.logger.Warn("producer is now unusable", "err", cerr)
	m.setState(StateFatalError)
	m.err = cerr
	m.resolveStagedLocked(false)
	m.deadline = time.Time{}
}

// Begin starts a transaction. It sends nothing: on TV2 brokers the
// partition leaders add partitions to the transaction themselves, and on
// TV1 brokers the produce path calls AddPartitions. The transaction timeout
// starts now and bounds every retry until the transaction ends. It waits
// for an operation in progress in another goroutine, and fails with
// kshare.ErrUsage once Close has begun.
func (m *Manager) Begin() error {
	const op = "begin transaction"
	_, leave, err := m.enter(context.Background(), op)
	if err != nil {
		return err
	}
	defer leave()
	m.mu.Lock()
	defer m.unlock()
	if m.state != StateReady {
		if m.state == StateInTransaction {
			return errs.Usage(op, errors.New("a transaction is already in progress"))
		}
		return m.stateErr(op)
	}
	m.txn = txnScope{}
	m.sent.Store(false)
	m.deadline = time.Now().Add(m.timeout)
	m.txnNum++
	m.setState(StateInTransaction)
	return nil
}

// resolveStagedLocked tells every staged acknowledgement's tracker how the
// transaction ended, once, and forgets them: committed is true only when
// the coordinator is known to have committed it. The trackers hear it when
// mu is released (unlock).
func (m *Manager) resolveStagedLocked(committed bool) {
	staged := m.txn.staged
	m.txn.staged = nil
	for _, s := range staged {
		if committed {
			m.stats.ShareAcksCommitted += int64(s.acks.Distinct())
		}
		if t := s.acks.Tracker(); t != nil {
			acks := s.acks
			m.resolutions = append(m.resolutions, func() { t.Resolve(acks, committed) })
		}
	}
}

// unlock releases mu and then makes the tracker calls decided under it.
func (m *Manager) unlock() {
	calls := m.resolutions
	m.resolutions = nil
	m.mu.Unlock()
	for _, call := range calls {
		call()
	}
}

// settleLocked records the learned outcome of the current transaction
// once: staged acknowledgements resolve, the matching counter moves, and
// the transaction is over (only an epoch refresh may be left).
func (m *Manager) settleLocked(committed bool) {
	if m.txn.over {
		return
	}
	m.resolveStagedLocked(committed)
	if committed {
		m.stats.Committed++
	} else {
		m.stats.Aborted++
	}
	m.txn = txnScope{over: true}
	m.sent.Store(false)
	m.deadline = time.Time{}
}

// readyLocked makes the Manager Ready after its transaction ended.
func (m *Manager) readyLocked() {
	m.setState(StateReady)
	m.err = nil
	m.deadline = time.Time{}
	m.txn = txnScope{}
	m.sent.Store(false)
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
