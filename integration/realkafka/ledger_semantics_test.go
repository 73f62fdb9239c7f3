package realkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/integration/kafkatest"
	"github.com/kshare-go/kshare/internal/testkit"
)

// The tests of this file establish the two properties of Apache Kafka
// that exactly-once without KIP-1289 (docs/design.md, "Exactly-once
// without KIP-1289") builds on, besides the share-group semantics of
// share_semantics_test.go: an acks=all write is below the high watermark
// when its answer arrives, and a read_committed reader does not pass a
// transaction that is still open. Both run on the two-node cluster, on a
// topic with two replicas, as a claim ledger is.

// listOffset asks the partition's leader for offset 0's latest offset of
// topic at the given isolation level (0 read_uncommitted: the high
// watermark; 1 read_committed: the last stable offset).
func listOffset(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, isolation int8) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = 0, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && (len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1) {
		t.Fatalf("ListOffsets of %s: %d topics in the answer", topic, len(resp.Topics))
	}
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("ListOffsets of %s: %v", topic, err)
	}
	return resp.Topics[0].Partitions[0].Offset
}

// An acks=all write's answer comes only once the high watermark passed the
// record: a reader that lists the latest offset after it sees the record
// below it. (A claim written before a record is handed to another member
// is thus below the mark that member reads the ledger up to.)
func TestKafkaAcksAllIsBelowTheHighWatermark(t *testing.T) {
	two := kafkatest.Bootstrap2(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	admin := testkit.Client(t, two.Seeds)
	topic := uniqueName(t, "kshare-ledger-hwm")
	semTopicOn(ctx, t, admin, topic, 1, 2)
	prod := testkit.Client(t, two.Seeds, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	const writes = 200
	for i := range writes {
		r := &kgo.Record{Value: []byte("claim")}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if hwm := listOffset(ctx, t, admin, topic, 0); hwm <= r.Offset {
			t.Fatalf("write %d at offset %d answered, high watermark %d: the record is not below it", i, r.Offset, hwm)
		}
	}
	t.Logf("%d acks=all writes, each below the high watermark when its answer came", writes)
}

// A transaction that is still open holds the last stable offset at its
// first record: a read_committed fetch returns nothing from there on, even
// what other producers committed after it, until the transaction ends;
// after its abort the reader passes the high watermark it saw, without
// the aborted record.
func TestKafkaReadCommittedWaitsForAnOpenTransaction(t *testing.T) {
	two := kafkatest.Bootstrap2(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	admin := testkit.Client(t, two.Seeds)
	topic := uniqueName(t, "kshare-ledger-lso")
	semTopicOn(ctx, t, admin, topic, 1, 2)
	opts := []kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())}
	open := testkit.Client(t, two.Seeds, append(opts, kgo.TransactionalID(uniqueName(t, "kshare-ledger-open")))...)
	other := testkit.Client(t, two.Seeds, opts...)

	if err := other.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	claim := &kgo.Record{Value: []byte("open claim")}
	if err := open.ProduceSync(ctx, claim).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	hwm := listOffset(ctx, t, admin, topic, 0)
	if lso := listOffset(ctx, t, admin, topic, 1); lso != claim.Offset {
		t.Fatalf("last stable offset %d with a transaction open at %d", lso, claim.Offset)
	}

	reader := testkit.Client(t, two.Seeds, kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	read := func(until time.Duration) []string {
		fctx, cancel := context.WithTimeout(ctx, until)
		defer cancel()
		var got []string
		for fctx.Err() == nil {
			reader.PollFetches(fctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		return got
	}
	// Three of the reader's fetches, each of which would return "after" if
	// the open transaction did not hold the reader back.
	if got := read(time.Second); len(got) != 1 || got[0] != "before" {
		t.Fatalf("read_committed with a transaction open: %q, want only %q", got, "before")
	}
	if err := open.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(ctx, t, "the last stable offset passes the aborted transaction", func() bool {
		return listOffset(ctx, t, admin, topic, 1) >= hwm
	})
	var after []string
	for len(after) == 0 {
		reader.PollFetches(ctx).EachRecord(func(r *kgo.Record) { after = append(after, string(r.Value)) })
		if ctx.Err() != nil {
			t.Fatal("the reader got nothing after the abort")
		}
	}
	if len(after) != 1 || after[0] != "after" {
		t.Fatalf("read_committed after the abort: %q, want only %q", after, "after")
	}
}
