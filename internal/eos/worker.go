package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/txnclient"
	"github.com/kshare-go/kshare/wire"
)

// workerPool runs cfg.Workers slots. Each slot runs one worker instance at
// a time, restarted when it fails, except that a zombie fault starts a
// second instance of a slot while the first still runs: the newer one owns
// the slot and the older one must be fenced.
type workerPool struct {
	cfg   Config
	stats *runStats
	slots []*slot

	// Fault requests, each taken by the next transaction of any instance
	// (a request left on one worker might never fire: the other workers
	// may drain the input before that one runs another transaction).
	kill atomic.Bool
	slow atomic.Bool

	wg sync.WaitGroup // every instance
}

type slot struct {
	index int
	txnID string
	gen   atomic.Int64 // instance generation that owns the slot
}

func newWorkerPool(cfg Config, stats *runStats) *workerPool {
	p := &workerPool{cfg: cfg, stats: stats}
	for i := 0; i < cfg.Workers; i++ {
		p.slots = append(p.slots, &slot{index: i, txnID: fmt.Sprintf("%s-worker-%d", cfg.Group, i)})
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

// start runs a new instance of s until ctx ends, restarting it after
// failures, with kshare's jittered backoff, for as long as it owns the
// slot.
func (p *workerPool) start(ctx context.Context, s *slot) {
	gen := s.gen.Add(1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		bo := txnclient.NewBackoff(ctx)
		for ctx.Err() == nil && s.gen.Load() == gen {
			err := p.runInstance(ctx, s, gen)
			if ctx.Err() != nil {
				return
			}
			p.stats.restarts.Add(1)
			wait := bo.NextBackOff()
			p.cfg.Logger.Info("worker stopped; restarting", "worker", s.index, "generation", gen, "err", err, "backoff", wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
}

// errKilled ends an instance that a fault killed.
var errKilled = errors.New("killed by fault injection")

// instance is one running worker: a transactional share consumer and a
// transactional producer.
type instance struct {
	pool *workerPool
	slot *slot
	log  *slog.Logger
	cons *shareconsumer.Consumer
	prod *producer.Producer
	txns int
}

func (p *workerPool) runInstance(ctx context.Context, s *slot, gen int64) (err error) {
	log := p.cfg.Logger.With("worker", s.index, "generation", gen)
	cons, err := shareconsumer.New(
		shareconsumer.SeedBrokers(p.cfg.Seeds...),
		shareconsumer.Group(p.cfg.Group),
		shareconsumer.Topics(p.cfg.Input),
		shareconsumer.Mode(shareconsumer.Transactional),
		shareconsumer.MaxPollRecords(int32(p.cfg.TxnSize)),
		shareconsumer.MaxWait(250*time.Millisecond),
		shareconsumer.Logger(log),
	)
	if err != nil {
		return fmt.Errorf("share consumer: %w", err)
	}
	prod, err := producer.New(
		producer.SeedBrokers(p.cfg.Seeds...),
		producer.TransactionalID(s.txnID),
		producer.TransactionTimeout(p.cfg.TxnTimeout),
		producer.Logger(log),
	)
	if err != nil {
		cons.Close(context.Background())
		return fmt.Errorf("producer: %w", err)
	}
	in := &instance{pool: p, slot: s, log: log, cons: cons, prod: prod}
	defer func() {
		if errors.Is(err, errKilled) {
			in.dropConnections()
			return
		}
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		prod.Close(closeCtx)
		cons.Close(closeCtx)
	}()
	if err := prod.InitTransactions(ctx); err != nil {
		return fmt.Errorf("init transactions: %w", err)
	}
	// An instance that a zombie fault superseded keeps running until the
	// new one fences it, which its next commit shows.
	for ctx.Err() == nil {
		if err := in.transaction(ctx); err != nil {
			return err
		}
	}
	return nil
}

// dropConnections closes the clients under the producer and the consumer
// without committing, aborting or acknowledging anything, as a process
// that dies would; then it stops their goroutines.
func (in *instance) dropConnections() {
	in.cons.Client().Close()
	in.prod.Client().Close()
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	in.prod.Close(dead)
	in.cons.Close(dead)
}

// transaction polls and runs consume-transform-produce transactions of at
// most TxnSize records each. It returns an error only when the instance
// must stop (fenced, killed, closed).
func (in *instance) transaction(ctx context.Context) error {
	records, err := in.cons.Poll(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("poll: %w", err)
	}
	// Delivery counts are read now: once a transaction ends, the consumer
	// forgets its records.
	atLimit := make([]bool, len(records))
	for i, r := range records {
		n, ok := in.cons.DeliveryCount(r)
		if ok && n > 1 {
			in.pool.stats.redelivered.Add(1)
		}
		atLimit[i] = ok && int(n) >= in.pool.cfg.DeliveryLimit
	}
	for len(records) > 0 {
		n := min(len(records), in.pool.cfg.TxnSize)
		committed, err := in.transact(ctx, records[:n])
		if !committed {
			// A killed instance leaves the rest of its poll behind too.
			failed := n
			if errors.Is(err, errKilled) {
				failed = len(records)
			}
			in.noteArchived(records[:failed], atLimit[:failed])
		}
		if err != nil {
			return err
		}
		records, atLimit = records[n:], atLimit[n:]
	}
	return nil
}

// noteArchived records the ids of records whose transaction failed at the
// group's delivery limit: the broker archives them.
func (in *instance) noteArchived(records []*kgo.Record, atLimit []bool) {
	for i, r := range records {
		if atLimit[i] {
			in.pool.stats.archived.Store(string(r.Value), struct{}{})
		}
	}
}

// transact copies records to the output in one transaction together with
// their acknowledgements, and reports whether it committed.
func (in *instance) transact(ctx context.Context, records []*kgo.Record) (committed bool, err error) {
	in.txns++
	if err := in.prod.BeginTransaction(); err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	for i, r := range records {
		if i == len(records)/2 && in.pool.kill.CompareAndSwap(true, false) {
			in.pool.stats.fault("worker_killed_mid_transaction")
			in.log.Info("fault: killing worker in the middle of a transaction")
			return false, errKilled
		}
		in.prod.Produce(ctx, &kgo.Record{Topic: in.pool.cfg.Output, Key: r.Key, Value: r.Value}, nil)
	}
	acks := in.cons.Acks(records, wire.AckAccept)
	if hold := in.pool.cfg.TxnHold; hold > 0 {
		if err := in.prod.Flush(ctx); err != nil {
			in.log.Info("flush failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(hold):
		}
	}
	if in.pool.slow.CompareAndSwap(true, false) {
		in.pool.stats.fault("slow_worker_lock_expired")
		in.log.Info("fault: slow worker waits past its locks")
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(in.pool.cfg.LockDuration + time.Second):
		}
	}
	err = in.prod.SendShareAcksToTransaction(ctx, acks, in.cons.GroupMetadata())
	abortOnPurpose := in.pool.cfg.Faults.AbortEvery > 0 && in.txns%in.pool.cfg.Faults.AbortEvery == 0
	if err == nil && !abortOnPurpose {
		start := time.Now()
		if err = in.prod.CommitTransaction(ctx); err == nil {
			in.pool.stats.commitLatency(time.Since(start))
			in.pool.stats.committed.Add(1)
			return true, nil
		}
	}
	in.pool.stats.aborted.Add(1)
	switch {
	case err == nil:
		in.pool.stats.fault("deliberate_abort")
	case errors.Is(err, txnclient.ErrFatal):
		return false, fmt.Errorf("transaction: %w", err)
	default:
		in.log.Info("transaction failed; aborting", "err", err)
	}
	if aerr := in.prod.AbortTransaction(ctx); aerr != nil && ctx.Err() == nil {
		return false, fmt.Errorf("abort: %w", aerr)
	}
	return false, nil
}
