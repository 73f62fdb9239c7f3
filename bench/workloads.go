package main

// Single-client workloads: kgo's produce, consume, transactional produce
// and share consume (run on both brokers), and the kshare producer and
// share consumer against their kgo counterparts (bundled broker).

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// loadSpec is one single-client workload.
type loadSpec struct {
	topic      string
	partitions int
	records    int
	valueSize  int
	txnSize    int // transactional produce: records per transaction
	timeout    time.Duration
}

// clock times one workload: from start (or from the first records a reader
// got) to stop (or to the workload's return).
type clock struct {
	records, counted int
	start, end       time.Time
	meter            allocMeter
	allocs, bytes    float64
}

// first restarts the clock at a reader's first non-empty poll of n
// records, so that joining a group and the first fetch's latency stay out
// of the rate.
func (c *clock) first(n int) {
	if c.counted == c.records && n < c.records {
		c.start, c.counted, c.meter = time.Now(), c.records-n, startAllocs()
	}
}

// stop stops the clock: the work is done, what follows (closing clients)
// is not counted.
func (c *clock) stop() {
	if c.end.IsZero() {
		c.end = time.Now()
		c.allocs, c.bytes = c.meter.per(c.counted)
	}
}

// timed runs fn and measures its rate over records, with the allocations
// of this process (the clients') and the broker's CPU and heap growth per
// record.
func timed(e *env, records int, fn func(c *clock) error) (sample, error) {
	before, err := e.b.stats() // also collects the previous run's garbage there
	if err != nil {
		return sample{}, err
	}
	runtime.GC()
	cpu0 := cpuNanos()
	c := &clock{records: records, counted: records, meter: startAllocs(), start: time.Now()}
	if err := fn(c); err != nil {
		return sample{}, err
	}
	c.stop()
	clientCPU := cpuNanos() - cpu0
	elapsed := c.end.Sub(c.start)
	s := sample{Records: c.counted, Seconds: elapsed.Seconds(), Rate: float64(c.counted) / elapsed.Seconds()}
	s.Allocs, s.AllocBytes = c.allocs, c.bytes
	s.ClientCPU = float64(clientCPU) / float64(records) // clients' set-up and close included
	after, err := e.b.stats()
	if err != nil {
		return sample{}, err
	}
	s.BrokerCPU = float64(after.cpu-before.cpu) / float64(records) // ns per record, the stats' own GC included
	s.BrokerHeap = (float64(after.heap) - float64(before.heap)) / float64(records)
	return s, nil
}

// kgoProduce writes spec.records records with kgo's idempotent producer
// (acks all, its defaults otherwise); the rate counts until every record
// is acknowledged.
func kgoProduce(ctx context.Context, e *env, s loadSpec) (sample, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...), kgo.DefaultProduceTopic(s.topic))
	if err != nil {
		return sample{}, err
	}
	defer cl.Close()
	if err := warmProducer(ctx, cl, s.topic); err != nil {
		return sample{}, err
	}
	return timed(e, s.records, func(c *clock) error {
		var failed firstErr
		for i := range s.records {
			cl.Produce(ctx, &kgo.Record{Key: recordKey(i), Value: value(i, s.valueSize)}, failed.promise)
		}
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		return failed.err()
	})
}

// warmProducer loads metadata and a producer id before the clock starts,
// with one record more in topic (readers read the first records).
func warmProducer(ctx context.Context, cl *kgo.Client, topic string) error {
	if _, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("w")}).First(); err != nil {
		return fmt.Errorf("warm-up produce: %w", err)
	}
	return nil
}

// kgoTxnProduce writes spec.records records with kgo's transactional
// producer, spec.txnSize per transaction.
func kgoTxnProduce(ctx context.Context, e *env, s loadSpec) (sample, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...), kgo.DefaultProduceTopic(s.topic),
		kgo.TransactionalID(e.name("kgo-txn")))
	if err != nil {
		return sample{}, err
	}
	defer cl.Close()
	run := func(records int) error {
		var failed firstErr
		for done := 0; done < records; {
			n := min(s.txnSize, records-done)
			if err := cl.BeginTransaction(); err != nil {
				return err
			}
			for i := range n {
				cl.Produce(ctx, &kgo.Record{Key: recordKey(done + i), Value: value(done+i, s.valueSize)}, failed.promise)
			}
			if err := cl.Flush(ctx); err != nil {
				return err
			}
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				return err
			}
			if err := failed.err(); err != nil {
				return err
			}
			done += n
		}
		return nil
	}
	if err := run(1); err != nil { // warm-up: coordinator, producer id
		return sample{}, fmt.Errorf("warm-up transaction: %w", err)
	}
	return timed(e, s.records, func(c *clock) error { return run(s.records) })
}

// kshareTxnProduce is kgoTxnProduce with the kshare producer.
func kshareTxnProduce(ctx context.Context, e *env, s loadSpec) (sample, error) {
	p, err := producer.New(producer.SeedBrokers(e.seeds()...), producer.TransactionalID(e.name("ks-txn")))
	if err != nil {
		return sample{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		p.Close(cctx)
	}()
	if err := p.InitTransactions(ctx); err != nil {
		return sample{}, err
	}
	run := func(records int) error {
		for done := 0; done < records; {
			n := min(s.txnSize, records-done)
			if err := p.BeginTransaction(); err != nil {
				return err
			}
			for i := range n {
				// A record that fails fails the commit.
				p.Produce(ctx, &kgo.Record{Topic: s.topic, Key: recordKey(done + i), Value: value(done+i, s.valueSize)}, nil)
			}
			if err := p.CommitTransaction(ctx); err != nil {
				return err
			}
			done += n
		}
		return nil
	}
	if err := run(1); err != nil {
		return sample{}, fmt.Errorf("warm-up transaction: %w", err)
	}
	return timed(e, s.records, func(c *clock) error { return run(s.records) })
}

// kgoConsume reads the topic's first spec.records records with kgo's
// consumer (no group, from the start).
func kgoConsume(ctx context.Context, e *env, s loadSpec) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return timed(e, s.records, func(c *clock) error {
		// Created on the clock: a consumer starts fetching at once.
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...), kgo.ConsumeTopics(s.topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			return err
		}
		defer cl.Close()
		return readAll(ctx, c, s.records, func(ctx context.Context) (int, error) {
			fs := cl.PollFetches(ctx)
			return fs.NumRecords(), fetchErr(fs)
		})
	})
}

// kgoShareConsume reads spec.records records with kgo's share consumer in
// a fresh group (a poll's records are accepted by the next poll).
func kgoShareConsume(ctx context.Context, e *env, s loadSpec) (sample, error) {
	return shareRead(ctx, e, s, "kgo-share", func(ctx context.Context, group string, c *clock) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...), kgo.ShareGroup(group), kgo.ConsumeTopics(s.topic),
			kgo.ShareMaxRecords(500))
		if err != nil {
			return err
		}
		defer cl.Close()
		return readAll(ctx, c, s.records, func(ctx context.Context) (int, error) {
			fs := cl.PollFetches(ctx)
			return fs.NumRecords(), fetchErr(fs)
		})
	})
}

// kshareShareConsume is kgoShareConsume with the kshare share consumer in
// Implicit mode (which also accepts a poll's records on the next poll).
func kshareShareConsume(ctx context.Context, e *env, s loadSpec) (sample, error) {
	return shareRead(ctx, e, s, "ks-share", func(ctx context.Context, group string, c *clock) error {
		cons, err := shareconsumer.New(shareconsumer.SeedBrokers(e.seeds()...), shareconsumer.Group(group),
			shareconsumer.Topics(s.topic), shareconsumer.MaxPollRecords(500))
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			defer cancel()
			cons.Close(cctx)
		}()
		return readAll(ctx, c, s.records, func(ctx context.Context) (int, error) {
			recs, err := cons.Poll(ctx)
			return len(recs), err
		})
	})
}

// shareRead times read, which reads s.records records as a member of a
// fresh share group (named after prefix) that starts at the earliest
// offset, within s.timeout.
func shareRead(ctx context.Context, e *env, s loadSpec, prefix string, read func(ctx context.Context, group string, c *clock) error) (sample, error) {
	group := e.name(prefix)
	if err := e.shareGroupFromStart(ctx, group); err != nil {
		return sample{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return timed(e, s.records, func(c *clock) error { return read(ctx, group, c) })
}

// readAll polls until records have been read, restarting the clock at the
// first records and stopping it at the last.
func readAll(ctx context.Context, c *clock, records int, poll func(context.Context) (int, error)) error {
	for n := 0; n < records; {
		got, err := poll(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %d of %d records read", errTimeout, n, records)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			c.first(got)
		}
		n += got
	}
	c.stop()
	return nil
}
