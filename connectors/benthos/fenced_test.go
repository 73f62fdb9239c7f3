package benthos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
)

// fencedPipeline is the one config both instances of the fencing tests
// run: the same group, the same acknowledger id and the same output id,
// the obvious way to scale a pipeline out. Locks last 30s, so that a
// record the first instance held and the second got before that lock ran
// out was given back, not left to expire; each partition holds at most 100
// records locked at once (the cluster's share.partition.max.record.locks),
// so that what the first instance holds blocks the second.
const fencedPipeline = `
input:
  kshare_share:
    seed_brokers: [ $SEEDS ]
    group: $GROUP
    topics: [ $IN ]
    transactional_id: $INTXN
    auto_offset_reset: earliest
    record_lock_duration: 30s
    max_poll_records: 20
    max_wait: 100ms
    batching:
      count: 20
      period: 50ms
pipeline:
  threads: 4
  processors:
    - test_gate: {}
    - test_observe: {}
    - mapping: |
        root = if content().string().has_prefix("poison:") { deleted() } else { content() }
output:
  kshare_txn:
    seed_brokers: [ $SEEDS ]
    transactional_id: $OUTTXN
    topic: $OUT
    key: ${! @kafka_key }
`

// fencedLockWindow is share.partition.max.record.locks in the fencing
// tests.
const fencedLockWindow = 100

// held is what the first instance's gate saw: the messages it holds,
// and the ledger of the first instance's input.
type held struct {
	mu     sync.Mutex
	atGate int
	ledger *ledger
}

func (h *held) add(l *ledger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.atGate++
	h.ledger = l
}

func (h *held) gate() (int, *ledger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.atGate, h.ledger
}

// heldRecord is a delivery the first instance held when it was fenced:
// its handle, and its lock deadline as its consumer knew it then.
type heldRecord struct {
	h        *pendingAck
	deadline time.Time
}

// holds returns the deliveries the ledger holds (delivered to the
// pipeline and not final), by value, and the consumer's member id.
func (l *ledger) holds() (map[string]heldRecord, string) {
	l.mu.Lock()
	hs := make([]*pendingAck, 0, len(l.live))
	for _, h := range l.live {
		hs = append(hs, h)
	}
	l.mu.Unlock()
	out := make(map[string]heldRecord, len(hs))
	for _, h := range hs {
		if d, ok := l.cons.LockDeadline(h.rec); ok {
			out[string(h.rec.Value)] = heldRecord{h, d}
		}
	}
	return out, l.cons.GroupMetadata().MemberID
}

// seenAt records, for the second instance, when each value reached its
// pipeline and at which delivery.
type seenAt struct {
	mu    sync.Mutex
	first map[string]time.Time
	count map[string]int64
}

func (s *seenAt) saw(value string, delivery int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == nil {
		s.first, s.count = make(map[string]time.Time), make(map[string]int64)
	}
	if _, ok := s.first[value]; !ok {
		s.first[value] = time.Now()
		s.count[value] = delivery
	}
}

func (s *seenAt) at(value string) (time.Time, int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.first[value]
	return t, s.count[value], ok
}

// gateEnv is the environment of the first instance: test_gate holds every
// message until open is closed (recording what it holds in h), and
// test_observe does nothing.
func gateEnv(t *testing.T, open <-chan struct{}, h *held) *service.Environment {
	env := service.NewEnvironment()
	require.NoError(t, env.RegisterBatchProcessor("test_gate", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Resources) (service.BatchProcessor, error) {
			return gate{open: open, h: h}, nil
		}))
	require.NoError(t, env.RegisterProcessor("test_observe", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Resources) (service.Processor, error) {
			return procFunc(func(*service.Message) error { return nil }), nil
		}))
	return env
}

// gate holds each batch until open is closed or the stream stops.
type gate struct {
	open <-chan struct{}
	h    *held
}

func (g gate) ProcessBatch(ctx context.Context, b service.MessageBatch) ([]service.MessageBatch, error) {
	for _, m := range b {
		if h := ackFrom(m.Context()); h != nil {
			g.h.add(h.ledger)
		}
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return []service.MessageBatch{b}, nil
}

func (gate) Close(context.Context) error { return nil }

// observeEnv is the environment of the second instance: test_gate lets
// everything through and test_observe records when each value came.
func observeEnv(t *testing.T, s *seenAt) *service.Environment {
	env := service.NewEnvironment()
	require.NoError(t, env.RegisterProcessor("test_gate", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Resources) (service.Processor, error) {
			return procFunc(func(*service.Message) error { return nil }), nil
		}))
	require.NoError(t, env.RegisterProcessor("test_observe", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Resources) (service.Processor, error) {
			return procFunc(func(m *service.Message) error {
				v, _ := m.AsBytes()
				d, _ := m.MetaGetMut(metaDeliveryCount)
				s.saw(string(v), d.(int64))
				return nil
			}), nil
		}))
	return env
}

// initsOf counts the InitProducerId requests for each transactional id.
type initsOf struct {
	mu sync.Mutex
	n  map[string]int
}

func (i *initsOf) observe(_ int32, req kmsg.Request) {
	r, ok := req.(*kmsg.InitProducerIDRequest)
	if !ok || r.TransactionalID == nil {
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.n == nil {
		i.n = make(map[string]int)
	}
	i.n[*r.TransactionalID]++
}

func (i *initsOf) count(id string) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.n[id]
}

// fencedAll reports whether each of the transactional ids of an output
// with inFlight producers (id, id-1, id-2, ...) was initialized twice: by
// the first instance and then by the second, which fenced the first. An
// id the second instance has not initialized yet still commits for the
// first one.
func (i *initsOf) fencedAll(id string, inFlight int) bool {
	for p := range inFlight {
		pid := id
		if p > 0 {
			pid = fmt.Sprintf("%s-%d", id, p)
		}
		if i.count(pid) < 2 {
			return false
		}
	}
	return true
}

// memberRequests follows the share-group requests of one member, from
// the moment it is set: how many released records or left the group
// until end is set, and how many requests came after.
type memberRequests struct {
	member   atomic.Pointer[string]
	ended    atomic.Bool
	releases atomic.Int64 // RELEASE acknowledgement batches before the end
	left     atomic.Bool  // a heartbeat at epoch -1 before the end
	after    atomic.Int64 // requests after the end
	last     atomic.Pointer[string]
}

func (m *memberRequests) observe(_ int32, req kmsg.Request) {
	want := m.member.Load()
	if want == nil {
		return
	}
	var got, what string
	releases := 0
	countReleases := func(types []int8) {
		for _, t := range types {
			if t == int8(kshare.AckRelease) {
				releases++
			}
		}
	}
	switch r := req.(type) {
	case *kmsg.ShareFetchRequest:
		got, what = derefString(r.MemberID), "ShareFetch"
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				for _, b := range p.AcknowledgementBatches {
					countReleases(b.AcknowledgeTypes)
				}
			}
		}
	case *kmsg.ShareAcknowledgeRequest:
		got, what = derefString(r.MemberID), "ShareAcknowledge"
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				for _, b := range p.AcknowledgementBatches {
					countReleases(b.AcknowledgeTypes)
				}
			}
		}
	case *kmsg.ShareGroupHeartbeatRequest:
		got, what = r.MemberID, fmt.Sprintf("ShareGroupHeartbeat epoch %d", r.MemberEpoch)
		if got == *want && r.MemberEpoch == -1 && !m.ended.Load() {
			m.left.Store(true)
		}
	default:
		return
	}
	if got != *want {
		return
	}
	if m.ended.Load() {
		m.after.Add(1)
		m.last.Store(&what)
		return
	}
	m.releases.Add(int64(releases))
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestFencedInstanceGivesWay runs two instances of one pipeline config
// (one acknowledger id, one output id) on one group, the way a user
// scales a pipeline out. The first fills the lock window of the input's
// partition and holds it; the second starts, and its InitTransactions
// fence the first one's output producers and acknowledger. When the first
// instance next calls on a fenced client, it must give back everything it
// holds at once (not when its 30s locks run out: it renews them, and
// would hold them for ever), stop renewing, say once that it can commit
// nothing more, and end its input, so that its stream stops by itself.
// The second instance then processes the whole input, exactly once,
// before the first instance's locks would have run out: every record the
// first one held reached the second one (at its second delivery) before
// that lock's deadline, so it was given back, not left to expire.
//
// The cases: the first instance's messages wait in a processor and then
// meet the fenced output producer (max_in_flight 1, and 2: every producer
// must fail before the output stops); they wait at the output's commit,
// with their acknowledgements staged at the leader (TX_PENDING), which the
// second instance's InitTransactions aborts; and only the acknowledger is
// shared (each instance has its own output id): the first instance's
// dropped messages meet the fenced acknowledger.
func TestFencedInstanceGivesWay(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxInFlight int
		atCommit    bool // hold the first instance's first commit, not its processors
		ownOutputs  bool // each instance its own output id: only the acknowledger is shared
		fenced      string
	}{
		{name: "output fenced", maxInFlight: 1, fenced: "every kshare_txn output that writes its messages has stopped"},
		{name: "output with two producers fenced", maxInFlight: 2, fenced: "every kshare_txn output that writes its messages has stopped"},
		{name: "fenced at commit", maxInFlight: 1, atCommit: true, fenced: "every kshare_txn output that writes its messages has stopped"},
		{name: "acknowledger fenced", maxInFlight: 1, ownOutputs: true, fenced: "its acknowledger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testFenced(t, tc.maxInFlight, tc.atCommit, tc.ownOutputs, tc.fenced)
		})
	}
}

func testFenced(t *testing.T, maxInFlight int, atCommit, ownOutputs bool, fencedBy string) {
	const n, every = 600, 10
	c := newCluster(t, broker.GroupConfigDefault("share.partition.max.record.locks", fmt.Sprint(fencedLockWindow)))
	r := c.newRun(t, "fenced", 1, n, every)
	is := trackInstances(t)
	inits := &initsOf{}
	t.Cleanup(c.ObserveRequests(inits.observe))
	fromZombie := &memberRequests{}
	t.Cleanup(c.ObserveRequests(fromZombie.observe))
	inTxn, outTxn := r.inputTxn, r.outTxn
	yaml := strings.Replace(r.yaml(fencedPipeline), "    key: ${! @kafka_key }\n", fmt.Sprintf("    key: ${! @kafka_key }\n    max_in_flight: %d\n", maxInFlight), 1)
	zombieYAML, healthyYAML := yaml, yaml
	if ownOutputs {
		healthyYAML = strings.Replace(yaml, "transactional_id: "+outTxn+"\n", "transactional_id: "+outTxn+"-2\n", 1)
		require.NotEqual(t, yaml, healthyYAML)
	}
	began := time.Now()

	// The first instance fills the lock window and holds it: in its
	// processors, or at its first commit.
	open := make(chan struct{})
	var opened sync.Once
	openGate := func() { opened.Do(func() { close(open) }) }
	t.Cleanup(openGate)
	atGate := func() bool { return true }
	// At commit, what the first instance holds when it is fenced is read
	// in the hook that holds its EndTxn, once the second instance has
	// initialized and before the EndTxn goes on: its answer, PRODUCER_FENCED,
	// gives the records back at once, and a read after it finds none.
	h := &held{}
	var heldAtCommit map[string]heldRecord
	var memberAtCommit string
	snapped := make(chan struct{})
	if atCommit {
		openGate()
		var commits atomic.Int64
		holding := make(chan struct{})
		atGate = func() bool {
			select {
			case <-holding:
				return true
			default:
				return false
			}
		}
		t.Cleanup(c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
			if end, ok := req.(*kmsg.EndTxnRequest); ok && end.Commit && end.TransactionalID == outTxn && commits.Add(1) == 1 {
				close(holding)
				<-open2(t, inits, inTxn, outTxn)
				_, zl := h.gate()
				heldAtCommit, memberAtCommit = zl.holds()
				close(snapped)
			}
			return broker.FaultAction{}
		}))
	}
	zombieLogs := &syncBuffer{}
	zombie := startLogged(t, gateEnv(t, open, h), zombieYAML, zombieLogs)
	waitFor(t, 30*time.Second, "the first instance holds the lock window", func() bool {
		got, l := h.gate()
		return atGate() && got >= 20 && l.size() >= fencedLockWindow
	})

	// The second instance fences the first one's ids.
	seen := &seenAt{}
	healthyLogs := &syncBuffer{}
	healthy := startLogged(t, observeEnv(t, seen), healthyYAML, healthyLogs)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("healthy logs:\n%s", healthyLogs.String())
		}
	})
	waitFor(t, 30*time.Second, "the second instance initialized its transactional ids", func() bool {
		return inits.count(inTxn) >= 2 && (ownOutputs || inits.fencedAll(outTxn, maxInFlight))
	})
	_, zl := h.gate()
	var heldAtFence map[string]heldRecord
	var member string
	if atCommit {
		select {
		case <-snapped:
		case <-time.After(time.Minute):
			t.Fatal("the first instance's EndTxn was not held until the second instance initialized")
		}
		heldAtFence, member = heldAtCommit, memberAtCommit
	} else {
		heldAtFence, member = zl.holds()
	}
	require.NotEmpty(t, member)
	require.NotEmpty(t, heldAtFence, "the first instance holds records when it is fenced")
	fromZombie.member.Store(&member)
	earliest := time.Time{}
	for _, hr := range heldAtFence {
		if earliest.IsZero() || hr.deadline.Before(earliest) {
			earliest = hr.deadline
		}
	}
	t.Logf("the first instance holds %d records when fenced; the earliest of their locks runs out in %v",
		len(heldAtFence), time.Until(earliest).Round(time.Millisecond))
	fenced := time.Now()

	// Its messages go on, and meet a fenced client.
	openGate()
	select {
	case err := <-zombie.done:
		zombie.stream = nil // it ended by itself: nothing to stop
		require.NoError(t, err, "the fenced instance's stream ended cleanly")
	case <-time.After(time.Until(earliest)):
		t.Fatalf("the fenced instance's stream was still running when the first lock it held ran out, %v after it was fenced (the group has acknowledged %d of %d inputs meanwhile); its logs:\n%s",
			time.Since(fenced).Round(time.Millisecond), r.input.CountAcknowledged(r.startOffsets(t)), n, nonDebug(zombieLogs.String()))
	}
	fromZombie.ended.Store(true)
	t.Logf("the fenced instance's stream ended %v after it was fenced", time.Since(fenced).Round(time.Millisecond))

	// The second instance finishes the input before the first lock of
	// what the first instance held would have run out.
	waitAllAcknowledged(t, r, earliest)
	healthy.stop(t, 30*time.Second)
	res := r.verify(t, nil, time.Since(began))
	requireExactlyOnce(t, res)
	require.Equal(t, n/every, res.Rejected)

	// Everything the first instance held and did not commit (its own
	// output may, when only the acknowledger is fenced) reached the
	// second one, at its second delivery, before the first delivery's
	// lock ran out.
	committedByZombie, byDelivery := 0, map[int64]int{}
	for v, hr := range heldAtFence {
		at, delivery, ok := seen.at(v)
		// With two output producers a batch can fail on the first
		// fenced one while the other still runs: it is nacked, and the
		// acker gives its records back (RELEASE, sent outside any
		// transaction, so even a fenced acker can): released, not
		// committed.
		if st := zl.state(hr.h); st == committed {
			require.True(t, ownOutputs, "%s: committed by the fenced instance, whose output was fenced", v)
			require.False(t, ok, "%s: committed by the fenced instance, and delivered to the other one", v)
			committedByZombie++
			continue
		}
		require.True(t, ok, "%s, held by the fenced instance, reached the other one", v)
		require.True(t, at.Before(hr.deadline), "%s reached the other instance %v after the fenced one's lock ran out: it was not given back", v, at.Sub(hr.deadline))
		// 2, or 3 when the fenced instance's consumer fetched the
		// record again between the release of a failed transaction
		// and its Close.
		require.GreaterOrEqual(t, delivery, int64(2), "%s: delivered to the fenced instance first", v)
		byDelivery[delivery]++
	}
	t.Logf("of the %d records the fenced instance held, it committed %d and gave back the others; the other instance got them at deliveries %v", len(heldAtFence), committedByZombie, byDelivery)

	// The first instance gave its records back and left the group, said
	// once why, and sent nothing more as a member once its stream ended.
	logs := zombieLogs.String()
	require.Equal(t, 1, strings.Count(logs, "can commit nothing more"), "the fenced input says so once:\n%s", nonDebug(logs))
	require.Contains(t, logs, "the input can commit nothing more, and ends; the records it holds go back to the group now: "+fencedBy)
	require.Contains(t, logs, "was fenced by a newer instance with the same transactional_id")
	require.NotContains(t, logs, "Failed to read message", "the fenced input does not report errors in a loop")
	if maxInFlight > 1 && !ownOutputs {
		require.Contains(t, logs, fmt.Sprintf("%d of %d producers left", maxInFlight-1, maxInFlight), "each producer failed once before the output stopped")
	}
	require.True(t, fromZombie.left.Load(), "the fenced instance left the group")
	require.Positive(t, fromZombie.releases.Load(), "the fenced instance released records")
	require.Zero(t, fromZombie.after.Load(), "requests of the fenced member after its stream ended (the last: %v)", fromZombie.last.Load())
	is.mu.Lock()
	inputs := append([]*shareInput(nil), is.inputs...)
	is.mu.Unlock()
	require.Len(t, inputs, 2)
	cause := inputs[0].endCause()
	require.ErrorIs(t, cause, kshare.ErrFatal, "the fenced input ended because it can commit nothing more")
	require.True(t, isFenced(cause), "the cause says it was fenced: %v", cause)
	require.NoError(t, inputs[1].endCause(), "the healthy input did not end by itself")
}

// open2 returns a channel that closes once the second instance has
// initialized its transactional ids (inits counts two of each).
func open2(t *testing.T, inits *initsOf, inTxn, outTxn string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) && (inits.count(inTxn) < 2 || inits.count(outTxn) < 2) {
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return done
}

// waitAllAcknowledged waits until the group has acknowledged every input
// record, logging the progress each second, or fails the test at
// deadline.
func waitAllAcknowledged(t *testing.T, r *run, deadline time.Time) {
	t.Helper()
	began, logged := time.Now(), time.Now()
	for {
		start := r.startOffsets(t)
		got := r.input.CountAcknowledged(start)
		if got == r.input.N {
			t.Logf("every input acknowledged after %v", time.Since(began).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group has acknowledged %d of %d inputs after %v (start offsets %v)", got, r.input.N, time.Since(began).Round(time.Millisecond), start)
		}
		if time.Since(logged) >= time.Second {
			logged = time.Now()
			t.Logf("%v: %d of %d inputs acknowledged", time.Since(began).Round(time.Second), got, r.input.N)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitFor polls cond until it holds, or fails the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nonDebug returns the lines of logs above debug level.
func nonDebug(logs string) string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if l != "" && !strings.Contains(l, "level=DEBUG") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
