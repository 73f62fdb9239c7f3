package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/internal/retry"
	"github.com/kshare-go/kshare/internal/txn"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// Worker is what Run hands one instance of a consume-transform-produce
// worker loop (a WorkerFunc): where to connect, what to read and write,
// and the hooks through which the harness injects faults and counts what
// the loop did.
type Worker struct {
	// Index is the worker's slot; instances of one slot share
	// TransactionalID.
	Index int
	Seeds []string
	// Group is the share group to consume Input in; every input record
	// goes to Output, in transactions of at most TxnSize records that
	// also carry the acknowledgements of their input.
	Group, Input, Output string
	TransactionalID      string
	// Ledger is the claim ledger topic ("": KIP-1289): both the consumer
	// and the producer name it (ShareLedger).
	Ledger string
	// DeadLetter is the topic of the dead-letter copies of the records the
	// loop rejects ("": none), written in the transaction that rejects
	// them (shareconsumer.Consumer.DeadLetter).
	DeadLetter string
	TxnSize    int
	TxnTimeout time.Duration
	Logger     *slog.Logger
	// Hooks are the harness's; a nil *Hooks does nothing.
	Hooks *Hooks
}

// WorkerFunc is a worker loop: it runs one instance of a worker until ctx
// ends, and then returns nil, or until it meets an error it cannot handle,
// which it returns. Run stops the whole run on such an error unless an
// injected fault explains it.
type WorkerFunc func(ctx context.Context, w Worker) error

// Hooks are where a worker loop lets the harness in. Each method does
// nothing on a nil *Hooks, so a loop runs unchanged without a harness.
type Hooks struct {
	inst *instance
}

// Started gives the harness the instance's clients: it reads delivery
// counts and lock deadlines from cons, and a fault that kills the
// instance drops the connections of both.
func (h *Hooks) Started(cons *shareconsumer.Consumer, prod *producer.Producer) {
	if h == nil {
		return
	}
	h.inst.mu.Lock()
	h.inst.cons, h.inst.prod = cons, prod
	h.inst.mu.Unlock()
}

// instanceKey is how the context of a worker's calls carries its
// instance, for the ledger's fault hooks.
type instanceKey struct{}

// instanceFrom returns the instance whose call ctx is, or nil.
func instanceFrom(ctx context.Context) *instance {
	in, _ := ctx.Value(instanceKey{}).(*instance)
	return in
}

// ledgerFaultHooks are the process's ledger fault hooks: each acts on the
// instance whose call it runs in.
var ledgerFaultHooks = sync.OnceFunc(func() {
	txn.SetFaultHooks(&txn.FaultHooks{
		BeforeClaims: func(ctx context.Context) {
			if in := instanceFrom(ctx); in != nil {
				in.pauseAt(ctx, false)
			}
		},
		BeforeRenew: func(ctx context.Context) {
			if in := instanceFrom(ctx); in != nil {
				in.pauseAt(ctx, true)
			}
		},
		Committed: func(ctx context.Context) {
			if in := instanceFrom(ctx); in != nil {
				in.committed()
			}
		},
	})
})

// Polled tells the harness which records a poll returned, before they are
// processed.
func (h *Hooks) Polled(records []*kgo.Record) {
	if h != nil {
		h.inst.polled(records)
	}
}

// BeforeCommit is called once a transaction's output is produced and
// before its acknowledgements are sent and it commits. It injects the
// faults that hit a transaction: it may hold the transaction open
// (-txn-hold) or stall past the records' locks (a slow worker) before it
// returns nil; it may return an ErrAbortable error (a deliberate abort),
// which the loop handles like any abortable error; or it may kill the
// instance, dropping its connections so that nothing is committed,
// aborted or released, and return an error that the loop must return at
// once.
func (h *Hooks) BeforeCommit(ctx context.Context) error {
	if h == nil {
		return nil
	}
	return h.inst.beforeCommit(ctx)
}

// Ended tells the harness how a transaction over records ended: committed
// with outputs output records (err nil), or aborted because of err.
func (h *Hooks) Ended(records []*kgo.Record, outputs int, err error) {
	if h != nil {
		h.inst.ended(records, outputs, err)
	}
}

// The names of the faults, as the reports count them and the logs name
// them.
const (
	faultKill       = "worker_killed_mid_transaction"
	faultZombie     = "zombie_instance"
	faultSlow       = "slow_worker_lock_expired"
	faultAbort      = "deliberate_abort"
	faultCoordMoves = "coordinator_moves"
	// The faults of the claim ledger's race.
	faultKillAfterCommit = "worker_killed_after_commit"
	faultDropSession     = "share_session_dropped"
	faultPauseBefore     = "worker_stopped_past_lock_before_claims"
	faultPauseAfter      = "worker_stopped_past_lock_after_claims"
)

// errKilled ends an instance that a fault killed.
var errKilled = errors.New("killed by fault injection")

// errDeliberateAbort is the cause of a transaction aborted on purpose.
var errDeliberateAbort = errors.New("aborted on purpose by fault injection")

// instance is the harness's view of one running worker instance.
type instance struct {
	pool *workerPool
	slot *slot
	gen  int64
	log  *slog.Logger
	// polledOnce is set once the loop has polled: it is past
	// InitTransactions.
	polledOnce atomic.Bool
	// fault names the fault that killed or superseded the instance (nil:
	// none); the logs of its clients are then expected.
	fault atomic.Pointer[string]

	mu   sync.Mutex
	cons *shareconsumer.Consumer
	prod *producer.Producer
	// pending maps each polled record whose transaction has not ended to
	// whether it was delivered as often as the group's limit allows.
	pending map[*kgo.Record]bool
	txns    int
	// stalled holds the records of a poll that a slow-worker fault
	// stalled: their locks ran out, so their transactions abort, as
	// expected. committing is when BeforeCommit returned.
	stalled    map[*kgo.Record]bool
	committing time.Time
	// expected names the ledger fault that hit the transaction in
	// progress ("": none): its abort is then what the fault causes.
	expected string
	// dropped is when a fault last dropped the connections of the
	// instance's consumer: the records it held then are released, so
	// the transactions that carry them fail for a while.
	dropped time.Time
}

func (in *instance) polled(records []*kgo.Record) {
	in.polledOnce.Store(true)
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, atLimit := range deliveries(in.cons, records, in.pool.stats, in.pool.cfg.DeliveryLimit) {
		in.pending[records[i]] = atLimit
	}
}

func (in *instance) beforeCommit(ctx context.Context) error {
	p := in.pool
	in.mu.Lock()
	in.txns++
	txn := in.txns
	held := len(in.pending)
	prod := in.prod
	in.mu.Unlock()

	// Only an instance that owns its slot takes a fault: a superseded one
	// is about to be fenced, which would hide the fault's effect.
	owner := in.fault.Load() == nil && in.slot.gen.Load() == in.gen
	// The kill is taken only once the pipeline has committed a
	// transaction (injectFaults requests the first one before that).
	if owner && p.stats.committed.Load() > 0 && p.kill.CompareAndSwap(true, false) {
		// The transaction's output reaches the broker first, so that the
		// killed worker leaves an open transaction behind.
		if prod != nil {
			if err := prod.Flush(ctx); err != nil {
				in.log.Info("flush before the kill failed", "err", err)
			}
		}
		p.stats.fault(faultKill)
		in.log.Info("fault "+faultKill+": the worker dies in the middle of a transaction", "records_held", held)
		p.stats.waits.add(fmt.Sprintf("expired locks of killed worker %d", in.slot.index), held, time.Now().Add(p.cfg.LockDuration))
		in.die(faultKill)
		return errKilled
	}
	if hold := p.cfg.TxnHold; hold > 0 && prod != nil {
		if err := prod.Flush(ctx); err != nil {
			in.log.Info("flush failed", "err", err)
		}
		if !sleep(ctx, hold) {
			return ctx.Err()
		}
	}
	if owner && p.drop.CompareAndSwap(true, false) {
		n := 0
		if cons := in.consumer(); cons != nil {
			n = kgoclient.DropConnections(cons.Client())
		}
		p.stats.fault(faultDropSession)
		p.logs.killed() // the brokers log the connections' end
		in.log.Info("fault "+faultDropSession+": the worker's share consumer loses its connections, and its share sessions with them", "records", held, "connections", n)
		in.mu.Lock()
		in.expected, in.dropped = faultDropSession, time.Now()
		in.mu.Unlock()
	}
	if owner && p.slow.CompareAndSwap(true, false) {
		p.stats.fault(faultSlow)
		stall := p.cfg.LockDuration + time.Second
		in.log.Info("fault "+faultSlow+": the worker stalls past its locks before committing", "records", held, "stall", stall)
		w := p.stats.waits.add(fmt.Sprintf("slow worker %d, stalled past its locks", in.slot.index), held, time.Now().Add(stall))
		in.mu.Lock()
		for r := range in.pending {
			in.stalled[r] = true
		}
		in.mu.Unlock()
		in.slot.stalling.Add(1)
		ok := sleep(ctx, stall)
		in.slot.stalling.Add(-1)
		p.stats.waits.done(w)
		if !ok {
			return ctx.Err()
		}
	}
	in.mu.Lock()
	in.committing = time.Now()
	in.mu.Unlock()
	if every := p.cfg.Faults.AbortEvery; every > 0 && txn%every == 0 {
		return errs.Abortable("commit transaction", errDeliberateAbort)
	}
	return nil
}

// ended counts the outcome of a transaction and notes the records it
// leaves archived: those at the delivery limit whose transaction did not
// commit.
func (in *instance) ended(records []*kgo.Record, outputs int, err error) {
	p := in.pool
	in.mu.Lock()
	start := in.committing
	expected := in.expected
	in.expected = ""
	if expected == "" && !in.dropped.IsZero() && time.Since(in.dropped) < 2*p.cfg.LockDuration {
		// Polled before the drop, released by it.
		expected = faultDropSession
	}
	stalled := false
	why := ArchivedByFailure
	if errors.Is(err, errDeliberateAbort) {
		why = ArchivedOnPurpose
	}
	for _, r := range records {
		if atLimit := in.pending[r]; atLimit && err != nil {
			p.stats.noteArchived(string(r.Value), why)
		}
		stalled = stalled || in.stalled[r]
		delete(in.pending, r)
		delete(in.stalled, r)
	}
	in.mu.Unlock()

	if err == nil {
		p.stats.committed.Add(1)
		p.stats.outputs.Add(int64(outputs))
		if !start.IsZero() {
			p.stats.commitLatency(time.Since(start))
		}
		switch expected {
		case faultPauseBefore, faultPauseAfter:
			p.stats.staleCommits.Add(1)
			in.log.Error("fault "+expected+": the worker stopped past its locks committed; the renewal before EndTxn should have refused it", "records", len(records))
		case faultKillAfterCommit:
			// Its consumer died before acknowledging: the records
			// come back, and the ledger settles them.
			p.stats.waits.add(fmt.Sprintf("records of worker %d, killed after its commit", in.slot.index), len(records), time.Now().Add(p.cfg.LockDuration))
			in.die(faultKillAfterCommit)
		}
		return
	}
	p.stats.aborted.Add(1)
	switch {
	case expected != "":
		in.log.Info("fault "+expected+": the transaction aborted, as expected", "records", len(records), "err", err)
		if expected == faultKillAfterCommit {
			in.die(faultKillAfterCommit)
		}
	case errors.Is(err, errDeliberateAbort):
		p.stats.fault(faultAbort)
		in.log.Info("fault "+faultAbort+": transaction aborted on purpose", "records", len(records))
	case stalled:
		in.log.Info("fault "+faultSlow+": the stalled transaction aborted, as expected", "records", len(records), "err", err)
	case in.fault.Load() != nil:
		in.log.Info("fault "+*in.fault.Load()+": the instance's transaction aborted, as expected", "records", len(records), "err", err)
	default:
		in.log.Warn("transaction aborted and no injected fault explains it", "records", len(records), "err", err)
	}
}

// die drops the instance's connections without committing, aborting or
// releasing anything, as a process that dies would. The loop's own Close
// calls then find their clients closed.
func (in *instance) die(fault string) {
	in.fault.Store(&fault)
	in.pool.logs.killed()
	in.mu.Lock()
	cons, prod := in.cons, in.prod
	in.mu.Unlock()
	if cons != nil {
		cons.Client().Close()
	}
	if prod != nil {
		prod.Client().Close()
	}
	// Then their goroutines stop, with nothing more sent: the loop's own
	// Close calls find them closed.
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	if prod != nil {
		prod.Close(dead)
	}
	if cons != nil {
		cons.Close(dead)
	}
}

// finish notes, once the loop returned, the records the instance still
// held that were at the delivery limit: the broker archives them when
// their locks run out. It returns how many records it still held.
func (in *instance) finish() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cons != nil {
		kgoclient.ForgetFaults(in.cons.Client())
	}
	if in.prod != nil {
		kgoclient.ForgetFaults(in.prod.Client())
	}
	held := len(in.pending)
	for r, atLimit := range in.pending {
		if atLimit {
			in.pool.stats.noteArchived(string(r.Value), ArchivedByFailure)
		}
	}
	clear(in.pending)
	clear(in.stalled)
	return held
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// workerPool runs cfg.Workers slots. Each slot runs one worker instance at
// a time, started again after a fault killed it, except that a zombie
// fault starts a second instance of a slot while the first still runs: the
// newer one owns the slot and the older one must be fenced. Any other
// error of an instance stops the run (fail).
type workerPool struct {
	cfg   Config
	loop  WorkerFunc
	stats *runStats
	logs  *faultHandler
	fail  func(error)
	slots []*slot

	// Fault requests, each taken by the next transaction of any instance
	// (a request left on one worker might never fire: the other workers
	// may drain the input before that one runs another transaction).
	kill atomic.Bool
	slow atomic.Bool
	// The ledger's faults (Faults.KillAfterCommit, DropSession,
	// PausePastLock).
	killAfter, drop atomic.Bool
	// pause asks for a pause before the claims ([0]) and after them ([1]).
	pause [2]atomic.Bool

	wg sync.WaitGroup // every instance
}

type slot struct {
	index int
	txnID string
	gen   atomic.Int64 // instance generation that owns the slot
	// instances numbers the slot's instances, restarts included, for the
	// logs.
	instances atomic.Int64

	// stalling counts the slot's instances stalled by a slow-worker
	// fault right now; a zombie fault leaves such a slot alone, so that
	// the two faults' effects stay apart.
	stalling atomic.Int32

	mu      sync.Mutex
	running map[*instance]struct{}
}

// zombieTarget picks a random slot for a zombie fault among those whose
// instances all run past InitTransactions and are not stalled by a
// slow-worker fault, or nil if there is none (the fault waits for its next
// turn). An instance that is still in InitTransactions (retrying it while
// its coordinator is away, say) could finish it after the newer instance
// and fence that one, which is not the fault's point: the newer instance
// would stop with an error nobody expects (a CI run on Kafka did, while a
// node restarted).
func (p *workerPool) zombieTarget() *slot {
	var settled []*slot
	for _, s := range p.slots {
		if s.stalling.Load() == 0 && s.settled() {
			settled = append(settled, s)
		}
	}
	if len(settled) == 0 {
		return nil
	}
	return settled[rand.IntN(len(settled))]
}

// settled reports whether s runs instances and each has polled, and so is
// past InitTransactions.
func (s *slot) settled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for in := range s.running {
		if !in.polledOnce.Load() {
			return false
		}
	}
	return len(s.running) > 0
}

func newWorkerPool(cfg Config, loop WorkerFunc, stats *runStats, logs *faultHandler, fail func(error)) *workerPool {
	p := &workerPool{cfg: cfg, loop: loop, stats: stats, logs: logs, fail: fail}
	for i := 0; i < cfg.Workers; i++ {
		p.slots = append(p.slots, &slot{index: i, txnID: fmt.Sprintf("%s-worker-%d", cfg.Group, i), running: map[*instance]struct{}{}})
	}
	return p
}

// run starts every slot and returns once all instances have stopped, after
// ctx ends.
func (p *workerPool) run(ctx context.Context) {
	for _, s := range p.slots {
		p.start(ctx, s)
	}
	<-ctx.Done()
	p.wg.Wait()
}

// start runs a new instance of s until ctx ends, and runs it again after a
// fault killed it, for as long as it owns the slot. Instances of s that
// run already are superseded: the new one fences them.
func (p *workerPool) start(ctx context.Context, s *slot) {
	// Under s.mu, so that no instance of an older generation starts
	// after this one without being superseded (newInstance).
	s.mu.Lock()
	gen := s.gen.Add(1)
	for old := range s.running {
		// A killed instance stays killed.
		name := faultZombie
		old.fault.CompareAndSwap(nil, &name)
	}
	s.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		bo := retry.WithContext(ctx)
		for ctx.Err() == nil {
			in := p.newInstance(s, gen)
			if in == nil {
				return // superseded while it waited to start again
			}
			err := p.loop(context.WithValue(ctx, instanceKey{}, in), in.worker())
			held := in.finish()
			s.mu.Lock()
			delete(s.running, in)
			s.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			fault := in.fault.Load()
			switch {
			case fault != nil && (*fault == faultKill || *fault == faultKillAfterCommit):
				wait := bo.NextBackOff()
				in.log.Info("fault "+faultKill+": starting the worker again", "backoff", wait)
				if !sleep(ctx, wait) {
					return
				}
			case fault != nil && (err == nil || errors.Is(err, kshare.ErrFatal)):
				in.log.Info("fault "+*fault+": the older instance stopped, fenced by the newer one, as expected", "err", err)
				if held > 0 {
					p.stats.waits.add(fmt.Sprintf("expired locks of the fenced older instance of worker %d", s.index),
						held, time.Now().Add(p.cfg.LockDuration))
				}
				return
			case err == nil:
				p.fail(fmt.Errorf("worker %d stopped before the end of the run without an error", s.index))
				return
			default:
				p.fail(fmt.Errorf("worker %d: %w", s.index, err))
				return
			}
		}
	}()
}

// newInstance returns a new instance of s for generation gen, or nil if a
// newer generation owns s.
func (p *workerPool) newInstance(s *slot, gen int64) *instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen.Load() != gen {
		return nil
	}
	in := &instance{pool: p, slot: s, gen: gen, pending: map[*kgo.Record]bool{}, stalled: map[*kgo.Record]bool{}}
	in.log = slog.New(p.logs.component(&in.fault)).With("worker", s.index, "instance", s.instances.Add(1))
	s.running[in] = struct{}{}
	return in
}

func (in *instance) worker() Worker {
	cfg := in.pool.cfg
	return Worker{
		Index:           in.slot.index,
		Seeds:           cfg.Seeds,
		Group:           cfg.Group,
		Input:           cfg.Input,
		Output:          cfg.Output,
		TransactionalID: in.slot.txnID,
		Ledger:          cfg.Ledger,
		DeadLetter:      cfg.DeadLetterTopic,
		TxnSize:         cfg.TxnSize,
		TxnTimeout:      cfg.TxnTimeout,
		Logger:          in.log,
		Hooks:           &Hooks{inst: in},
	}
}

// idle says why nothing moves when no known wait explains it, as far as
// the instances tell.
func (p *workerPool) idle() string {
	var running, inTxn int
	for _, s := range p.slots {
		s.mu.Lock()
		for in := range s.running {
			running++
			in.mu.Lock()
			if len(in.pending) > 0 {
				inTxn++
			}
			in.mu.Unlock()
		}
		s.mu.Unlock()
	}
	if p.stats.polled.Load() == 0 {
		return fmt.Sprintf("no record delivered yet; %d workers are joining the share group or waiting for an assignment", running)
	}
	return fmt.Sprintf("no injected fault explains it; %d worker instances running, %d of them holding records", running, inTxn)
}

// consumer returns the instance's share consumer (nil before Started).
func (in *instance) consumer() *shareconsumer.Consumer {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cons
}

// owns reports whether the instance may take a fault: it owns its slot
// and no fault has hit it.
func (in *instance) owns() bool {
	return in.fault.Load() == nil && in.slot.gen.Load() == in.gen
}

// pauseAt runs in a ledger transaction (txn.FaultHooks) once its records
// are staged, before their claims are written (afterClaims false), and
// once the claims are durable, before the renewal (afterClaims true). A
// pause fault stops the worker at one of the two, in turn, its
// consumer's writes included (as a stopped process), until its records'
// locks have run out. Before the claims, another member may be handed the
// records and find no claim; after them, it waits for the transaction's
// end. Either way the commit must fail.
func (in *instance) pauseAt(ctx context.Context, afterClaims bool) {
	p := in.pool
	at := 0
	if afterClaims {
		at = 1
	}
	// Taken only once the pipeline has committed a transaction, like the
	// kill: injectFaults requests the first pause before that.
	if !in.owns() || p.stats.committed.Load() == 0 || !p.pause[at].CompareAndSwap(true, false) {
		return
	}
	cons := in.consumer()
	if cons == nil {
		return
	}
	name, where := faultPauseBefore, "before writing its claims"
	if afterClaims {
		name, where = faultPauseAfter, "after writing its claims"
	}
	// A renewal sent just before the pause holds the locks one lock
	// duration from its arrival: a second past that they have run out.
	pause := p.cfg.LockDuration + time.Second
	if !kgoclient.PauseConnections(cons.Client(), pause) {
		// A client made without the fault dialer would go on renewing
		// the locks: the commit would then be right to succeed, and
		// would be counted as stale. Leave the fault to another one.
		p.pause[at].Store(true)
		return
	}
	p.stats.fault(name)
	in.mu.Lock()
	in.expected = name
	held := len(in.pending)
	in.mu.Unlock()
	in.log.Info("fault "+name+": the worker stops "+where+", until its locks have run out", "records", held, "pause", pause)
	w := p.stats.waits.add(fmt.Sprintf("worker %d, stopped past its locks %s", in.slot.index, where), held, time.Now().Add(pause))
	sleep(ctx, pause)
	p.stats.waits.done(w)
}

// committed runs once a ledger commit was answered and before the
// consumer sends its acknowledgements (txn.FaultHooks): a kill fault
// closes the consumer's client there, so that they are never sent; the
// worker dies when its loop hears of the commit (ended).
func (in *instance) committed() {
	p := in.pool
	in.mu.Lock()
	paused := in.expected == faultPauseBefore || in.expected == faultPauseAfter
	in.mu.Unlock()
	if paused {
		return // a stale commit: ended must count it, not take it for this fault
	}
	if !in.owns() || !p.killAfter.CompareAndSwap(true, false) {
		return
	}
	cons := in.consumer()
	if cons == nil {
		return
	}
	p.stats.fault(faultKillAfterCommit)
	name := faultKillAfterCommit
	in.fault.Store(&name) // what its clients log from now on is expected
	in.pool.logs.killed()
	in.mu.Lock()
	in.expected = faultKillAfterCommit
	in.mu.Unlock()
	in.log.Info("fault " + faultKillAfterCommit + ": the worker dies between its commit and its acknowledgements")
	cons.Client().Close()
}
