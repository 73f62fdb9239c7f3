package misuse_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// txnFixture is a transactional consumer holding polled records and a
// producer, on a cluster with topics "in" (the records) and "out".
type txnFixture struct {
	e    *env
	c    *shareconsumer.Consumer
	p    *producer.Producer
	recs []*kgo.Record
}

func newTxnFixture(t *testing.T, inputs ...string) *txnFixture {
	ctx := testCtx(t)
	e := newEnv(t)
	e.Topic(ctx, t, "in", 1)
	e.Topic(ctx, t, "out", 1)
	e.Input(ctx, t, "in", inputs...)
	c := e.consumer(t, "g", "in", shareconsumer.Transactional)
	recs := appenv.PollN(ctx, t, c, len(inputs))
	return &txnFixture{e: e, c: c, p: e.Producer(ctx, t, "ctp"), recs: recs}
}

// F12 (exactly-once): SendShareAcksToTransaction with a nil context
// returns ErrUsage and dooms the transaction, as every failure but
// ErrUnsupported and ErrClosed does ("which must not commit without
// them"). It used to leave the transaction committable: the commit
// published the outputs while the inputs stayed unacknowledged, so they
// were delivered and processed again, and their outputs appeared twice.
func TestSendShareAcksWithNilContextDoomsTheTransaction(t *testing.T) {
	f := newTxnFixture(t, "a")
	ctx := testCtx(t)
	require.NoError(t, f.p.BeginTransaction())
	require.NoError(t, f.p.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: []byte("out-a")}).FirstErr())
	//nolint:staticcheck // a nil context is the misuse under test
	requireClass(t, kshare.ErrUsage, f.p.SendShareAcksToTransaction(nil, f.c.Acks(f.recs, kshare.AckAccept), f.c.GroupMetadata()),
		"SendShareAcksToTransaction(nil ctx)")
	err := f.p.CommitTransaction(ctx)
	if err == nil {
		t.Errorf("the transaction committed its output %v without the acknowledgement of its input (start offset %d): the input is delivered again",
			f.e.CommittedValues(ctx, t, "out"), f.e.startOffset(ctx, t, "g", "in"))
		return
	}
	requireClass(t, kshare.ErrAbortable, err, "commit after a failed SendShareAcksToTransaction")
}

// F13 (exactly-once): SendOffsetsToTransaction with a nil context returns
// ErrUsage and dooms the transaction ("Any failure dooms the transaction,
// which must not commit without the offsets"). It used to leave it
// committable, so the outputs committed without the consumer-group
// offsets and a worker reprocessed those inputs after a restart.
func TestSendOffsetsWithNilContextDoomsTheTransaction(t *testing.T) {
	f := newTxnFixture(t, "a")
	ctx := testCtx(t)
	require.NoError(t, f.p.BeginTransaction())
	require.NoError(t, f.p.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: []byte("out-a")}).FirstErr())
	offsets := map[string]map[int32]kgo.EpochOffset{"in": {0: {Offset: 1, Epoch: -1}}}
	//nolint:staticcheck // a nil context is the misuse under test
	requireClass(t, kshare.ErrUsage, f.p.SendOffsetsToTransaction(nil, offsets, producer.GroupMetadata{GroupID: "cg", Generation: -1}),
		"SendOffsetsToTransaction(nil ctx)")
	err := f.p.CommitTransaction(ctx)
	require.Error(t, err, "the transaction committed its output without its offsets")
	requireClass(t, kshare.ErrAbortable, err, "commit after a failed SendOffsetsToTransaction")
}

// F14 (exactly-once): a record that Produce refuses as a usage error
// during a transaction (no topic, nil context, nil record) dooms the
// transaction, as every record failure does (docs/design.md): the
// application meant the record to be part of it. Before the fix, a
// worker written as the package documentation shows it (Produce with a
// nil promise, then SendShareAcksToTransaction and CommitTransaction)
// committed the input's acknowledgement without its output, and the
// input was lost. The promise still hears ErrUsage; the calls after it
// hear that the transaction cannot commit (ErrAbortable).
func TestRefusedRecordDoomsTheTransaction(t *testing.T) {
	for name, produce := range map[string]func(p *producer.Producer, promise func(*kgo.Record, error)){
		"no topic": func(p *producer.Producer, promise func(*kgo.Record, error)) {
			p.Produce(testCtx(t), &kgo.Record{Value: []byte("out-a")}, promise)
		},
		"nil context": func(p *producer.Producer, promise func(*kgo.Record, error)) {
			//nolint:staticcheck // a nil context is the misuse under test
			p.Produce(nil, &kgo.Record{Topic: "out", Value: []byte("out-a")}, promise)
		},
		"nil record": func(p *producer.Producer, promise func(*kgo.Record, error)) {
			p.Produce(testCtx(t), nil, promise)
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newTxnFixture(t, "a")
			ctx := testCtx(t)
			require.NoError(t, f.p.BeginTransaction())
			var refused error
			produce(f.p, func(_ *kgo.Record, err error) { refused = err })
			requireClass(t, kshare.ErrUsage, refused, "the refused record's promise")
			if err := f.p.SendShareAcksToTransaction(ctx, f.c.Acks(f.recs, kshare.AckAccept), f.c.GroupMetadata()); err != nil {
				requireClass(t, kshare.ErrAbortable, err, "SendShareAcksToTransaction in a transaction a refused record doomed")
			}
			err := f.p.CommitTransaction(ctx)
			if err == nil {
				t.Fatalf("committed: input acknowledged (share start offset %d), outputs %q", f.e.startOffset(ctx, t, "g", "in"),
					f.e.CommittedValues(ctx, t, "out"))
			}
			requireClass(t, kshare.ErrAbortable, err, "commit after a refused record")
			require.NoError(t, f.p.AbortTransaction(ctx))
			require.Zero(t, f.e.startOffset(ctx, t, "g", "in"), "nothing was acknowledged")
		})
	}
}
