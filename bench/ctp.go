package main

// The three consume-transform-produce pipelines, all on the same broker:
//
//   - kshare exactly-once share CTP: a shareconsumer in Transactional mode
//     and a kshare producer per worker; each transaction carries the
//     outputs of txnSize records and their acknowledgements (examples/ctp's
//     loop, with the records past a multiple of txnSize kept for the next
//     poll's transactions, as kgo's PollRecords keeps them in its buffer).
//   - kgo at-least-once share CTP: kgo's share consumer and producer in one
//     client per worker; a poll's outputs are flushed before the next poll,
//     which accepts the poll's records.
//   - kgo exactly-once consumer-group CTP: kgo's GroupTransactSession per
//     worker, read_committed, up to txnSize records per transaction.
//
// A transaction's commit latency runs from the last Produce call of the
// transaction to the commit's return: the flush, the acknowledgements or
// offsets and EndTxn.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// ctpSpec is one pipeline workload.
type ctpSpec struct {
	input      string
	partitions int // of the input
	records    int // inputs to commit
	inputs     int // inputs in the topic (at least records)
	workers    int
	txnSize    int
	work       time.Duration // per record (slept: I/O-like work)
	timeout    time.Duration
	// ledger names the claim ledger of the kshare pipeline ("": KIP-1289).
	ledger string
}

// closeTimeout bounds a client's Close at the end of a run.
const closeTimeout = 10 * time.Second

// doWork stands for the transformation of n records.
func (s ctpSpec) doWork(ctx context.Context, n int) {
	if s.work <= 0 {
		return
	}
	t := time.NewTimer(time.Duration(n) * s.work)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// kshareLedgerEOS runs the kshare exactly-once share pipeline with a claim
// ledger (exactly-once without KIP-1289) into output.
func kshareLedgerEOS(ctx context.Context, e *env, s ctpSpec, output string) (sample, error) {
	s.ledger = e.name("claims")
	return kshareEOS(ctx, e, s, output)
}

// kshareEOS runs the kshare exactly-once share pipeline into output.
func kshareEOS(ctx context.Context, e *env, s ctpSpec, output string) (sample, error) {
	group := e.name("ks-eos")
	if err := e.shareGroupFromStart(ctx, group); err != nil {
		return sample{}, err
	}
	work := func(ctx context.Context, w int, run *pipeRun) error {
		cons, err := shareconsumer.New(
			shareconsumer.SeedBrokers(e.seeds()...),
			shareconsumer.Group(group),
			shareconsumer.Topics(s.input),
			shareconsumer.Mode(shareconsumer.Transactional),
			shareconsumer.MaxPollRecords(int32(s.txnSize)),
			shareconsumer.MaxWait(250*time.Millisecond),
			shareconsumer.ShareLedger(s.ledger),
		)
		if err != nil {
			return err
		}
		prod, err := producer.New(
			producer.SeedBrokers(e.seeds()...),
			producer.TransactionalID(fmt.Sprintf("%s-%d", group, w)),
			producer.ShareLedger(s.ledger),
		)
		if err != nil {
			cons.Close(context.Background())
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			defer cancel()
			prod.Close(cctx)
			cons.Close(cctx)
			m := cons.Metrics()
			run.ledgerPolls.Add(m.LedgerResolves)
			run.ledgerNanos.Add(int64(m.LedgerPollWait))
		}()
		if err := prod.InitTransactions(ctx); err != nil {
			return err
		}
		var held []*kgo.Record // records past the last full transaction
		for {
			// Poll waits for records: holding some, it waits briefly,
			// and finding none in time means the input is running dry.
			pollCtx, cancel := ctx, context.CancelFunc(func() {})
			if len(held) > 0 {
				pollCtx, cancel = context.WithTimeout(ctx, 20*time.Millisecond)
			}
			recs, err := cons.Poll(pollCtx)
			dry := pollCtx.Err() != nil
			cancel()
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil && !dry:
				return err
			}
			if len(recs) > 0 {
				run.polled(w)
			}
			// Transactions of txnSize records, as kgo's PollRecords(txnSize)
			// hands them to the consumer-group pipeline: a leader hands out
			// whole batches, a little more than asked, and the rest waits
			// for the next poll (a short or empty poll means the input is
			// running dry: everything goes then).
			held = append(held, recs...)
			for len(held) >= s.txnSize || (len(held) > 0 && len(recs) < s.txnSize) {
				n := min(len(held), s.txnSize)
				if err := kshareTxn(ctx, s, cons, prod, output, held[:n], run); err != nil {
					return err
				}
				held = held[n:]
			}
			held = append([]*kgo.Record(nil), held...) // let the committed ones go
		}
	}
	return runPipeline(ctx, s.records, max(s.inputs, s.records), s.workers, s.timeout, work, nil)
}

func kshareTxn(ctx context.Context, s ctpSpec, cons *shareconsumer.Consumer, prod *producer.Producer, output string, recs []*kgo.Record, run *pipeRun) error {
	if err := prod.BeginTransaction(); err != nil {
		return err
	}
	s.doWork(ctx, len(recs))
	for _, r := range recs {
		prod.Produce(ctx, &kgo.Record{Topic: output, Key: r.Key, Value: r.Value}, nil)
	}
	t0 := time.Now()
	err := prod.SendShareAcksToTransaction(ctx, cons.Acks(recs, kshare.AckAccept), cons.GroupMetadata())
	if err == nil {
		err = prod.CommitTransaction(ctx)
	}
	switch {
	case err == nil:
		run.committed(recs, time.Since(t0))
		return nil
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, kshare.ErrAbortable):
		run.aborts.Add(1)
		return prod.AbortTransaction(ctx)
	}
	return err
}

// kgoShareALO runs kgo's at-least-once share pipeline into output.
func kgoShareALO(ctx context.Context, e *env, s ctpSpec, output string) (sample, error) {
	group := e.name("kgo-alo")
	if err := e.shareGroupFromStart(ctx, group); err != nil {
		return sample{}, err
	}
	work := func(ctx context.Context, w int, run *pipeRun) error {
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(e.seeds()...),
			kgo.ShareGroup(group),
			kgo.ConsumeTopics(s.input),
			kgo.ShareMaxRecords(int32(s.txnSize)),
		)
		if err != nil {
			return err
		}
		defer cl.Close()
		var failed firstErr
		for {
			recs, stop, err := polled(ctx, cl.PollFetches(ctx))
			if stop || err != nil {
				return err
			}
			if len(recs) == 0 {
				continue
			}
			run.polled(w)
			s.doWork(ctx, len(recs))
			for _, r := range recs {
				cl.Produce(ctx, &kgo.Record{Topic: output, Key: r.Key, Value: r.Value}, failed.promise)
			}
			if err := cl.Flush(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if err := failed.err(); err != nil {
				return err
			}
			run.committed(recs, 0) // accepted by the next poll
		}
	}
	return runPipeline(ctx, s.records, max(s.inputs, s.records), s.workers, s.timeout, work, nil)
}

// polled returns a poll's records; stop is true once ctx has ended (the
// run is over), err the first fetch error.
func polled(ctx context.Context, fs kgo.Fetches) (recs []*kgo.Record, stop bool, err error) {
	if ctx.Err() != nil {
		return nil, true, nil
	}
	if err := fetchErr(fs); err != nil {
		return nil, true, err
	}
	return fs.Records(), false, nil
}

// fetchErr returns the first fetch error that is not the end of ctx.
func fetchErr(fs kgo.Fetches) error {
	for _, fe := range fs.Errors() {
		if !errors.Is(fe.Err, context.Canceled) && !errors.Is(fe.Err, context.DeadlineExceeded) {
			return fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
	}
	return nil
}

// kgoGroupEOS runs kgo's exactly-once consumer-group pipeline into output.
// The members start paused and go once the group has settled, so that the
// run measures the pipeline rather than the rebalances of members joining
// one after another.
func kgoGroupEOS(ctx context.Context, e *env, s ctpSpec, output string) (sample, error) {
	group := e.name("kgo-eos")
	assigned := make([]atomic.Int32, s.workers)
	var mu sync.Mutex
	clients := make([]*kgo.Client, s.workers)
	ready := make(chan int, s.workers)
	count := func(w int) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			assigned[w].Add(int32(len(m[s.input])))
		}
	}
	uncount := func(w int) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			assigned[w].Add(-int32(len(m[s.input])))
		}
	}
	work := func(ctx context.Context, w int, run *pipeRun) error {
		sess, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(e.seeds()...),
			kgo.TransactionalID(fmt.Sprintf("%s-%d", group, w)),
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(s.input),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.RequireStableFetchOffsets(),
			kgo.OnPartitionsAssigned(count(w)),
			kgo.OnPartitionsRevoked(uncount(w)),
			kgo.OnPartitionsLost(uncount(w)),
		)
		if err != nil {
			return err
		}
		defer sess.Close()
		sess.Client().PauseFetchTopics(s.input)
		mu.Lock()
		clients[w] = sess.Client()
		mu.Unlock()
		ready <- w
		for {
			recs, stop, err := polled(ctx, sess.PollRecords(ctx, s.txnSize))
			if stop || err != nil {
				return err
			}
			if len(recs) == 0 {
				continue
			}
			run.polled(w)
			if err := sess.Begin(); err != nil {
				return err
			}
			s.doWork(ctx, len(recs))
			for _, r := range recs {
				sess.Produce(ctx, &kgo.Record{Topic: output, Key: r.Key, Value: r.Value}, nil)
			}
			t0 := time.Now()
			committed, err := sess.End(ctx, kgo.TryCommit)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				return err
			case committed:
				run.committed(recs, time.Since(t0))
			default:
				run.aborts.Add(1)
			}
		}
	}
	gate := func(ctx context.Context) error {
		for range s.workers {
			select {
			case <-ready:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// Settled: every partition assigned, every worker holding one
		// (when there are enough), for 300 ms.
		want := min(s.workers, s.partitions)
		var since time.Time
		deadline := time.Now().Add(time.Minute)
		for {
			total, holding := 0, 0
			for w := range assigned {
				n := int(assigned[w].Load())
				total += n
				if n > 0 {
					holding++
				}
			}
			switch {
			case total != s.partitions || holding < want:
				since = time.Time{}
			case since.IsZero():
				since = time.Now()
			case time.Since(since) >= 300*time.Millisecond:
				mu.Lock()
				for _, cl := range clients {
					cl.ResumeFetchTopics(s.input)
				}
				mu.Unlock()
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("consumer group %s: %d of %d partitions assigned, %d workers holding some, after a minute", group, total, s.partitions, holding)
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return runPipeline(ctx, s.records, max(s.inputs, s.records), s.workers, s.timeout, work, gate)
}
