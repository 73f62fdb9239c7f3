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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/internal/txn"
)

// onClientRequests installs a fault hook for the requests of the kgo client
// named client (kgo.ClientID) until the returned stop or the end of the
// test.
func onClientRequests(t *testing.T, c *broker.Cluster, client string, fn func(node int32, req kmsg.Request) broker.FaultAction) (stop func()) {
	stop = c.InjectFaults(func(node int32, id string, req kmsg.Request) broker.FaultAction {
		if id != client {
			return broker.FaultAction{}
		}
		return fn(node, req)
	})
	t.Cleanup(stop)
	return stop
}

// clientID names the producer's kgo client, for onClientRequests.
func clientID(id string) Opt { return KgoOpts(kgo.ClientID(id)) }

// transactionState returns the coordinator's state of txnID
// (DescribeTransactions), e.g. "Ongoing" or "CompleteAbort", or "" if the
// coordinator does not know the id.
func transactionState(t *testing.T, c *broker.Cluster, txnID string) string {
	t.Helper()
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{txnID}
	resp, err := req.RequestWith(testCtx(t), newClient(t, c))
	require.NoError(t, err)
	require.Len(t, resp.TransactionStates, 1)
	if code := resp.TransactionStates[0].ErrorCode; code == kerr.TransactionalIDNotFound.Code {
		return ""
	} else {
		require.NoError(t, kerr.ErrorForCode(code))
	}
	return resp.TransactionStates[0].State
}

// endOpenTransaction fences txnID with a new producer, which aborts a
// transaction left open, so that read_committed readers see the final
// outcome of everything the test's producer did.
func endOpenTransaction(t *testing.T, c *broker.Cluster, txnID string) {
	t.Helper()
	require.NoError(t, newProducer(t, c, txnID).Close(testCtx(t)))
}

// Close racing CommitTransaction never commits part of the transaction:
// with time to spare, Close waits for the commit, which commits every
// record; with its context already ended, Close cuts the commit short
// before EndTxn(COMMIT) (or leaves it in doubt) and says that it could not
// abort. Either way what the calls report matches what the broker did.
func TestCloseDuringCommitCommitsAllOrNothing(t *testing.T) {
	for _, patient := range []bool{true, false} {
		t.Run(fmt.Sprintf("close context alive %v", patient), func(t *testing.T) {
			c := newCluster(t, broker.Nodes(3))
			const topic, txnID, client, n = "close-commit", "close-commit-txn", "closing-producer", 20
			createTopic(t, c, topic, 3)
			p := newProducer(t, c, txnID, Linger(time.Hour), TransactionTimeout(5*time.Second), clientID(client))
			ctx := testCtx(t)
			closeCtx := ctx
			if !patient {
				dead, cancel := context.WithCancel(ctx)
				cancel()
				closeCtx = dead
			}
			closed := make(chan error, 1)
			var once sync.Once
			onClientRequests(t, c, client, func(_ int32, req kmsg.Request) broker.FaultAction {
				if req.Key() == kmsg.Produce.Int16() {
					// The commit's flush is sending the records: Close now,
					// and let them through once Close has begun.
					once.Do(func() {
						go func() { closed <- p.Close(closeCtx) }()
						for !p.closing.Load() {
							time.Sleep(time.Millisecond)
						}
					})
				}
				return broker.FaultAction{}
			})

			require.NoError(t, p.BeginTransaction())
			var failed atomic.Int32
			var promised sync.WaitGroup
			for i := range n {
				promised.Add(1)
				p.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("r%02d", i))}, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Add(1)
					}
					promised.Done()
				})
			}
			commitErr := p.CommitTransaction(ctx)
			closeErr := <-closed
			promised.Wait()
			state := transactionState(t, c, txnID)
			endOpenTransaction(t, c, txnID)
			visible := len(readCommitted(t, c, topic, 3))
			t.Logf("commit: %v; close: %v; failed promises: %d; coordinator after close: %s; visible: %d",
				commitErr, closeErr, failed.Load(), state, visible)

			require.Contains(t, []int{0, n}, visible, "a transaction commits all of its records or none")
			switch {
			case commitErr == nil:
				require.Equal(t, n, visible, "a successful commit committed every record")
				require.Zero(t, failed.Load(), "no promise of a committed record failed")
			case errors.Is(commitErr, kshare.ErrInDoubt):
				require.Error(t, closeErr, "Close either could not learn the outcome or learned that it committed, and says so")
				if errors.Is(closeErr, kshare.ErrCommitted) {
					require.Equal(t, n, visible, "Close said the in-doubt commit had committed")
				}
			default:
				require.ErrorIs(t, commitErr, kshare.ErrAbortable)
				require.Zero(t, visible, "a failed commit committed nothing")
			}
			if closeErr == nil || errors.Is(closeErr, kshare.ErrCommitted) {
				require.Contains(t, []string{"Empty", "CompleteCommit", "CompleteAbort"}, state,
					"Close returned nil, so it left no transaction open")
			}
			if patient {
				require.NoError(t, commitErr, "Close waited for the commit")
				require.NoError(t, closeErr)
			}
		})
	}
}

// InitTransactions after an abortable error (one record too large, another
// already written) first aborts the open transaction with EndTxn and then
// bumps the epoch with InitProducerId (KIP-360, as the Java client does);
// it never turns its own recovery into a fatal error.
func TestInitTransactionsAfterAbortableErrorRecovers(t *testing.T) {
	c := newCluster(t)
	const topic, txnID = "recover", "recover-txn"
	createTopic(t, c, topic, 1)
	p := newProducer(t, c, txnID, Linger(0), BatchMaxBytes(1024))
	ctx := testCtx(t)

	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, topic, "written-then-aborted")
	err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: make([]byte, 2000)}).FirstErr()
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.ErrorIs(t, err, kerr.MessageTooLarge)
	pid, epoch := p.txn.ProducerID()

	log := bundled.ObserveRequests(t, c)
	require.NoError(t, p.InitTransactions(ctx), "recovery from an abortable error")
	require.Equal(t, txn.StateReady, p.txn.State())
	seq := log.Of(kmsg.EndTxn.Int16(), kmsg.InitProducerID.Int16())
	require.Len(t, seq, 2, "one EndTxn, one InitProducerId")
	end, ok := seq[0].Req.(*kmsg.EndTxnRequest)
	require.True(t, ok, "the open transaction is ended with EndTxn first")
	require.False(t, end.Commit)
	require.Equal(t, pid, end.ProducerID)
	require.Equal(t, epoch, end.ProducerEpoch)
	init, ok := seq[1].Req.(*kmsg.InitProducerIDRequest)
	require.True(t, ok, "then the epoch is bumped")
	require.Equal(t, pid, init.ProducerID, "KIP-360: the producer keeps its id")
	newPID, newEpoch := p.txn.ProducerID()
	require.Equal(t, pid, newPID)
	require.Greater(t, newEpoch, epoch)
	require.EqualValues(t, 1, p.Metrics().TransactionsAborted)

	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, topic, "after-recovery")
	require.NoError(t, p.CommitTransaction(ctx))
	var got []string
	for _, r := range readCommitted(t, c, topic, 1) {
		got = append(got, r.value)
	}
	require.Equal(t, []string{"after-recovery"}, got)
}

// A commit whose context ends as the coordinator receives EndTxn(COMMIT)
// (which it applies; the answer is lost) is in doubt. Whichever call comes
// next learns from the coordinator that it committed, and the metrics, the
// staged acknowledgements' resolution and the call's answer all say so.
func TestLostCommitAnswerIsLearned(t *testing.T) {
	for _, next := range []string{"InitTransactions", "AbortTransaction", "CommitTransaction", "Close"} {
		t.Run(next, func(t *testing.T) {
			c := newCluster(t)
			const in, out, group, txnID, client = "doubt-in", "doubt-out", "doubters", "doubt-txn", "doubting-producer"
			member, acks, tracker := heldInputs(t, c, in, out, group, 5)
			ctx := testCtx(t)
			p := newProducer(t, c, txnID, Linger(0), clientID(client))

			require.NoError(t, p.BeginTransaction())
			produceValues(t, p, out, "o1", "o2")
			require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
			commitCtx, cancel := context.WithCancel(ctx)
			stop := onClientRequests(t, c, client, func(_ int32, req kmsg.Request) broker.FaultAction {
				if e, ok := req.(*kmsg.EndTxnRequest); ok && e.Commit {
					cancel()
					return broker.FaultAction{Fault: broker.DropAnswer}
				}
				return broker.FaultAction{}
			})
			commitErr := p.CommitTransaction(commitCtx)
			require.Error(t, commitErr)
			stop()
			require.Empty(t, tracker.resolutions(), "nothing is resolved while the outcome is unknown")

			switch next {
			case "InitTransactions":
				require.NoError(t, p.InitTransactions(ctx))
			case "AbortTransaction":
				require.ErrorIs(t, p.AbortTransaction(ctx), kshare.ErrCommitted)
			case "CommitTransaction":
				require.NoError(t, p.CommitTransaction(ctx))
			case "Close":
				err := p.Close(ctx)
				require.ErrorIs(t, err, kshare.ErrCommitted, "Close tells an in-doubt commit it learned had committed from an abort")
				require.Equal(t, kshare.ErrCommitted, errs.ClassOf(err), "ErrCommitted is the error's only class")
			}
			m := p.Metrics()
			require.EqualValues(t, 1, m.TransactionsCommitted, "the metrics say it committed")
			require.Zero(t, m.TransactionsAborted)
			require.Equal(t, []bool{true}, tracker.resolutions(), "the acknowledgements resolve once, as committed")
			require.Len(t, readCommitted(t, c, out, 1), 2, "it did commit")
			require.EqualValues(t, 5, startOffsets(t, member.cl, group, in)[0], "the inputs are acknowledged")
			require.ErrorIs(t, commitErr, kshare.ErrInDoubt, "the commit said its outcome was unknown")
			require.NotErrorIs(t, commitErr, kshare.ErrAbortable)
			require.Contains(t, commitErr.Error(), "in doubt")

			if next != "Close" {
				require.NoError(t, p.BeginTransaction(), "the producer goes on")
				produceValues(t, p, out, "o3")
				require.NoError(t, p.CommitTransaction(ctx))
				require.Len(t, readCommitted(t, c, out, 1), 3)
			}
		})
	}
}

// Close whose abort fails (its context has ended) still resolves the
// staged acknowledgements, once, as not committed, so that the share
// consumer stops renewing their locks; it says that it could not abort,
// and the calls after it fail at once without sending anything.
func TestCloseWhoseAbortFailsResolvesStagedAcks(t *testing.T) {
	c := newCluster(t)
	const in, out, group, txnID = "unresolved-in", "unresolved-out", "unresolved", "unresolved-txn"
	member, acks, tracker := heldInputs(t, c, in, out, group, 3)
	ctx := testCtx(t)
	p := newProducer(t, c, txnID, Linger(0), TransactionTimeout(5*time.Second))

	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, out, "never-committed")
	require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
	dead, cancel := context.WithCancel(ctx)
	cancel()
	closeErr := p.Close(dead)
	require.Error(t, closeErr, "Close could not abort and says so")
	require.ErrorIs(t, closeErr, kshare.ErrAbortable, "the transaction did not commit")
	require.Equal(t, []bool{false}, tracker.resolutions(), "resolved once, as not committed")

	log := bundled.ObserveRequests(t, c)
	require.ErrorIs(t, p.AbortTransaction(ctx), kshare.ErrClosed, "after Close, calls fail at once")
	require.ErrorIs(t, p.CommitTransaction(ctx), kshare.ErrClosed)
	require.ErrorIs(t, p.InitTransactions(ctx), kshare.ErrClosed)
	require.Empty(t, log.Of(kmsg.EndTxn.Int16()), "nothing was sent after Close")
	require.NoError(t, p.Close(ctx), "a second Close does nothing")
	require.Equal(t, []bool{false}, tracker.resolutions())

	endOpenTransaction(t, c, txnID)
	require.Empty(t, readCommitted(t, c, out, 1))
	require.Zero(t, startOffsets(t, member.cl, group, in)[0])
}

// A fatal failure that lands while SendShareAcksToTransaction is between
// its checks and the staging (here: inside the tracker's Stage) makes the
// call fail, and the acknowledgements the tracker accepted are resolved,
// once, as not committed.
func TestSendShareAcksRacingFatalFailure(t *testing.T) {
	c := newCluster(t)
	createTopic(t, c, "racing", 1)
	p := newProducer(t, c, "racing-txn")
	ctx := testCtx(t)
	tracker := &recordingTracker{onStage: func() {
		p.txn.Fail("produce", fmt.Errorf("produce to racing/0: %w", kerr.ProducerFenced))
	}}
	acks := acktrack.New(tracker)
	acks.Add("racing", [16]byte{}, 0, acktrack.Record{Offset: 0, Type: int8(kshare.AckAccept)})

	require.NoError(t, p.BeginTransaction())
	err := p.SendShareAcksToTransaction(ctx, ka(acks), kshare.ShareGroupMetadata{GroupID: "g", MemberID: "m", MemberEpoch: 1})
	require.ErrorIs(t, err, kshare.ErrFatal)
	require.Equal(t, []bool{false}, tracker.resolutions(), "resolved once, as not committed")
	require.NoError(t, p.Close(ctx))
	require.Equal(t, []bool{false}, tracker.resolutions())
}

// A commit whose first EndTxn answer was lost after the coordinator applied
// it stays in doubt even when a later attempt gets a definite answer: here
// a newer producer fences this one between the attempts, so the retry is
// answered PRODUCER_FENCED. The error is fatal and in doubt, never a plain
// "not committed": the transaction did commit.
func TestInDoubtSurvivesALaterDefiniteAnswer(t *testing.T) {
	c := newCluster(t)
	const topic, txnID, client = "doubt-fenced", "doubt-fenced-txn", "doubt-fenced-producer"
	createTopic(t, c, topic, 1)
	p := newProducer(t, c, txnID, Linger(0), clientID(client))
	ctx := testCtx(t)
	successor, err := New(SeedBrokers(c.Bootstrap()...), TransactionalID(txnID))
	require.NoError(t, err)
	t.Cleanup(func() { _ = successor.Close(context.Background()) })

	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, topic, "v1", "v2")
	var attempts atomic.Int32
	onClientRequests(t, c, client, func(_ int32, req kmsg.Request) broker.FaultAction {
		if e, ok := req.(*kmsg.EndTxnRequest); !ok || !e.Commit {
			return broker.FaultAction{}
		}
		switch attempts.Add(1) {
		case 1:
			return broker.FaultAction{Fault: broker.DropAnswer}
		case 2:
			if err := successor.InitTransactions(ctx); err != nil {
				t.Errorf("successor: %v", err)
			}
		}
		return broker.FaultAction{}
	})
	err = p.CommitTransaction(ctx)
	require.ErrorIs(t, err, kshare.ErrFatal)
	require.NotErrorIs(t, err, kshare.ErrInDoubt, "one class: fatal")
	require.Contains(t, err.Error(), "outcome is unknown", "the first attempt's answer was lost, and the error says so")
	require.ErrorIs(t, err, kerr.ProducerFenced)
	require.GreaterOrEqual(t, attempts.Load(), int32(2))
	require.Len(t, readCommitted(t, c, topic, 1), 2, "the transaction did commit")
	require.Zero(t, p.Metrics().TransactionsCommitted+p.Metrics().TransactionsAborted, "the outcome is unknown to the producer")
}

// A tracker may call back into the producer when it learns an outcome
// (Resolve runs once the producer's own lock is released): here it reads
// the metrics and the state, after an abort and after a commit.
func TestTrackerMayCallBackIntoTheProducer(t *testing.T) {
	c := newCluster(t)
	const in, out, group = "callback-in", "callback-out", "callbacks"
	createTopic(t, c, in, 1)
	createTopic(t, c, out, 1)
	produceInput(t, c, in, 1, 8)
	member := joinShareGroup(t, c, group, in)
	p := newProducer(t, c, "callback-txn", Linger(0))
	ctx := testCtx(t)
	held := member.acquire(ctx, 0, 8)
	var states []txn.State
	tracker := &recordingTracker{onResolve: func(bool) {
		_ = p.Metrics()
		states = append(states, p.txn.State())
	}}
	for i, commit := range []bool{false, true} {
		acks := acktrack.New(tracker)
		for o := int64(4 * i); o < int64(4*i+4); o++ {
			require.Contains(t, held, o)
			acks.Add(in, member.topicID, 0, acktrack.Record{Offset: o, Type: int8(kshare.AckAccept)})
		}
		require.NoError(t, p.BeginTransaction())
		produceValues(t, p, out, fmt.Sprint("out-", commit))
		require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))
		if commit {
			require.NoError(t, p.CommitTransaction(ctx))
		} else {
			require.NoError(t, p.AbortTransaction(ctx))
		}
	}
	require.Equal(t, []bool{false, true}, tracker.resolutions())
	require.Len(t, states, 2, "the tracker read the state while resolving")
	require.EqualValues(t, 1, p.Metrics().TransactionsCommitted)
}

// Misuse gets an error, never a panic or a hang: nil contexts, calls in
// the wrong order, concurrent Close calls, calls after Close.
func TestMisuseGetsErrors(t *testing.T) {
	c := newCluster(t)
	createTopic(t, c, "misuse", 1)
	p := newProducer(t, c, "misuse-txn", Linger(0))
	ctx := testCtx(t)
	var nilCtx context.Context
	require.ErrorIs(t, p.InitTransactions(nilCtx), kshare.ErrUsage)
	require.ErrorIs(t, p.AbortTransaction(ctx), kshare.ErrUsage, "no transaction")
	require.ErrorIs(t, p.CommitTransaction(ctx), kshare.ErrUsage, "no transaction")
	require.NoError(t, p.BeginTransaction())
	require.ErrorIs(t, p.BeginTransaction(), kshare.ErrUsage, "twice")
	require.ErrorIs(t, p.CommitTransaction(nilCtx), kshare.ErrUsage)
	require.ErrorIs(t, p.Flush(nilCtx), kshare.ErrUsage)
	require.Equal(t, txn.StateInTransaction, p.txn.State(), "usage errors of calls that add nothing change nothing")
	produceValues(t, p, "misuse", "kept")
	require.NoError(t, p.CommitTransaction(ctx))

	// A call that was to add something to the transaction and is refused
	// dooms it, even as a usage error: it must not commit without it.
	for name, refuse := range map[string]func() error{
		"SendShareAcksToTransaction": func() error {
			return p.SendShareAcksToTransaction(nilCtx, ka(acktrack.New(nil)), kshare.ShareGroupMetadata{GroupID: "g", MemberID: "m"})
		},
		"SendOffsetsToTransaction": func() error {
			return p.SendOffsetsToTransaction(nilCtx, nil, GroupMetadata{GroupID: "g", Generation: -1})
		},
		"Produce": func() error { return p.ProduceSync(nilCtx, &kgo.Record{Topic: "misuse"}).FirstErr() },
	} {
		require.NoError(t, p.BeginTransaction())
		produceValues(t, p, "misuse", "doomed by "+name)
		require.ErrorIs(t, refuse(), kshare.ErrUsage, name)
		require.Equal(t, txn.StateAbortableError, p.txn.State(), "%s refused dooms the transaction", name)
		require.ErrorIs(t, p.CommitTransaction(ctx), kshare.ErrAbortable, name)
		require.NoError(t, p.AbortTransaction(ctx))
	}

	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, "misuse", "aborted-by-close")
	var closers sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		closers.Add(1)
		go func() {
			defer closers.Done()
			errs <- p.Close(nilCtx)
		}()
	}
	closers.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "the first Close aborted the transaction; the others waited for it")
	}
	require.Equal(t, txn.StateClosed, p.txn.State())
	require.ErrorIs(t, p.InitTransactions(ctx), kshare.ErrClosed)
	var got []string
	for _, r := range readCommitted(t, c, "misuse", 1) {
		got = append(got, r.value)
	}
	require.Equal(t, []string{"kept"}, got)
}

// An abort that learns that the in-doubt commit committed, and then cannot
// fetch the epoch the commit moved to (its context ends as the answer is
// lost), reports both; the outcome is counted once, and the next abort
// only fetches the epoch.
func TestLearnedCommitWithFailedEpochRefresh(t *testing.T) {
	c := newCluster(t)
	const in, out, group, txnID, client = "refresh-in", "refresh-out", "refreshers", "refresh-txn", "refreshing-producer"
	member, acks, tracker := heldInputs(t, c, in, out, group, 3)
	ctx := testCtx(t)
	p := newProducer(t, c, txnID, Linger(0), clientID(client))
	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, out, "o1")
	require.NoError(t, p.SendShareAcksToTransaction(ctx, ka(acks), member.metadata()))

	commitCtx, cancelCommit := context.WithCancel(ctx)
	abortCtx, cancelAbort := context.WithCancel(ctx)
	onClientRequests(t, c, client, func(_ int32, req kmsg.Request) broker.FaultAction {
		switch r := req.(type) {
		case *kmsg.EndTxnRequest:
			if r.Commit && commitCtx.Err() == nil {
				cancelCommit()
				return broker.FaultAction{Fault: broker.DropAnswer}
			}
		case *kmsg.InitProducerIDRequest:
			if abortCtx.Err() == nil {
				cancelAbort()
				return broker.FaultAction{Fault: broker.DropAnswer}
			}
		}
		return broker.FaultAction{}
	})
	require.ErrorIs(t, p.CommitTransaction(commitCtx), kshare.ErrInDoubt)
	err := p.AbortTransaction(abortCtx)
	require.ErrorIs(t, err, kshare.ErrCommitted, "the abort learned the outcome, which is what the caller must hear")
	require.NotErrorIs(t, err, kshare.ErrAbortable, "one class")
	require.Contains(t, err.Error(), "then refreshing the epoch failed", "and it says it could not fetch the new epoch")
	require.Equal(t, txn.StateAbortableError, p.txn.State(), "the next call hears that")
	require.ErrorIs(t, p.BeginTransaction(), kshare.ErrAbortable)
	require.Equal(t, []bool{true}, tracker.resolutions())
	require.EqualValues(t, 1, p.Metrics().TransactionsCommitted)

	require.NoError(t, p.AbortTransaction(ctx), "the next abort only fetches the epoch")
	require.Equal(t, txn.StateReady, p.txn.State())
	m := p.Metrics()
	require.EqualValues(t, 1, m.TransactionsCommitted, "counted once")
	require.Zero(t, m.TransactionsAborted)
	require.Equal(t, []bool{true}, tracker.resolutions(), "resolved once")
	require.NoError(t, p.BeginTransaction())
	produceValues(t, p, out, "o2")
	require.NoError(t, p.CommitTransaction(ctx))
	require.Len(t, readCommitted(t, c, out, 1), 2)
}
