package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/wire"
)

// The lifecycle fault model. A script is what an application does with
// one transaction (InitTransactions, BeginTransaction, produce, send
// offsets, send share acknowledgements, commit or abort, Close), run by a
// transactional share consumer and a producer on a shared bundled cluster.
// A fault-free run of each script finds the round trips each call makes;
// then every (call, round trip) gets each fault in turn, in a fresh run:
//
//   - cancel: the call's context ends while the request is at the broker,
//     which applies it; the answer is lost;
//   - close: Close from another goroutine, with time to spare;
//   - close-now: Close from another goroutine, its context already ended;
//   - drop-request: the connection drops before the broker sees the
//     request;
//   - drop-answer: the connection drops after the broker applied it;
//   - fence: a newer producer with the same transactional id initializes.
//
// Every call also gets the faults that need no round trip at its start (a
// context already ended, Close begun, a newer producer). After the fault
// the application goes on as documented (abort after an abortable or
// in-doubt error, stop after a fatal one or Close), closes everything, and
// the run checks the invariants of issue 11:
//
//	(a) the transaction committed all of its records, offsets and
//	    acknowledgements, or none;
//	(b) what the SDK reported (returned errors, metrics, tracker
//	    resolution, record promises) matches what the broker did;
//	(c) every staged acknowledgement was resolved exactly once, and the
//	    consumer holds none of its records any more (so renews no lock);
//	(d) no goroutine outlives Close;
//	(e) Close returned an error when it left a transaction open, and
//	    returned at all (it may not block past its context), and every
//	    call after Close failed with ErrClosed at once.
//
// Metadata and ApiVersions requests are not targeted: kgo answers them from
// its caches or sends its own on every new connection, so whether a call
// makes one is not deterministic; they change nothing at the broker.

// fmFault is one fault of the model.
type fmFault int

const (
	fmCancel fmFault = iota
	fmClose
	fmCloseNow
	fmDropRequest
	fmDropAnswer
	fmFence
	fmFaults // count
)

func (f fmFault) String() string {
	return [...]string{"cancel", "close", "close-now", "drop-request", "drop-answer", "fence"}[f]
}

// atCallStart reports whether the fault can also land at the start of a
// call, before any round trip.
func (f fmFault) atCallStart() bool { return f != fmDropRequest && f != fmDropAnswer }

// fmTargetKeys are the round trips the model targets.
var fmTargetKeys = map[int16]bool{
	kmsg.FindCoordinator.Int16():    true,
	kmsg.InitProducerID.Int16():     true,
	kmsg.Produce.Int16():            true,
	kmsg.TxnOffsetCommit.Int16():    true,
	kmsg.AddPartitionsToTxn.Int16(): true,
	kmsg.AddOffsetsToTxn.Int16():    true,
	kmsg.EndTxn.Int16():             true,
	wire.TxnShareAcknowledgeKey:     true,
}

// fmScript is one application's transaction.
type fmScript struct {
	name string
	// lazy producers linger for an hour: the records travel only with the
	// commit's flush (or are failed by the abort's drain).
	lazy  bool
	steps []string
}

var fmScripts = []fmScript{
	{name: "commit", steps: []string{"Init", "Begin", "Produce", "SendOffsets", "SendShareAcks", "Commit", "Close"}},
	{name: "commit-at-flush", lazy: true, steps: []string{"Init", "Begin", "Produce", "SendShareAcks", "Commit", "Close"}},
	{name: "abort", steps: []string{"Init", "Begin", "Produce", "SendShareAcks", "Abort", "Close"}},
	{name: "recover", steps: []string{"Init", "Begin", "SendShareAcks", "ProduceTooLarge", "Recover", "Close"}},
	{name: "close-open", steps: []string{"Init", "Begin", "Produce", "SendShareAcks", "Close"}},
}

// fmTarget is where a fault lands: the step (index into the script's
// steps) and the request key of the round trip, or -1 for the call's
// start.
type fmTarget struct {
	step int
	key  int16
}

// fmCase is one run of the model.
type fmCase struct {
	script fmScript
	target fmTarget
	fault  fmFault
	none   bool // the fault-free discovery run
}

func (c fmCase) String() string {
	if c.none {
		return c.script.name + "/no-fault"
	}
	rt := "call-start"
	if c.target.key >= 0 {
		rt = wire.NameForKey(c.target.key)
	}
	return fmt.Sprintf("%s/%s/%s/%s", c.script.name, c.script.steps[c.target.step], rt, c.fault)
}

// fmRecords is the number of input and output records of a transaction.
const fmRecords = 4

// fmCallTimeout bounds every call of a run; the transaction timeout is
// shorter, so that no call's retries need all of it.
const (
	fmCallTimeout = 20 * time.Second
	fmTxnTimeout  = 10 * time.Second
)

// TestLifecycleFaultModel runs the model. With -short every (call, round
// trip) still gets faults, but only two of the six, rotating so that every
// fault lands at every kind of call somewhere; the full run gives each one
// all six.
//
// It runs twice: with brokers that serve TxnShareAcknowledge v1 (the
// leader adds the share state partition to the transaction, so no
// AddShareAcksToTxn is sent) and with brokers that serve only v0, whose
// commits send AddShareAcksToTxn first.
func TestLifecycleFaultModel(t *testing.T) {
	t.Run("txn-share-ack-v1", func(t *testing.T) {
		runFaultModel(t, newCluster(t, broker.Nodes(3)))
	})
	t.Run("txn-share-ack-v0", func(t *testing.T) {
		runFaultModel(t, newCluster(t, broker.Nodes(3), broker.APIVersionCap(wire.TxnShareAcknowledgeKey, 0)))
	})
}

func runFaultModel(t *testing.T, c *broker.Cluster) {
	env := &fmEnv{c: c}
	env.install(t)

	var cases []fmCase
	for _, s := range fmScripts {
		var trips map[int][]int16
		t.Run(s.name+"/no-fault", func(t *testing.T) {
			trips = env.run(t, fmCase{script: s, none: true}).trips
		})
		require.NotEmpty(t, trips, "script %s made no targeted round trip", s.name)
		for step, name := range s.steps {
			var keys []string
			for _, k := range trips[step] {
				keys = append(keys, wire.NameForKey(k))
			}
			t.Logf("%s: %s makes %v", s.name, name, keys)
		}
		cases = append(cases, fmPlan(s, trips, testing.Short())...)
	}
	var fired atomic.Int64
	for i, fc := range cases {
		t.Run(fmt.Sprintf("%03d/%s", i, fc), func(t *testing.T) {
			if env.run(t, fc).fired {
				fired.Add(1)
			} else {
				t.Errorf("the fault never landed")
			}
		})
	}
	t.Logf("fault model: %d (call, round trip, fault) cases, %d with the fault landing, plus %d fault-free runs",
		len(cases), fired.Load(), len(fmScripts))
}

// fmPlan lists the cases of script s whose calls made the round trips
// trips (per step, the keys seen in the fault-free run).
func fmPlan(s fmScript, trips map[int][]int16, short bool) []fmCase {
	var targets []fmTarget
	for step := range s.steps {
		targets = append(targets, fmTarget{step: step, key: -1})
		for _, k := range trips[step] {
			targets = append(targets, fmTarget{step: step, key: k})
		}
	}
	var out []fmCase
	for i, tg := range targets {
		var faults []fmFault
		for f := range fmFaults {
			if tg.key < 0 && !f.atCallStart() {
				continue
			}
			if tg.key < 0 && f == fmCancel && s.steps[tg.step] == "Begin" {
				continue // Begin takes no context
			}
			faults = append(faults, f)
		}
		if short {
			// Two faults per target, rotating across targets.
			a, b := faults[i%len(faults)], faults[(i+len(faults)/2)%len(faults)]
			faults = []fmFault{a}
			if b != a {
				faults = append(faults, b)
			}
		}
		for _, f := range faults {
			out = append(out, fmCase{script: s, target: tg, fault: f})
		}
	}
	return out
}

// fmEnv is the shared cluster and the fault hook that routes every
// request to the run whose producer sent it.
type fmEnv struct {
	c    *broker.Cluster
	next atomic.Int64
	runs sync.Map // producer client id -> *fmRun
}

func (e *fmEnv) install(t *testing.T) {
	stop := e.c.InjectFaults(func(_ int32, client string, req kmsg.Request) broker.FaultAction {
		if r, ok := e.runs.Load(client); ok {
			return r.(*fmRun).onRequest(req)
		}
		return broker.FaultAction{}
	})
	t.Cleanup(stop)
}

// fmResult is what a run tells the model.
type fmResult struct {
	fired bool
	trips map[int][]int16 // per step, the targeted keys its call sent
}

// fmCall is one SDK call of a run and its answer.
type fmCall struct {
	name string
	err  error
}

// fmRun is one run of a script.
type fmRun struct {
	t       *testing.T
	fc      fmCase
	c       *broker.Cluster
	ctx     context.Context
	id      string
	in, out string
	group   string // share group
	ogroup  string // consumer group whose offsets the transaction commits
	txnID   string
	p       *Producer
	cons    *shareconsumer.Consumer
	inputs  []*kgo.Record
	acks    *acktrack.Set
	tracker *fmTracker

	step     atomic.Int32 // the step running, or -1
	fired    atomic.Bool
	closed   atomic.Bool  // every Close has returned
	late     atomic.Int32 // requests the producer's client wrote after Close returned
	promised sync.WaitGroup

	mu          sync.Mutex
	cancelStep  context.CancelFunc
	trips       map[int][]int16
	calls       []fmCall
	promiseErrs []error
	began       bool
	offsetsSent bool
	closeCh     chan error // the fault's Close
	fencers     []*Producer
}

// run executes one case and checks the invariants.
func (e *fmEnv) run(t *testing.T, fc fmCase) fmResult {
	// The cluster's goroutines are its own business (the broker's tests
	// check them); a connection's ends when the broker has answered its
	// last request, which a share fetch's long poll delays.
	ignore := []goleak.Option{goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("github.com/kshare-go/kshare/broker.(*Cluster).serve")}
	t.Cleanup(func() { // runs last: every client of the run is closed by then
		err := goleak.Find(ignore...)
		for deadline := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			err = goleak.Find(ignore...)
		}
		if err != nil {
			t.Errorf("(d) goroutines outlived the run: %v", err)
		}
	})
	id := fmt.Sprint(e.next.Add(1))
	r := &fmRun{
		t: t, fc: fc, c: e.c, ctx: testCtx(t), id: id,
		in: "in-" + id, out: "out-" + id, group: "g-" + id, ogroup: "og-" + id, txnID: "fm-" + id,
		trips: make(map[int][]int16),
	}
	r.step.Store(-1)
	r.setUp()
	e.runs.Store("p-"+id, r)
	defer e.runs.Delete("p-" + id)
	r.exec()
	r.check()
	return fmResult{fired: r.fired.Load(), trips: r.trips}
}

// setUp creates the run's topics and input, a transactional share
// consumer holding every input record, and the producer.
func (r *fmRun) setUp() {
	t := r.t
	admin := newClient(t, r.c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	testkit.CreateTopic(r.ctx, t, admin, r.in, 1)
	testkit.CreateTopic(r.ctx, t, admin, r.out, 1)
	testkit.SetGroupConfigs(r.ctx, t, admin, r.group, "share.auto.offset.reset", "earliest")
	values := make([]string, fmRecords)
	for i := range values {
		values[i] = fmt.Sprintf("in-%s-%d", r.id, i)
	}
	testkit.ProduceRoundRobin(r.ctx, t, admin, r.in, 1, values...)

	cons, err := shareconsumer.New(
		shareconsumer.SeedBrokers(r.c.Bootstrap()...),
		shareconsumer.Group(r.group),
		shareconsumer.Topics(r.in),
		shareconsumer.Mode(shareconsumer.Transactional),
		shareconsumer.MaxWait(100*time.Millisecond),
		shareconsumer.KgoOpts(kgo.ClientID("c-"+r.id)),
	)
	require.NoError(t, err)
	r.cons = cons
	t.Cleanup(func() { _ = cons.Close(context.Background()) }) // when a check failed midway
	testkit.PollValues(r.ctx, t, cons, fmRecords, func(rec *kgo.Record) { r.inputs = append(r.inputs, rec) })
	acks := (*acktrack.Set)(cons.Acks(r.inputs, kshare.AckAccept))
	r.tracker = &fmTracker{inner: acks.Tracker()}
	r.acks = acks.Retyped(r.tracker, func(t int8) int8 { return t })

	linger := time.Duration(0)
	if r.fc.script.lazy {
		linger = time.Hour
	}
	r.p, err = New(SeedBrokers(r.c.Bootstrap()...), TransactionalID(r.txnID), Linger(linger),
		BatchMaxBytes(1024), TransactionTimeout(fmTxnTimeout),
		KgoOpts(kgo.ClientID("p-"+r.id), kgo.WithHooks(fmLateWrites{r})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.p.Close(context.Background()) })
}

// exec runs the script's steps the way a correct application does.
func (r *fmRun) exec() {
	for i, name := range r.fc.script.steps {
		err := r.runStep(i, name)
		if name == "Close" {
			return
		}
		if err == nil {
			continue
		}
		if name == "ProduceTooLarge" && errors.Is(err, kshare.ErrAbortable) && !r.p.closing.Load() {
			continue // the failure the script wants; Recover follows
		}
		r.recover(name, err)
		return
	}
}

// runStep runs step i, after the fault if it lands at the call's start.
func (r *fmRun) runStep(i int, name string) error {
	ctx, cancel := context.WithTimeout(r.ctx, fmCallTimeout)
	defer cancel()
	r.mu.Lock()
	r.cancelStep = cancel
	r.mu.Unlock()
	if !r.fc.none && r.fc.target.step == i && r.fc.target.key < 0 && r.fired.CompareAndSwap(false, true) {
		if r.fc.fault == fmCancel {
			cancel()
		} else {
			r.inject()
		}
	}
	r.step.Store(int32(i))
	err := r.call(ctx, name)
	r.step.Store(-1)
	r.record(name, err)
	return err
}

// call makes the SDK call of one step.
func (r *fmRun) call(ctx context.Context, name string) error {
	switch name {
	case "Init", "Recover":
		return r.p.InitTransactions(ctx)
	case "Begin":
		err := r.p.BeginTransaction()
		if err == nil {
			r.mu.Lock()
			r.began = true
			r.mu.Unlock()
		}
		return err
	case "Produce":
		if !r.fc.script.lazy {
			return r.p.ProduceSync(ctx, r.outputs()...).FirstErr()
		}
		for _, rec := range r.outputs() {
			r.promised.Add(1)
			r.p.Produce(ctx, rec, func(_ *kgo.Record, err error) {
				if err != nil {
					r.mu.Lock()
					r.promiseErrs = append(r.promiseErrs, err)
					r.mu.Unlock()
				}
				r.promised.Done()
			})
		}
		return nil
	case "ProduceTooLarge":
		// Two records are written first, so that the transaction has
		// reached the brokers when the third fails.
		if err := r.p.ProduceSync(ctx, r.outputs()[:2]...).FirstErr(); err != nil {
			return err
		}
		return r.p.ProduceSync(ctx, &kgo.Record{Topic: r.out, Value: make([]byte, 2048)}).FirstErr()
	case "SendOffsets":
		r.mu.Lock()
		r.offsetsSent = true
		r.mu.Unlock()
		return r.p.SendOffsetsToTransaction(ctx, map[string]map[int32]kgo.EpochOffset{r.in: {0: {Epoch: -1, Offset: fmRecords}}},
			GroupMetadata{GroupID: r.ogroup, Generation: -1})
	case "SendShareAcks":
		return r.p.SendShareAcksToTransaction(ctx, ka(r.acks), r.cons.GroupMetadata())
	case "Commit":
		return r.p.CommitTransaction(ctx)
	case "Abort":
		return r.p.AbortTransaction(ctx)
	case "Close":
		return r.p.Close(ctx)
	}
	panic("unknown step " + name)
}

func (r *fmRun) outputs() []*kgo.Record {
	out := make([]*kgo.Record, fmRecords)
	for i := range out {
		out[i] = &kgo.Record{Topic: r.out, Value: fmt.Appendf(nil, "out-%s-%d", r.id, i)}
	}
	return out
}

// recover is what the application does after step name failed with err:
// stop after a fatal error or once the producer is closed, try
// InitTransactions once more after a failed InitTransactions, and
// otherwise abort (learning an in-doubt outcome), once more if the abort
// fails.
func (r *fmRun) recover(name string, err error) {
	if errors.Is(err, kshare.ErrFatal) || errors.Is(err, kshare.ErrClosed) || errors.Is(err, kshare.ErrUsage) || errors.Is(err, kshare.ErrCommitted) {
		return
	}
	for range 2 {
		ctx, cancel := context.WithTimeout(r.ctx, fmCallTimeout)
		var err error
		if name == "Init" || name == "Recover" {
			err = r.p.InitTransactions(ctx)
			r.record(name+" again", err)
		} else {
			err = r.p.AbortTransaction(ctx)
			r.record("Abort after "+name, err)
		}
		cancel()
		if err == nil || errors.Is(err, kshare.ErrFatal) || errors.Is(err, kshare.ErrClosed) || errors.Is(err, kshare.ErrUsage) || errors.Is(err, kshare.ErrCommitted) {
			return
		}
	}
}

func (r *fmRun) record(name string, err error) {
	r.mu.Lock()
	r.calls = append(r.calls, fmCall{name, err})
	r.mu.Unlock()
}

// fmLateWrites counts the requests the producer's client writes after
// Close returned. It is counted where the client writes, not where the
// broker reads: a request written just before Close returned (its
// caller's ctx ended while kgo wrote it) may be read by the broker after.
type fmLateWrites struct{ r *fmRun }

func (h fmLateWrites) OnBrokerWrite(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err == nil && h.r.closed.Load() {
		h.r.late.Add(1)
	}
}

// onRequest is the fault hook for the run's producer.
func (r *fmRun) onRequest(req kmsg.Request) broker.FaultAction {
	if r.closed.Load() {
		return broker.FaultAction{}
	}
	step, key := int(r.step.Load()), req.Key()
	if step < 0 || !fmTargetKeys[key] {
		return broker.FaultAction{}
	}
	r.mu.Lock()
	if !containsKey(r.trips[step], key) {
		r.trips[step] = append(r.trips[step], key)
	}
	r.mu.Unlock()
	if r.fc.none || r.fc.target.step != step || r.fc.target.key != key || !r.fired.CompareAndSwap(false, true) {
		return broker.FaultAction{}
	}
	switch r.fc.fault {
	case fmCancel:
		r.mu.Lock()
		r.cancelStep()
		r.mu.Unlock()
		return broker.FaultAction{Fault: broker.DropAnswer}
	case fmDropRequest:
		return broker.FaultAction{Fault: broker.DropRequest}
	case fmDropAnswer:
		return broker.FaultAction{Fault: broker.DropAnswer}
	}
	r.inject()
	return broker.FaultAction{}
}

func containsKey(keys []int16, k int16) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// inject applies a fault that acts on the application rather than the
// connection: Close from another goroutine (returning once it has begun),
// or a newer producer with the same transactional id.
func (r *fmRun) inject() {
	switch r.fc.fault {
	case fmClose, fmCloseNow:
		ctx := r.ctx
		if r.fc.fault == fmCloseNow {
			dead, cancel := context.WithCancel(r.ctx)
			cancel()
			ctx = dead
		}
		ch := make(chan error, 1)
		r.mu.Lock()
		r.closeCh = ch
		r.mu.Unlock()
		go func() { ch <- r.p.Close(ctx) }()
		for !r.p.closing.Load() {
			time.Sleep(time.Millisecond)
		}
	case fmFence:
		p, err := New(SeedBrokers(r.c.Bootstrap()...), TransactionalID(r.txnID), clientID("fencer-"+r.id))
		if err != nil {
			r.t.Errorf("fencer: %v", err)
			return
		}
		r.mu.Lock()
		r.fencers = append(r.fencers, p)
		r.mu.Unlock()
		if err := p.InitTransactions(r.ctx); err != nil {
			r.t.Errorf("fencer: %v", err)
		}
	}
}

// fmTracker counts what the producer tells the consumer.
type fmTracker struct {
	inner    acktrack.Tracker
	mu       sync.Mutex
	staged   int
	resolved []bool
}

func (f *fmTracker) Stage(acks *acktrack.Set, st acktrack.Staging) error {
	err := f.inner.Stage(acks, st)
	if err == nil {
		f.mu.Lock()
		f.staged++
		f.mu.Unlock()
	}
	return err
}

func (f *fmTracker) Resolve(acks *acktrack.Set, committed bool) {
	f.inner.Resolve(acks, committed)
	f.mu.Lock()
	f.resolved = append(f.resolved, committed)
	f.mu.Unlock()
}

func (f *fmTracker) counts() (int, []bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.staged, append([]bool(nil), f.resolved...)
}
