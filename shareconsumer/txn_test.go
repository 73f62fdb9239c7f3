package shareconsumer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/wire"
)

// newProducer returns an initialized transactional producer that the test
// closes.
func (e *env) producer(txnID string, opts ...producer.Opt) *producer.Producer {
	e.t.Helper()
	p, err := producer.New(append([]producer.Opt{
		producer.SeedBrokers(e.c.Bootstrap()...),
		producer.TransactionalID(txnID),
		producer.Linger(0),
	}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { p.Close(context.Background()) })
	require.NoError(e.t, p.InitTransactions(e.ctx))
	return p
}

// readCommitted reads topic from the start with read_committed isolation
// until want distinct values arrived, and returns how often each came.
func (e *env) readCommitted(topic string, want int) map[string]int {
	e.t.Helper()
	cl := e.client(
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	got := make(map[string]int)
	for len(got) < want {
		fs := cl.PollFetches(e.ctx)
		if e.ctx.Err() != nil {
			e.t.Fatalf("read %d of %d committed values of %s", len(got), want, topic)
		}
		require.NoError(e.t, fs.Err0())
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)]++ })
	}
	return got
}

// process runs one consume-transform-produce transaction over recs: an
// output "out-<value>" per input, and the inputs' acceptance.
func process(ctx context.Context, t *testing.T, p *producer.Producer, c *shareconsumer.Consumer, recs []*kgo.Record) error {
	t.Helper()
	if err := stageCopies(ctx, t, p, c, recs); err != nil {
		return err
	}
	return p.CommitTransaction(ctx)
}

// stageCopies begins a transaction, produces a copy of every record to
// "out" in it and sends the records' acceptance to it: process without
// the commit.
func stageCopies(ctx context.Context, t *testing.T, p *producer.Producer, c *shareconsumer.Consumer, recs []*kgo.Record) error {
	t.Helper()
	require.NoError(t, p.BeginTransaction())
	for _, r := range recs {
		p.Produce(ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + string(r.Value))}, nil)
	}
	return p.SendShareAcksToTransaction(ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata())
}

func txnEnv(t *testing.T, inputs int, opts ...broker.Opt) *env {
	e := newEnv(t, append([]broker.Opt{broker.Nodes(3)}, opts...)...)
	e.createTopic("in", 3)
	e.createTopic("out", 1)
	e.groupConfig("g")
	e.produce("in", 3, values("v", inputs)...)
	return e
}

// Consume, produce, send acknowledgements, commit: every output is visible
// exactly once, every input is ACKNOWLEDGED and never delivered again, and
// the consumer itself never acknowledged anything.
func TestTransactionalCommit(t *testing.T) {
	const inputs = 60
	e := txnEnv(t, inputs)
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxPollRecords(7))
	log := bundled.ObserveRequests(t, e.c)
	p := e.producer("ctp")

	done := make(map[string]bool)
	for len(done) < inputs {
		recs, err := c.Poll(e.ctx)
		require.NoError(t, err)
		require.NoError(t, process(e.ctx, t, p, c, recs))
		for _, r := range recs {
			require.False(t, done[string(r.Value)], "input %q delivered again after its commit", r.Value)
			done[string(r.Value)] = true
			_, held := c.DeliveryCount(r)
			require.False(t, held, "committed record %q still tracked", r.Value)
		}
	}
	for v, n := range e.readCommitted("out", inputs) {
		require.Equal(t, 1, n, "output %s", v)
	}
	e.allAcknowledged("g", "in", map[int32]int64{0: inputs / 3, 1: inputs / 3, 2: inputs / 3})
	expectNothing(e.ctx, t, c, 500*time.Millisecond)
	require.Empty(t, ownAcks(log, c.GroupMetadata().MemberID), "the transactional consumer acknowledged on its own")
}

// An aborted transaction's outputs stay invisible and its inputs come back
// at once (the lock is 10 minutes, far longer than the test), with their
// delivery count raised; processing them again commits.
func TestTransactionalAbortRedeliversAtOnce(t *testing.T) {
	const inputs = 12
	e := txnEnv(t, inputs, broker.ShareLockDuration(10*time.Minute))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	log := bundled.ObserveRequests(t, e.c)
	p := e.producer("ctp")

	first := pollRecords(e.ctx, t, c, inputs)
	require.NoError(t, p.BeginTransaction())
	for _, r := range first {
		p.Produce(e.ctx, &kgo.Record{Topic: "out", Value: []byte("aborted-" + string(r.Value))}, nil)
	}
	require.NoError(t, p.SendShareAcksToTransaction(e.ctx, c.Acks(first, kshare.AckAccept), c.GroupMetadata()))
	require.NoError(t, p.Flush(e.ctx))
	require.NoError(t, p.AbortTransaction(e.ctx))

	again := pollRecords(e.ctx, t, c, inputs)
	for _, r := range again {
		n, _ := c.DeliveryCount(r)
		require.EqualValues(t, 2, n, "record %q", r.Value)
	}
	require.NoError(t, process(e.ctx, t, p, c, again))
	got := e.readCommitted("out", inputs)
	for v, n := range got {
		require.False(t, strings.HasPrefix(v, "aborted-"), "aborted output %q visible", v)
		require.Equal(t, 1, n, "output %s", v)
	}
	e.allAcknowledged("g", "in", map[int32]int64{0: inputs / 3, 1: inputs / 3, 2: inputs / 3})
	// The only acknowledgements the consumer sent itself release the
	// aborted transaction's records.
	for _, a := range ownAcks(log, c.GroupMetadata().MemberID) {
		require.Contains(t, a, "[2]", "acknowledgement %s is not a RELEASE", a)
	}
}

// A process that dies in the middle of a transaction, after its
// acknowledgements reached the leaders (TX_PENDING) but before EndTxn:
// nothing of it commits. Its outputs stay invisible and, once the
// coordinator aborts the timed-out transaction, its inputs go to another
// member.
func TestTransactionalProcessDiesMidTransaction(t *testing.T) {
	const inputs = 9
	e := txnEnv(t, inputs, broker.ShareLockDuration(10*time.Minute))
	dying := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	p := e.producer("ctp-dies", producer.TransactionTimeout(2*time.Second))

	recs := pollRecords(e.ctx, t, dying, inputs)
	require.NoError(t, p.BeginTransaction())
	for _, r := range recs {
		p.Produce(e.ctx, &kgo.Record{Topic: "out", Value: []byte("lost-" + string(r.Value))}, nil)
	}
	require.NoError(t, p.Flush(e.ctx))
	acks := dying.Acks(recs, kshare.AckAccept)
	require.NoError(t, shareconsumer.Stage(acks, dying.GroupMetadata()))
	stageAtBroker(e, p, acks, dying.GroupMetadata())

	// Die: connections drop, nothing more is sent.
	gone, cancel := context.WithCancel(e.ctx)
	cancel()
	dying.Close(gone)
	p.Close(gone)

	heir := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	p2 := e.producer("ctp-heir")
	again := pollRecords(e.ctx, t, heir, inputs)
	for _, r := range again {
		n, _ := heir.DeliveryCount(r)
		require.EqualValues(t, 2, n, "record %q", r.Value)
	}
	require.NoError(t, process(e.ctx, t, p2, heir, again))
	for v := range e.readCommitted("out", inputs) {
		require.False(t, strings.HasPrefix(v, "lost-"), "output %q of the dead transaction visible", v)
	}
	e.allAcknowledged("g", "in", map[int32]int64{0: inputs / 3, 1: inputs / 3, 2: inputs / 3})
}

// A transactional consumer closed while a transaction holds its records
// (staged in the producer, not yet sent to the leaders) leaves the group,
// so the commit cannot stage them: it fails as abortable and nothing of
// the transaction commits; the records go to the next member. Staging
// after Close fails with ErrClosed.
func TestTransactionalConsumerClosedMidTransaction(t *testing.T) {
	const inputs = 6
	e := txnEnv(t, inputs, broker.ShareLockDuration(10*time.Minute))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	p := e.producer("ctp-closed")
	recs := pollRecords(e.ctx, t, c, inputs)
	require.NoError(t, p.BeginTransaction())
	for _, r := range recs {
		p.Produce(e.ctx, &kgo.Record{Topic: "out", Value: []byte("orphan-" + string(r.Value))}, nil)
	}
	require.NoError(t, p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()))
	require.NoError(t, c.Close(e.ctx))
	require.ErrorIs(t, p.CommitTransaction(e.ctx), kshare.ErrAbortable, "the member is gone")
	require.NoError(t, p.AbortTransaction(e.ctx))
	late := c.Acks(recs, kshare.AckAccept)
	require.ErrorIs(t, shareconsumer.Stage(late, c.GroupMetadata()), kshare.ErrClosed)

	heir := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	again := pollRecords(e.ctx, t, heir, inputs)
	require.NoError(t, process(e.ctx, t, p, heir, again))
	for v := range e.readCommitted("out", inputs) {
		require.False(t, strings.HasPrefix(v, "orphan-"), "output %q of the failed transaction visible", v)
	}
	e.allAcknowledged("g", "in", map[int32]int64{0: inputs / 3, 1: inputs / 3, 2: inputs / 3})
}

// stageAtBroker does what a commit does before EndTxn: TxnShareAcknowledge
// at each leader, with the producer's id and epoch (the leader adds the
// share state partition to the transaction). The records go TX_PENDING.
func stageAtBroker(e *env, p *producer.Producer, acks *kshare.ShareAcks, meta kshare.ShareGroupMetadata) {
	e.t.Helper()
	st := p.Status()
	pid, epoch, txnID := st.ProducerID, st.Epoch, st.TransactionalID
	byLeader := make(map[int32]*wire.TxnShareAcknowledgeRequest)
	for _, tp := range acks.Partitions() {
		leader, err := e.c.Leader(tp.Topic, tp.Partition)
		require.NoError(e.t, err)
		req := byLeader[leader]
		if req == nil {
			req = &wire.TxnShareAcknowledgeRequest{TransactionalID: txnID, GroupID: meta.GroupID, MemberID: meta.MemberID,
				MemberEpoch: meta.MemberEpoch, ProducerID: pid, ProducerEpoch: epoch}
			byLeader[leader] = req
		}
		id, ok := shareconsumer.TopicID(acks, tp.Topic)
		require.True(e.t, ok)
		var batches []wire.TxnShareAcknowledgeBatch
		for _, r := range acks.Records(tp) {
			batches = append(batches, wire.TxnShareAcknowledgeBatch{FirstOffset: r.Offset, LastOffset: r.Offset, AcknowledgeTypes: []wire.AckType{wire.AckType(r.Type)}})
		}
		req.Topics = append(req.Topics, wire.TxnShareAcknowledgeTopic{TopicID: id, Partitions: []wire.TxnShareAcknowledgePartition{
			{Partition: tp.Partition, AcknowledgementBatches: batches},
		}})
	}
	for leader, req := range byLeader {
		resp, err := e.admin.Broker(int(leader)).Request(e.ctx, req)
		require.NoError(e.t, err)
		tr := resp.(*wire.TxnShareAcknowledgeResponse)
		require.NoError(e.t, kerr.ErrorForCode(tr.ErrorCode))
		for _, rt := range tr.Topics {
			for _, rp := range rt.Partitions {
				require.NoError(e.t, kerr.ErrorForCode(rp.ErrorCode), "partition %d", rp.Partition)
			}
		}
	}
}

// A record whose lock ran out cannot join a transaction: sending its
// acknowledgement fails with ErrAbortable wrapping ErrLockExpired, and the
// transaction aborts.
func TestTransactionalRefusesExpiredLock(t *testing.T) {
	e := txnEnv(t, 3, broker.ShareLockDuration(time.Second))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	p := e.producer("ctp")
	recs := pollRecords(e.ctx, t, c, 3)
	deadline, ok := c.LockDeadline(recs[0])
	require.True(t, ok)
	time.Sleep(time.Until(deadline) + 50*time.Millisecond)

	require.NoError(t, p.BeginTransaction())
	err := p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata())
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.ErrorIs(t, err, shareconsumer.ErrLockExpired)
	require.NoError(t, p.AbortTransaction(e.ctx))
}

// sleepPastLocks sleeps until the locks of recs, as c knows them, have
// all run out.
func sleepPastLocks(t *testing.T, c *shareconsumer.Consumer, recs []*kgo.Record) {
	t.Helper()
	var last time.Time
	for _, r := range recs {
		d, ok := c.LockDeadline(r)
		require.True(t, ok)
		if d.After(last) {
			last = d
		}
	}
	time.Sleep(time.Until(last) + 50*time.Millisecond)
}

// Without RenewHeldLocks(true), records held outside a transaction keep
// their first lock: no RENEW is sent for them, and staging them after the
// lock ran out fails with ErrLockExpired.
func TestTransactionalKeepsHeldLocksByDefault(t *testing.T) {
	e := txnEnv(t, 3, broker.ShareLockDuration(time.Second))
	log := bundled.ObserveRequests(t, e.c)
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	p := e.producer("ctp")
	recs := pollRecords(e.ctx, t, c, 3)
	sleepPastLocks(t, c, recs)
	for _, o := range log.Of(kmsg.ShareAcknowledge.Int16()) {
		require.False(t, o.Req.(*kmsg.ShareAcknowledgeRequest).IsRenewAck, "a RENEW was sent for held records")
	}
	require.NoError(t, p.BeginTransaction())
	err := p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata())
	require.ErrorIs(t, err, shareconsumer.ErrLockExpired)
	require.NoError(t, p.AbortTransaction(e.ctx))
}

// A RENEW of held records that the broker refuses stops their renewal
// (the consumer does not ask again and again until the lock runs out):
// the records keep the lock they had, and staging them after it fails
// with ErrLockExpired. The broker here renews but answers
// INVALID_RECORD_STATE, as for records it no longer holds for the member.
func TestTransactionalRefusedRenewalOfHeldRecordsStops(t *testing.T) {
	e := txnEnv(t, 3, broker.ShareLockDuration(time.Second))
	var renews atomic.Int32
	stop := e.c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if r, ok := req.(*kmsg.ShareAcknowledgeRequest); !ok || !r.IsRenewAck {
			return broker.FaultAction{}
		}
		renews.Add(1)
		return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
			r := resp.(*kmsg.ShareAcknowledgeResponse)
			for i := range r.Topics {
				for j := range r.Topics[i].Partitions {
					r.Topics[i].Partitions[j].ErrorCode = kerr.InvalidRecordState.Code
				}
			}
		}}
	})
	t.Cleanup(stop)
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.RenewHeldLocks(true))
	p := e.producer("ctp")
	recs := pollRecords(e.ctx, t, c, 3) // one per partition: three acquisitions
	// The renewal is waited for, not assumed to have been sent by the
	// time the locks ran out; then the locks run out, and the consumer
	// has had the time to ask again had it not stopped.
	e.eventually("a RENEW of the held records", func() bool { return renews.Load() > 0 })
	sleepPastLocks(t, c, recs)
	n := renews.Load()
	require.LessOrEqual(t, n, int32(3), "at most one refused RENEW per acquisition")

	require.NoError(t, p.BeginTransaction())
	err := p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata())
	require.ErrorIs(t, err, shareconsumer.ErrLockExpired, "the refused renewal did not move the lock")
	require.NoError(t, p.AbortTransaction(e.ctx))
}

// Records the consumer holds keep their locks past the lock duration: the
// consumer renews them, so no other member gets them meanwhile and the
// transaction commits. "held": Poll returned them and the application
// works on them, staging them only after several lock durations (issue
// 17: a message slower than the lock in a pipeline's processors), with
// RenewHeldLocks(true). "staged": they are in an open transaction all
// along, which needs no option.
func TestTransactionalRenewsLocks(t *testing.T) {
	for _, staged := range []bool{false, true} {
		name := map[bool]string{false: "held", true: "staged"}[staged]
		t.Run(name, func(t *testing.T) {
			const inputs = 6
			e := txnEnv(t, inputs, broker.ShareLockDuration(2*time.Second))
			c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.RenewHeldLocks(!staged))
			p := e.producer("ctp")
			recs := pollRecords(e.ctx, t, c, inputs)
			stage := func() {
				require.NoError(t, p.BeginTransaction())
				require.NoError(t, p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()),
					"the records' locks were renewed, so they can be staged")
			}
			if staged {
				stage()
			}
			first, _ := c.LockDeadline(recs[0])
			// The other member joins only now: joining earlier, it would
			// fetch (and lock) some of the records ahead of its first
			// Poll, and c would get them only when those locks ran out.
			other := e.consumer("g", "in")

			// Several lock durations pass; the other member polls all along.
			expectNothing(e.ctx, t, other, 5*time.Second)
			later, ok := c.LockDeadline(recs[0])
			require.True(t, ok)
			require.True(t, later.After(first), "lock deadline did not move: %v then %v", first, later)
			if !staged {
				stage()
			}
			require.NoError(t, p.CommitTransaction(e.ctx))
			e.allAcknowledged("g", "in", map[int32]int64{0: inputs / 3, 1: inputs / 3, 2: inputs / 3})
			expectNothing(e.ctx, t, other, 500*time.Millisecond)
			require.False(t, errors.Is(c.Close(e.ctx), shareconsumer.ErrLockExpired))
		})
	}
}

// Records staged in a transaction whose deadline passes before the
// transaction is resolved come back to the group: the consumer releases
// them at the deadline (the lock here lasts ten minutes, so only that
// release can bring them back). The transaction's late resolution then
// changes nothing. A resolution before the deadline, or Close, ends the
// wait for it.
func TestStagedRecordsComeBackAtTheTransactionDeadline(t *testing.T) {
	const inputs = 3
	e := txnEnv(t, inputs, broker.ShareLockDuration(10*time.Minute))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	recs := pollRecords(e.ctx, t, c, inputs)
	acks := c.Acks(recs, kshare.AckAccept)
	require.NoError(t, shareconsumer.StageUntil(acks, c.GroupMetadata(), time.Now().Add(300*time.Millisecond)))
	require.Equal(t, 1, shareconsumer.TxnTimers(c))

	again := pollRecords(e.ctx, t, c, inputs)
	for _, r := range again {
		n, held := c.DeliveryCount(r)
		require.True(t, held)
		require.EqualValues(t, 2, n, "record %q was released at the deadline and delivered again", r.Value)
	}
	require.Zero(t, shareconsumer.TxnTimers(c))
	shareconsumer.Resolve(acks, true) // the late outcome: nothing of it is staged any more
	for _, r := range again {
		_, held := c.DeliveryCount(r)
		require.True(t, held, "the late resolution leaves the new delivery alone")
	}

	// Resolved before its deadline: the wait ends, nothing is released.
	acks = c.Acks(again, kshare.AckAccept)
	require.NoError(t, shareconsumer.StageUntil(acks, c.GroupMetadata(), time.Now().Add(time.Hour)))
	require.Equal(t, 1, shareconsumer.TxnTimers(c))
	shareconsumer.Resolve(acks, false)
	require.Zero(t, shareconsumer.TxnTimers(c))

	// Close leaves staged records alone, deadline or not.
	again = pollRecords(e.ctx, t, c, inputs)
	require.NoError(t, shareconsumer.StageUntil(c.Acks(again, kshare.AckAccept), c.GroupMetadata(), time.Now().Add(time.Hour)))
	require.NoError(t, c.Close(e.ctx))
	require.Zero(t, shareconsumer.TxnTimers(c))
}

// A transaction's staged records are renewed when they fall due; the
// sessions do not scan them at every step meanwhile (they used to: a cost
// per step that grew with the records held).
func TestStagedRecordsAreNotScannedAtEveryStep(t *testing.T) {
	e := txnEnv(t, 30, broker.ShareLockDuration(time.Minute))
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.MaxWait(20*time.Millisecond))
	p := e.producer("ctp")
	recs := pollRecords(e.ctx, t, c, 30)
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendShareAcksToTransaction(e.ctx, c.Acks(recs, kshare.AckAccept), c.GroupMetadata()))
	steps0, scans0 := shareconsumer.SessionWork(c)
	// Poll until the sessions have stepped 60 times (fetches that found
	// nothing), however long that takes: the test's context bounds it,
	// not a deadline in which some number of steps happens to fit.
	const wantSteps = 60
	for {
		expectNothing(e.ctx, t, c, 50*time.Millisecond)
		if steps, _ := shareconsumer.SessionWork(c); steps-steps0 >= wantSteps {
			break
		}
		require.NoError(t, e.ctx.Err(), "the sessions stepped fewer than %d times", wantSteps)
	}
	steps, scans := shareconsumer.SessionWork(c)
	require.GreaterOrEqual(t, steps-steps0, wantSteps, "the sessions stepped (fetches that found nothing)")
	require.LessOrEqual(t, scans-scans0, 3, "at most one scan per session (the first step of a session), not one per step")
	require.NoError(t, p.CommitTransaction(e.ctx))
}
