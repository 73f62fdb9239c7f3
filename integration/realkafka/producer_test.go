package realkafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/integration/kafkatest"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/wire"
)

// writtenKeys is a kgo hook that records the API key of every request the
// client writes, to prove what was (not) sent.
type writtenKeys struct {
	mu   sync.Mutex
	keys map[int16]int
}

func (w *writtenKeys) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys == nil {
		w.keys = make(map[int16]int)
	}
	w.keys[key]++
}

func (w *writtenKeys) count(key int16) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys[key]
}

func newProducer(ctx context.Context, t *testing.T, seeds []string, txnID string, opts ...producer.Opt) *producer.Producer {
	t.Helper()
	p, err := producer.New(append([]producer.Opt{producer.SeedBrokers(seeds...), producer.TransactionalID(txnID)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(closeCtx)
	})
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeSentinels writes value to every partition of topic, outside any
// transaction, so that a read_committed reader knows when it has read all.
func writeSentinels(ctx context.Context, t *testing.T, seeds []string, topic string, partitions int32, value string) {
	t.Helper()
	cl := testkit.Client(t, seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range partitions {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(value)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// The SDK's transactional producer on real Kafka (TV2): commits and aborts
// interleaved, checked by a read_committed reader.
func TestProducerCommitsAndAbortsOnRealKafka(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const partitions = 3
	topic := uniqueName(t, "kshare-producer")
	testkit.CreateTopic(ctx, t, testkit.Client(t, seeds), topic, partitions)
	p := newProducer(ctx, t, seeds, uniqueName(t, "kshare-txn"))
	if !p.Status().TV2 {
		t.Fatal("Kafka 4.x finalizes transaction.version=2; the producer should run TV2")
	}
	want := make(map[string]bool)
	for i := range 6 {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for j := range 50 {
			recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "t%d-r%02d", i, j)})
		}
		if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := p.CommitTransaction(ctx); err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				want[string(r.Value)] = true
			}
		} else if err := p.AbortTransaction(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const sentinel = "\x00end"
	writeSentinels(ctx, t, seeds, topic, partitions, sentinel)
	reader := testkit.Client(t, seeds, consumeFromStart(topic, partitions), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := make(map[string]bool)
	for _, vals := range readUntilSentinels(ctx, t, reader, partitions, sentinel) {
		for _, v := range vals {
			if got[v] {
				t.Errorf("duplicate %s", v)
			}
			got[v] = true
		}
	}
	if len(got) != len(want) {
		t.Fatalf("read_committed saw %d records, want the %d committed ones", len(got), len(want))
	}
	for v := range want {
		if !got[v] {
			t.Errorf("committed record %s missing", v)
		}
	}
	if m := p.Metrics(); m.TransactionsCommitted != 3 || m.TransactionsAborted != 3 {
		t.Errorf("metrics %+v", m)
	}
}

// Consumer-group offsets committed through the producer (TV2: TxnOffsetCommit
// straight to the group coordinator) become visible only on commit.
func TestProducerSendOffsetsOnRealKafka(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	topic, group := uniqueName(t, "kshare-offsets"), uniqueName(t, "kshare-group")
	testkit.CreateTopic(ctx, t, testkit.Client(t, seeds), topic, 1)
	consumer := testkit.Client(t, seeds, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(200*time.Millisecond))
	var member string
	var gen int32
	for member == "" || gen <= 0 {
		pollCtx, pollCancel := context.WithTimeout(ctx, 500*time.Millisecond)
		consumer.PollFetches(pollCtx)
		pollCancel()
		if ctx.Err() != nil {
			t.Fatal("the consumer never joined its group")
		}
		member, gen = consumer.GroupMetadata()
	}
	p := newProducer(ctx, t, seeds, uniqueName(t, "kshare-offsets-txn"))
	meta := producer.GroupMetadata{GroupID: group, MemberID: member, Generation: gen}
	for _, c := range []struct {
		at     int64
		commit bool
	}{{7, true}, {11, false}} {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		offsets := map[string]map[int32]kgo.EpochOffset{topic: {0: {Epoch: -1, Offset: c.at}}}
		if err := p.SendOffsetsToTransaction(ctx, offsets, meta); err != nil {
			t.Fatal(err)
		}
		if c.commit {
			err := p.CommitTransaction(ctx)
			if err != nil {
				t.Fatal(err)
			}
		} else if err := p.AbortTransaction(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fetched, err := kadm.NewClient(testkit.Client(t, seeds)).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fetched.Lookup(topic, 0); !ok || o.At != 7 {
		t.Fatalf("committed offset %+v (found %v), want 7", o, ok)
	}
}

// Real Kafka has no KIP-1289 APIs: SendShareAcksToTransaction fails fast
// with ErrUnsupported saying what the broker lacks, sends nothing,
// and the transaction still commits.
func TestShareAcksUnsupportedOnRealKafka(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	topic := uniqueName(t, "kshare-noacks")
	testkit.CreateTopic(ctx, t, testkit.Client(t, seeds), topic, 1)
	hook := &writtenKeys{}
	p := newProducer(ctx, t, seeds, uniqueName(t, "kshare-noacks-txn"), producer.KgoOpts(kgo.WithHooks(hook)))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	acks := acktrack.New(nil)
	acks.Add(topic, [16]byte{}, 0, acktrack.Record{Offset: 0, Type: int8(kshare.AckAccept)})
	start := time.Now()
	err := p.SendShareAcksToTransaction(ctx, (*kshare.ShareAcks)(acks), kshare.ShareGroupMetadata{GroupID: "g", MemberID: "m", MemberEpoch: 1})
	if !errors.Is(err, kshare.ErrUnsupported) || errors.Is(err, kshare.ErrFatal) {
		t.Fatalf("got %v, want ErrUnsupported (and not ErrFatal)", err)
	}
	for _, lack := range []string{"API key 95 (TxnShareAcknowledge) not advertised", "share.version"} {
		if !strings.Contains(err.Error(), lack) {
			t.Errorf("%q does not say %q", err, lack)
		}
	}
	t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if n := hook.count(wire.TxnShareAcknowledgeKey); n != 0 {
		t.Fatalf("%d KIP-1289 requests were sent", n)
	}
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatalf("the transaction should be unchanged and commit: %v", err)
	}
}

// A second producer with the same transactional id fences the first on
// real Kafka too: ErrFatal with PRODUCER_FENCED, and the open transaction
// is aborted.
func TestZombieFencedOnRealKafka(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	topic, txnID := uniqueName(t, "kshare-zombie"), uniqueName(t, "kshare-zombie-txn")
	testkit.CreateTopic(ctx, t, testkit.Client(t, seeds), topic, 1)
	zombie := newProducer(ctx, t, seeds, txnID)
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("zombie")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	successor := newProducer(ctx, t, seeds, txnID)
	err := zombie.CommitTransaction(ctx)
	var ke *kerr.Error
	if !errors.Is(err, kshare.ErrFatal) || !errors.As(err, &ke) || ke != kerr.ProducerFenced {
		t.Fatalf("got %v, want ErrFatal caused by PRODUCER_FENCED", err)
	}
	if err := successor.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := successor.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("successor")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := successor.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	const sentinel = "\x00end"
	writeSentinels(ctx, t, seeds, topic, 1, sentinel)
	reader := testkit.Client(t, seeds, consumeFromStart(topic, 1), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := readUntilSentinels(ctx, t, reader, 1, sentinel)[0]
	if len(got) != 1 || got[0] != "successor" {
		t.Fatalf("read_committed saw %q, want only the successor's record", got)
	}
}
