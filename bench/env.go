package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// env is one broker child and an admin client of it.
type env struct {
	b     *brokerProc
	cl    *kgo.Client
	admin *kadm.Client
	seq   atomic.Int64 // for unique topic and group names
}

func newEnv(kind string, nodes, partitions int, cpuProfile string) (*env, error) {
	b, err := startBroker(kind, nodes, partitions, cpuProfile)
	if err != nil {
		return nil, err
	}
	return newEnvOf(b)
}

// newExternalEnv is the env of a cluster this command did not start (an
// Apache Kafka at seeds): no broker statistics.
func newExternalEnv(seeds []string) (*env, error) {
	return newEnvOf(&brokerProc{kind: "external", seeds: seeds})
}

func newEnvOf(b *brokerProc) (*env, error) {
	// Inputs are written in batches of at most 16 KiB, the Java
	// producer's default batch.size: kgo's default (1 MB) makes batches of
	// thousands of records, more than a share-partition's default record
	// locks (2000), which share consumers then acquire whole, one at a time.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1<<20), kgo.ProducerBatchMaxBytes(16<<10))
	if err != nil {
		b.close()
		return nil, err
	}
	return &env{b: b, cl: cl, admin: kadm.NewClient(cl)}, nil
}

func (e *env) close() error {
	e.cl.Close()
	return e.b.close()
}

func (e *env) seeds() []string { return e.b.seeds }

// name returns a fresh name with prefix.
func (e *env) name(prefix string) string { return fmt.Sprintf("%s-%d", prefix, e.seq.Add(1)) }

// createTopic creates topic and waits until every node's metadata has it.
func (e *env) createTopic(ctx context.Context, topic string, partitions int) error {
	resp, err := e.admin.CreateTopic(ctx, int32(partitions), 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		md, err := e.admin.Metadata(ctx, topic)
		if err == nil {
			if t, ok := md.Topics[topic]; ok && t.Err == nil && len(t.Partitions) == partitions {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s not in metadata after 10s", topic)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// deleteTopics deletes topics (their memory goes back to the broker).
func (e *env) deleteTopics(ctx context.Context, topics ...string) error {
	resp, err := e.admin.DeleteTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("delete topics %v: %w", topics, err)
	}
	return resp.Error()
}

// shareGroupFromStart makes a share group read from the log start.
func (e *env) shareGroupFromStart(ctx context.Context, group string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for _, kv := range [][2]string{
		{"share.auto.offset.reset", "earliest"},
		// The most records a share-partition hands out at once: with
		// Kafka's 2000, four consumers that each prefetch from every
		// leader (kgo's share consumer does) fill a partition's window
		// and wait for their own acknowledgements; the bench measures
		// throughput, not that wait.
		{"share.partition.max.record.locks", "4000"},
	} {
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Value = kv[0], kmsg.StringPtr(kv[1])
		res.Configs = append(res.Configs, cfg)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, e.cl)
	if err != nil {
		return fmt.Errorf("group config of %s: %w", group, err)
	}
	if len(resp.Resources) != 1 {
		return fmt.Errorf("group config of %s: %d resources answered", group, len(resp.Resources))
	}
	if err := kerr.ErrorForCode(resp.Resources[0].ErrorCode); err != nil {
		return fmt.Errorf("group config of %s: %w", group, err)
	}
	return nil
}

// recordKey is the key of input record i: its index, so that pipelines can
// tell which inputs they have processed.
func recordKey(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }

// keyIndex is the inverse of recordKey; -1 for a key it did not make.
func keyIndex(k []byte) int {
	if len(k) != 8 {
		return -1
	}
	return int(binary.BigEndian.Uint64(k))
}

// fillInput writes n records of size-byte values to topic, round-robin over
// its partitions, keyed by index. With batch > 0 every record batch holds
// at most batch records (one synchronous produce each), as a producer
// writing slowly makes them; otherwise the producer batches as it likes
// (large batches: a backlog written at full speed).
func (e *env) fillInput(ctx context.Context, topic string, partitions, n, size, batch int) error {
	if batch > 0 {
		for first := 0; first < n; first += batch * partitions {
			var recs []*kgo.Record
			for i := first; i < min(n, first+batch*partitions); i++ {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Key: recordKey(i), Value: value(i, size)})
			}
			if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				return fmt.Errorf("filling %s: %w", topic, err)
			}
		}
		return nil
	}
	var failed firstErr
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: int32(i % partitions), Key: recordKey(i), Value: value(i, size)}
		e.cl.Produce(ctx, r, failed.promise)
	}
	if err := e.cl.Flush(ctx); err != nil {
		return err
	}
	if err := failed.err(); err != nil {
		return fmt.Errorf("filling %s: %w", topic, err)
	}
	return nil
}

// valuePool is random bytes that values are cut from: records that do not
// compress, so that compression neither hides nor adds broker memory and
// work, whatever the producer's codec.
var valuePool = func() []byte {
	b := make([]byte, 4<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}()

// value returns record i's value of size bytes (at most 64 KiB), a slice
// of valuePool that is not to be modified. Neighbouring records start at
// unrelated offsets, so a batch of them does not compress either.
func value(i, size int) []byte {
	off := (i * 7919 * 64) % (len(valuePool) - size)
	return valuePool[off : off+size : off+size]
}

// seen records which input indexes a pipeline committed, and how many
// were committed more than once.
type seen struct {
	n     int
	bits  []atomic.Uint64
	dups  atomic.Int64
	count atomic.Int64
}

func newSeen(n int) *seen { return &seen{n: n, bits: make([]atomic.Uint64, (n+63)/64)} }

// mark records input i; it reports whether i was new.
func (s *seen) mark(i int) bool {
	if i < 0 || i >= s.n {
		s.dups.Add(1) // not an input of this run: count it as wrong
		return false
	}
	w, bit := &s.bits[i/64], uint64(1)<<(i%64)
	for {
		old := w.Load()
		if old&bit != 0 {
			s.dups.Add(1)
			return false
		}
		if w.CompareAndSwap(old, old|bit) {
			s.count.Add(1)
			return true
		}
	}
}

// firstErr keeps the first error that record promises report.
type firstErr struct{ p atomic.Pointer[error] }

// promise is a produce promise that keeps the first failure.
func (f *firstErr) promise(_ *kgo.Record, err error) {
	if err != nil {
		f.p.CompareAndSwap(nil, &err)
	}
}

// err returns the first failure, or nil.
func (f *firstErr) err() error {
	if p := f.p.Load(); p != nil {
		return *p
	}
	return nil
}

// errTimeout is a run that did not finish in its time.
var errTimeout = errors.New("run did not finish in time")
