package producer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/txn"
	"github.com/kshare-go/kshare/wire"
)

// Producer is a transactional Kafka producer on kgo's transport. It batches
// records per partition into idempotent, transactional RecordBatch v2
// batches and runs the transaction itself, so that share acknowledgements
// (KIP-1289) can join its transactions and a transaction that carries only
// acknowledgements still commits. Create it with New; a Producer that New
// did not create answers every call with kshare.ErrUsage.
//
// Produce, ProduceSync, Flush, Metrics and Status may be called from many
// goroutines. The transaction calls (InitTransactions, BeginTransaction,
// SendOffsetsToTransaction, SendShareAcksToTransaction, CommitTransaction,
// AbortTransaction) are serialized; records must be produced between
// BeginTransaction and the start of CommitTransaction or AbortTransaction.
type Producer struct {
	cfg        config
	cl         *kgo.Client
	txn        *txn.Manager
	compressor kgo.Compressor

	ctx    context.Context // ends at Close; bounds produce requests
	cancel context.CancelFunc

	topicsMu sync.RWMutex
	topics   map[string]*topic
	// loading holds, per topic whose first metadata load is running, a
	// channel closed when it ends (loadTopic).
	loading map[string]chan struct{}
	waits   waits

	buffered    atomic.Int64 // records holding a buffer slot (MaxBufferedRecords)
	slotMu      sync.Mutex
	slotCh      chan struct{} // closed when a slot frees up while the buffer was full
	outstanding atomic.Int64  // records between Produce and their promise
	drainMu     sync.Mutex
	drainCh     chan struct{} // closed when outstanding reaches zero
	flushing    atomic.Int32

	wake       chan struct{}
	refreshing atomic.Bool // a leader refresh is running
	closing    atomic.Bool
	closed     chan struct{} // closed when Close has finished
	loopDone   chan struct{}
	sends      sync.WaitGroup

	metrics metrics
	ledger  ledgerState
}

// New creates a Producer and its kgo client. It does not contact the
// cluster; call InitTransactions before the first transaction. It fails
// with ErrUsage on missing or invalid options.
func New(opts ...Opt) (*Producer, error) {
	const op = "new producer"
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, errs.Usage(op, errors.New("nil option"))
		}
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, errs.Usage(op, err)
	}
	compressor, err := kgo.DefaultCompressor(cfg.compression...)
	if err != nil {
		return nil, errs.Usage(op, fmt.Errorf("compression: %w", err))
	}
	kopts := []kgo.Opt{
		kgo.ProduceRequestTimeout(cfg.produceTimeout),
		kgo.MaxVersions(wire.KgoMaxVersions()),
	}
	if cfg.autoCreateTopics {
		kopts = append(kopts, kgo.AllowAutoTopicCreation())
	}
	cl, dials, err := cfg.conn.NewClient(kopts...)
	if err != nil {
		return nil, errs.Usage(op, err)
	}
	mgr, err := txn.New(txn.Config{
		Client:             cl,
		Dials:              dials,
		TransactionalID:    cfg.txnID,
		TransactionTimeout: cfg.txnTimeout,
		Logger:             cfg.conn.Logger,
	})
	if err != nil {
		cl.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{
		cfg:        cfg,
		cl:         cl,
		txn:        mgr,
		compressor: compressor,
		ctx:        ctx,
		cancel:     cancel,
		topics:     make(map[string]*topic),
		loading:    make(map[string]chan struct{}),
		wake:       make(chan struct{}, 1),
		closed:     make(chan struct{}),
		loopDone:   make(chan struct{}),
	}
	p.metrics.init()
	go p.dispatchLoop()
	return p, nil
}

// Client returns the underlying kgo client, for admin requests (for
// example kadm.NewClient(p.Client()), or shareconsumer.AlterGroupConfig).
// Do not produce through it, and do not close it: Close does.
func (p *Producer) Client() *kgo.Client {
	if !p.made() {
		return nil
	}
	return p.cl
}

// Status describes a producer for logs and diagnostics. Do not drive a
// program with it: the errors of the transaction calls say what to do.
type Status struct {
	TransactionalID string
	// ProducerID and Epoch are -1 before InitTransactions succeeds. On
	// TV2 clusters the epoch moves at every transaction end.
	ProducerID int64
	Epoch      int16
	// State names where the producer is: "uninitialized", "ready",
	// "in transaction", "committing", "aborting", "abortable error",
	// "commit in doubt", "fatal error" or "closed".
	State string
	// TV2 reports whether the transaction coordinator runs transaction
	// version 2 (KIP-890), as found by the last InitTransactions.
	TV2 bool
	// Err is the error that put the producer in an error state, or nil.
	Err error
}

// Status returns the producer's current status without blocking (Err and
// TV2 wait only for the manager's lock, never for a transaction call).
func (p *Producer) Status() Status {
	if !p.made() {
		return Status{ProducerID: -1, Epoch: -1, State: "not created by New", Err: errNotMade("status")}
	}
	pid, epoch := p.txn.ProducerID()
	return Status{
		TransactionalID: p.cfg.txnID,
		ProducerID:      pid,
		Epoch:           epoch,
		State:           p.txn.State().String(),
		TV2:             p.txn.TV2(),
		Err:             p.txn.Err(),
	}
}

// InitTransactions gets a producer id and epoch, fencing any older producer
// with the same transactional id, and detects whether the cluster runs
// transaction version 2. Call it once before the first transaction.
//
// It is also the recovery after an abortable error or an in-doubt commit:
// it ends the open transaction first, exactly as AbortTransaction does
// (buffered records fail, records in flight are waited for, EndTxn(ABORT)
// goes out; an in-doubt commit's outcome is learned, and the metrics and
// the staged acknowledgements report it), and then bumps the epoch with
// InitProducerId carrying the current id and epoch (KIP-360, as the Java
// client does). Its own recovery never makes the producer fatal: only a
// newer producer with the same transactional id (ErrFatal with
// PRODUCER_FENCED) or a configuration error does.
//
// If ctx (or the transaction timeout) ends first, nothing is lost: the
// producer stays as it was and InitTransactions may be called again. After
// Close it fails with ErrClosed.
func (p *Producer) InitTransactions(ctx context.Context) error {
	if !p.made() {
		return errNotMade("init transactions")
	}
	if p.closing.Load() {
		return errClosed("init transactions")
	}
	return p.txn.InitProducerID(ctx, p.drain)
}

// BeginTransaction starts a transaction. It sends nothing. It waits for a
// transaction call in progress in another goroutine. It fails with
// ErrClosed after Close; with ErrUsage when a transaction is in progress
// or InitTransactions has not succeeded; and, after an earlier failure
// that AbortTransaction (or InitTransactions) has not cleared, with that
// failure's error (ErrAbortable, ErrInDoubt or ErrFatal).
func (p *Producer) BeginTransaction() error {
	if !p.made() {
		return errNotMade("begin transaction")
	}
	if p.closing.Load() {
		return errClosed("begin transaction")
	}
	return p.txn.Begin()
}

// CommitTransaction flushes every produced record, sends the staged share
// acknowledgements and commits with EndTxn, within ctx and the transaction
// timeout. A transaction that carries only share acknowledgements commits
// too. It commits all of the transaction or none of it:
//
//   - nil: everything committed.
//   - ErrAbortable: nothing committed (a record failed, an acknowledgement
//     was refused, ctx or the timeout ended before EndTxn(COMMIT) was
//     sent); call AbortTransaction.
//   - ErrInDoubt: EndTxn(COMMIT) was sent and no answer came before ctx or
//     the transaction timeout ended (a lost answer is retried until the
//     coordinator answers, within them). The transaction committed
//     entirely or not at all; call AbortTransaction, which learns which
//     (ErrCommitted if it had), or CommitTransaction again, which finishes
//     the commit. The staged acknowledgements are resolved only once the
//     outcome is known.
//   - ErrFatal: the producer was fenced (or the cluster refuses it);
//     close it. If EndTxn(COMMIT) had been sent, the message says that
//     the outcome is unknown; the newer producer's InitTransactions
//     settles it.
//   - ErrUnsupported: a broker cannot decode the KIP-1289 messages
//     (wire.ErrMalformed); nothing committed.
//
// Called in the InDoubt state, it retries EndTxn(COMMIT). If Close runs
// meanwhile with time to spare it waits for the commit; if Close's context
// ends first, the commit fails before EndTxn(COMMIT) (ErrAbortable) or is
// left in doubt.
func (p *Producer) CommitTransaction(ctx context.Context) error {
	if !p.made() {
		return errNotMade("commit transaction")
	}
	if p.closing.Load() {
		return errClosed("commit transaction")
	}
	start := time.Now()
	err := p.txn.Commit(ctx, p.flushForCommit, p.drain)
	if err == nil {
		p.metrics.commit(time.Since(start))
	}
	return err
}

// flushForCommit delivers every buffered record and reports whether all of
// them were written. A commit that Close waits for flushes too.
func (p *Producer) flushForCommit(ctx context.Context) error {
	if err := p.flush(ctx); err != nil {
		return err
	}
	if st := p.txn.State(); st != txn.StateCommitting {
		return p.txn.Err()
	}
	return nil
}

// AbortTransaction aborts the current transaction: buffered records fail
// with ErrAbortable, records in flight are waited for, and EndTxn(ABORT)
// goes to the coordinator. Staged share acknowledgements are resolved as
// not committed (the records become available again at the broker).
//
// After an in-doubt commit (ErrInDoubt) it learns the outcome: nil means
// the transaction is aborted; an error matching ErrCommitted means it had
// committed (outputs and acknowledgements took effect; the metrics and the
// staged acknowledgements say so too; it is not a failure), and the
// producer is ready either way. If ctx ends first, the producer stays
// where it was and AbortTransaction may be called again; a fenced producer
// gets ErrFatal. With no transaction in progress it fails with ErrUsage,
// after Close with ErrClosed.
func (p *Producer) AbortTransaction(ctx context.Context) error {
	if !p.made() {
		return errNotMade("abort transaction")
	}
	if p.closing.Load() {
		return errClosed("abort transaction")
	}
	return p.txn.Abort(ctx, p.drain)
}

// SendOffsetsToTransaction commits consumer-group offsets as part of the
// transaction (TxnOffsetCommit; AddOffsetsToTxn first on TV1 clusters).
// Records produced earlier need not be flushed first. Any failure dooms
// the transaction, which must not commit without the offsets: an empty
// group id (ErrUsage), ctx ending or a refusal by the group coordinator
// (ErrAbortable).
func (p *Producer) SendOffsetsToTransaction(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset, group GroupMetadata) error {
	if !p.made() {
		return errNotMade("send offsets to transaction")
	}
	if p.closing.Load() {
		return errClosed("send offsets to transaction")
	}
	return p.txn.SendOffsets(ctx, offsets, txn.GroupMetadata(group))
}

// GroupMetadata identifies the consumer-group member whose offsets a
// transaction commits (SendOffsetsToTransaction), as kgo's
// GroupTransactSession or the Java client's ConsumerGroupMetadata does.
// The group coordinator refuses the offsets (ErrAbortable) if the member
// or generation is no longer current. An empty MemberID and Generation -1
// skip that check.
type GroupMetadata struct {
	GroupID    string
	MemberID   string
	Generation int32
	// InstanceID is the member's group.instance.id (static membership),
	// nil for a dynamic member.
	InstanceID *string
}

// SendShareAcksToTransaction adds share-group acknowledgements, built by
// shareconsumer.Consumer.Acks, to the transaction: they take effect if and
// only if it commits. meta is that consumer's GroupMetadata. They are sent
// at commit, before EndTxn. Empty acknowledgements add nothing.
//
// With ShareLedger, the claim ledger carries them instead of KIP-1289, on
// any cluster: their claims join the transaction now, and the commit
// renews their locks before EndTxn and acknowledges them after it (see
// ShareLedger); a lock that cannot be renewed then dooms the commit
// (ErrAbortable), and a ledger topic that cannot be created or written
// dooms the transaction.
//
// Without ShareLedger it fails with ErrUnsupported, sending nothing and
// changing nothing, if a broker involved lacks KIP-1289's
// TxnShareAcknowledge (key 95 v0 and share.version >= 3) or the
// transaction runs version 1; the error names ShareLedger as the way to
// run on such a cluster. Any other failure dooms the transaction, which
// must not commit without them: nil or invalid acknowledgements, metadata
// of another member, acknowledgements merged from two consumers, records
// the consumer does not hold or a consumer in another mode (ErrUsage,
// shareconsumer.ErrNotHeld); a lock that ran out (ErrAbortable,
// shareconsumer.ErrLockExpired); ctx ending (ErrAbortable).
//
// The consumer that built acks follows them: it renews their locks while
// the transaction is open and learns its outcome exactly once (releasing
// the records of an aborted transaction at once). KIP-1289 stages only
// ACCEPT and REJECT: records acknowledged with AckRelease are left out of
// the transaction, and the consumer releases them with a plain
// ShareAcknowledge once the outcome is known, whichever it is.
func (p *Producer) SendShareAcksToTransaction(ctx context.Context, acks *kshare.ShareAcks, meta kshare.ShareGroupMetadata) error {
	if !p.made() {
		return errNotMade("send share acknowledgements to transaction")
	}
	if p.closing.Load() {
		return errClosed("send share acknowledgements to transaction")
	}
	if p.cfg.ledger != "" {
		return p.txn.StageLedgerAcks(ctx, p.cfg.ledger, acks, meta, func(ctx context.Context, set *acktrack.Set) error {
			return p.writeClaims(ctx, set, meta.GroupID)
		})
	}
	return p.txn.StageShareAcks(ctx, acks, meta)
}

// Metrics returns a snapshot of the producer's counters.
func (p *Producer) Metrics() Metrics {
	if !p.made() {
		return Metrics{}
	}
	s := p.txn.Stats()
	return p.metrics.snapshot(s)
}

func errClosed(op string) error { return errs.Closed(op, errors.New("producer is closed")) }

// made reports whether p was created by New: a nil or zero Producer
// answers every call with ErrUsage instead of panicking.
func (p *Producer) made() bool { return p != nil && p.txn != nil }

// errNotMade is what a call of op on a Producer that New did not create
// gets.
func errNotMade(op string) error {
	return errs.Usage(op, errors.New("the producer was not created by producer.New"))
}

// Produce buffers r for the current transaction and calls promise (if not
// nil) once with r and its fate: nil once the broker has written it, or a
// classified error. A failed record dooms the transaction (ErrAbortable).
// Produce blocks only while the buffer is full or the topic's metadata is
// unknown, within ctx; AbortTransaction and Close end that wait (the
// record fails with ErrAbortable or ErrClosed). Promises run on the
// producer's goroutines, in order per partition, and must not block.
//
// r.Topic is required; r.Timestamp defaults to now; r.Partition is used as
// given only with kgo.ManualPartitioner. A record refused as ErrUsage (nil
// record, nil ctx, no topic) during a transaction dooms that transaction
// like any failed record: the application meant it to be part of it.
func (p *Producer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	const op = "produce"
	if promise == nil {
		promise = func(*kgo.Record, error) {}
	}
	if !p.made() {
		promise(r, errNotMade(op))
		return
	}
	// Counting the record before checking the state pairs with Commit and
	// Abort, which change the state before waiting for the count to drop:
	// either they wait for this record or it sees their state.
	p.outstanding.Add(1)
	st, txnNum := p.txn.TxnState()
	if p.closing.Load() {
		p.refuseClosed(r, promise, st, txnNum)
		return
	}
	if err := checkRecord(ctx, r); err != nil {
		err = errs.Usage(op, err)
		if st == txn.StateInTransaction {
			p.txn.DoomTxn(txnNum, op, err)
		}
		p.resolve(r, promise, err)
		return
	}
	if st != txn.StateInTransaction {
		p.resolve(r, promise, p.stateErr(op, st))
		return
	}
	if err := p.acquireSlot(ctx, txnNum); err != nil {
		p.failWaiting(r, promise, txnNum, err)
		return
	}
	t, err := p.topic(ctx, r.Topic, txnNum)
	if err != nil {
		p.releaseSlots(1)
		p.failWaiting(r, promise, txnNum, err)
		return
	}
	if err := p.buffer(t, r, promise, txnNum); err != nil {
		p.releaseSlots(1)
		p.failUnbuffered(r, promise, txnNum, err)
	}
}

// checkRecord reports why Produce refuses r as a usage error, or nil.
func checkRecord(ctx context.Context, r *kgo.Record) error {
	switch {
	case r == nil:
		return errors.New("nil record")
	case ctx == nil:
		return errNilContext
	case r.Topic == "":
		return errors.New("record has no topic")
	}
	return nil
}

// errNilContext is the cause of the ErrUsage error of a call given a nil
// context.
var errNilContext = errors.New("nil context")

// resolve hands a record that never reached a batch its fate, and only
// then counts it resolved, as the send path does: a Flush, Abort or Close
// that finds nothing outstanding finds every promise called.
func (p *Producer) resolve(r *kgo.Record, promise func(*kgo.Record, error), err error) {
	promise(r, err)
	p.doneRecords(1)
}

// refuseClosed refuses a record because the producer is closing. If its
// transaction is still open, the transaction can no longer commit (the
// application meant the record to be part of it), so it is doomed before
// the record counts as resolved.
func (p *Producer) refuseClosed(r *kgo.Record, promise func(*kgo.Record, error), st txn.State, txnNum uint64) {
	if st == txn.StateInTransaction {
		p.txn.FailTxn(txnNum, "produce", errs.Abortable("produce", errors.New("a record was refused: the producer is closing")))
	}
	p.resolve(r, promise, errClosed("produce"))
}

// failWaiting fails a record whose wait for a buffer slot or for metadata
// ended: its transaction was abandoned (refused as closed when Close
// abandoned it), or ctx or the transaction timeout ended.
func (p *Producer) failWaiting(r *kgo.Record, promise func(*kgo.Record, error), txnNum uint64, err error) {
	if !errors.Is(err, errAbandoned) {
		p.failUnbuffered(r, promise, txnNum, err)
		return
	}
	if p.closing.Load() {
		p.refuseClosed(r, promise, txn.StateInTransaction, txnNum)
		return
	}
	p.failUnbuffered(r, promise, txnNum, errs.Abortable("produce", errors.New("transaction aborted before the record was sent")))
}

// acquireSlot takes one of the MaxBufferedRecords slots, waiting while
// none is free, within ctx and until transaction txnNum is abandoned
// (errAbandoned).
func (p *Producer) acquireSlot(ctx context.Context, txnNum uint64) error {
	limit := int64(p.cfg.maxBuffered)
	for {
		n := p.buffered.Load()
		if n < limit {
			if p.buffered.CompareAndSwap(n, n+1) {
				return nil
			}
			continue
		}
		p.slotMu.Lock()
		if p.buffered.Load() < limit {
			p.slotMu.Unlock()
			continue
		}
		if p.slotCh == nil {
			p.slotCh = make(chan struct{})
		}
		ch := p.slotCh
		p.slotMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.waits.of(txnNum).Done():
			return errAbandoned
		}
	}
}

// releaseSlots frees n slots and wakes producers waiting for one.
func (p *Producer) releaseSlots(n int) {
	if p.buffered.Add(-int64(n))+int64(n) >= int64(p.cfg.maxBuffered) {
		p.slotMu.Lock()
		if p.slotCh != nil {
			close(p.slotCh)
			p.slotCh = nil
		}
		p.slotMu.Unlock()
	}
}

func (p *Producer) stateErr(op string, st txn.State) error {
	if err := p.txn.Err(); err != nil {
		return err
	}
	return errs.Usage(op, fmt.Errorf("no transaction in progress (state %s)", st))
}

// failUnbuffered fails a record of transaction txnNum that never reached
// a batch; it dooms that transaction like any failed record.
func (p *Producer) failUnbuffered(r *kgo.Record, promise func(*kgo.Record, error), txnNum uint64, err error) {
	p.resolve(r, promise, p.txn.FailTxn(txnNum, "produce", err))
}

// buffer partitions r and appends it to its partition's open batch of
// transaction txnNum.
func (p *Producer) buffer(t *topic, r *kgo.Record, promise func(*kgo.Record, error), txnNum uint64) error {
	now := time.Now()
	if r.Timestamp.IsZero() {
		r.Timestamp = now
	}
	pid, epoch := p.txn.ProducerID()
	t.mu.Lock()
	idx := t.pick(r)
	if onNew, ok := t.tp.(kgo.TopicPartitionerOnNewBatch); ok && idx >= 0 && idx < len(t.parts) {
		part := t.parts[idx]
		part.mu.Lock()
		opens := part.opensBatchLocked()
		part.mu.Unlock()
		if opens {
			onNew.OnNewBatch()
			idx = t.pick(r)
		}
	}
	if idx < 0 || idx >= len(t.parts) {
		t.mu.Unlock()
		return fmt.Errorf("partition %d of %q (%d partitions): %w", idx, t.name, len(t.parts), kerr.UnknownTopicOrPartition)
	}
	part := t.parts[idx]
	r.Partition = part.id
	part.mu.Lock()
	opened := part.opensBatchLocked()
	ok, full := part.appendLocked(r, promise, p.cfg.batchMaxBytes, now, pid, epoch, txnNum)
	part.mu.Unlock()
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("record of %d bytes exceeds the batch limit of %d: %w",
			len(r.Key)+len(r.Value), p.cfg.batchMaxBytes, kerr.MessageTooLarge)
	}
	if opened || full || p.cfg.linger == 0 {
		p.poke()
	}
	return nil
}

// poke wakes the dispatcher without blocking.
func (p *Producer) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// doneRecords marks n records as resolved and wakes Flush waiters when
// none is left.
func (p *Producer) doneRecords(n int64) {
	if p.outstanding.Add(-n) == 0 {
		p.drainMu.Lock()
		if p.drainCh != nil {
			close(p.drainCh)
			p.drainCh = nil
		}
		p.drainMu.Unlock()
	}
}

// Flush sends every buffered record at once, ignoring linger, and waits
// until each has its answer or ctx ends. It does not end the transaction;
// records that failed have already reported it to their promises. It
// returns nil once every record has its answer, ErrAbortable wrapping
// ctx's error when ctx ends first (the records keep going, and their
// promises still hear their fate), ErrUsage for a nil ctx, and ErrClosed
// once Close has begun (Close fails or waits for every record itself).
func (p *Producer) Flush(ctx context.Context) error {
	const op = "flush"
	if !p.made() {
		return errNotMade(op)
	}
	if p.closing.Load() {
		return errClosed(op)
	}
	return p.flush(ctx)
}

// flush is Flush without the closing check.
func (p *Producer) flush(ctx context.Context) error {
	const op = "flush"
	if ctx == nil {
		return errs.Usage(op, errNilContext)
	}
	p.flushing.Add(1)
	defer p.flushing.Add(-1)
	p.poke()
	if err := p.waitDrained(ctx); err != nil {
		return errs.Abortable(op, err)
	}
	return nil
}

func (p *Producer) waitDrained(ctx context.Context) error {
	for {
		p.drainMu.Lock()
		if p.outstanding.Load() == 0 {
			p.drainMu.Unlock()
			return nil
		}
		if p.drainCh == nil {
			p.drainCh = make(chan struct{})
		}
		ch := p.drainCh
		p.drainMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d records: %w", p.outstanding.Load(), ctx.Err())
		}
	}
}

// drain fails every buffered record that is not in flight, ends the waits
// of records not yet buffered, and waits for those in flight: after it,
// nothing of the transaction is travelling.
func (p *Producer) drain(ctx context.Context) error {
	_, txnNum := p.txn.TxnState()
	p.waits.abandon(txnNum)
	p.failQueued(errs.Abortable("produce", errors.New("transaction aborted before the record was sent")))
	p.poke()
	return p.waitDrained(ctx)
}

// ProduceSync produces rs and waits for all of their promises. The results
// are in the order of rs.
func (p *Producer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	results := make(kgo.ProduceResults, len(rs))
	var wg sync.WaitGroup
	wg.Add(len(rs))
	for i, r := range rs {
		p.Produce(ctx, r, func(r *kgo.Record, err error) {
			results[i] = kgo.ProduceResult{Record: r, Err: err}
			wg.Done()
		})
	}
	wg.Wait()
	return results
}

// Close shuts the producer down within ctx and never blocks past it
// (beyond the moment it takes the producer's own goroutines to notice that
// ctx ended). It never lets part of a transaction commit:
//
//   - A transaction call in progress in another goroutine is waited for,
//     within ctx: a CommitTransaction finishes (all of its records were
//     written, or it fails). If ctx ends first, that call's context is
//     cancelled: a commit that has not sent EndTxn(COMMIT) fails without
//     sending it, one that has is left in doubt.
//   - A transaction in progress, failed, or in doubt is then ended as
//     AbortTransaction ends it (buffered records fail, records in flight
//     are waited for, EndTxn(ABORT); an in-doubt commit's outcome is
//     learned).
//   - Records produced while it closes are refused, and doom their
//     transaction.
//
// It returns nil when no transaction was open or it aborted the one that
// was; an error matching kshare.ErrCommitted, which is not a failure, when
// it learned that an in-doubt commit had committed (the transaction's
// records and acknowledgements took effect); and an error when it could
// not end a transaction (ctx ended, the coordinator was unreachable):
// ErrAbortable (the coordinator aborts the transaction when
// its timeout passes, or when the next producer with this transactional id
// initializes) or ErrInDoubt (an in-doubt commit's outcome could not be
// learned). Either way every staged acknowledgement has been resolved
// exactly once (as not committed unless the commit is known to have
// committed), every goroutine of the producer has exited and the kgo
// client is closed. Later calls fail with ErrClosed at once; calling Close
// again waits for the first Close, within its own ctx, and returns nil. A
// nil ctx is taken as context.Background().
//
// Do not call Close (or any transaction call) from a promise: promises
// run on the producer's goroutines, which Close waits for.
func (p *Producer) Close(ctx context.Context) error {
	if !p.made() {
		return errNotMade("close")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if p.closing.Swap(true) {
		select {
		case <-p.closed:
		case <-ctx.Done():
		}
		return nil
	}
	defer close(p.closed)
	// Records waiting for a buffer slot or metadata are refused now: they
	// would otherwise hold Close until their own context ended.
	p.waits.abandon(math.MaxUint64)
	err := p.txn.Close(ctx, p.drain)
	p.cancel()
	<-p.loopDone
	p.failQueued(errClosed("produce"))
	p.sends.Wait()
	p.cl.Close()
	return err
}
