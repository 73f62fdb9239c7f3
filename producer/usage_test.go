package producer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/txn"
)

func TestNewRejectsBadOptions(t *testing.T) {
	for name, opts := range map[string][]Opt{
		"no seeds":        {TransactionalID("x")},
		"no id":           {SeedBrokers("127.0.0.1:1")},
		"nil option":      {SeedBrokers("127.0.0.1:1"), TransactionalID("x"), nil},
		"negative linger": {SeedBrokers("127.0.0.1:1"), TransactionalID("x"), Linger(-time.Second)},
		"tiny batches":    {SeedBrokers("127.0.0.1:1"), TransactionalID("x"), BatchMaxBytes(10)},
		"no buffer":       {SeedBrokers("127.0.0.1:1"), TransactionalID("x"), MaxBufferedRecords(0)},
		"zero timeout":    {SeedBrokers("127.0.0.1:1"), TransactionalID("x"), TransactionTimeout(0)},
		"sub-ms timeout":  {SeedBrokers("127.0.0.1:1"), TransactionalID("x"), TransactionTimeout(999 * time.Microsecond)},
		"nil kgo option":  {SeedBrokers("127.0.0.1:1"), TransactionalID("x"), KgoOpts(kgo.ClientID("x"), nil)},
		"bad seed":        {SeedBrokers("::::"), TransactionalID("x")},
		"empty seed":      {SeedBrokers(""), TransactionalID("x")},
		"nil partitioner": {SeedBrokers("127.0.0.1:1"), TransactionalID("x"), Partitioner(nil)},
		"no in-flight":    {SeedBrokers("127.0.0.1:1"), TransactionalID("x"), MaxInflightPerBroker(0)},
	} {
		_, err := New(opts...)
		require.ErrorIs(t, err, kshare.ErrUsage, name)
	}
}

// Records outside a transaction fail with ErrUsage and change nothing;
// records without a topic, or nil, fail with ErrUsage and doom their
// transaction (the application meant them to be part of it); a record
// larger than a batch fails with ErrAbortable (MESSAGE_TOO_LARGE) and
// dooms the transaction.
func TestProduceErrors(t *testing.T) {
	c := newCluster(t)
	createTopic(t, c, "usage", 1)
	p := newProducer(t, c, "usage-txn", BatchMaxBytes(1024))
	ctx := testCtx(t)
	res := p.ProduceSync(ctx, &kgo.Record{Topic: "usage", Value: []byte("early")})
	require.ErrorIs(t, res.FirstErr(), kshare.ErrUsage, "no transaction yet")
	require.Equal(t, txn.StateReady, p.txn.State())

	for _, r := range []*kgo.Record{{Value: []byte("no topic")}, nil} {
		require.NoError(t, p.BeginTransaction())
		require.ErrorIs(t, p.ProduceSync(ctx, r).FirstErr(), kshare.ErrUsage)
		require.Equal(t, txn.StateAbortableError, p.txn.State(), "a refused record dooms its transaction")
		require.ErrorIs(t, p.CommitTransaction(ctx), kshare.ErrAbortable)
		require.NoError(t, p.AbortTransaction(ctx))
	}

	require.NoError(t, p.BeginTransaction())
	err := p.ProduceSync(ctx, &kgo.Record{Topic: "usage", Value: make([]byte, 2000)}).FirstErr()
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.ErrorIs(t, err, kerr.MessageTooLarge)
	require.ErrorIs(t, p.CommitTransaction(ctx), kshare.ErrAbortable, "a failed record dooms the commit")
	require.NoError(t, p.AbortTransaction(ctx))

	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.ProduceSync(ctx, &kgo.Record{Topic: "usage", Value: []byte("fine")}).FirstErr())
	require.NoError(t, p.CommitTransaction(ctx))
	require.Len(t, readCommitted(t, c, "usage", 1), 1)

	require.NoError(t, p.Close(ctx))
	require.ErrorIs(t, p.BeginTransaction(), kshare.ErrClosed, "closed")
	require.ErrorIs(t, p.ProduceSync(ctx, &kgo.Record{Topic: "usage"}).FirstErr(), kshare.ErrClosed)
}

// A transaction timeout above the broker's maximum is a fatal
// configuration error at InitTransactions.
func TestTransactionTimeoutAboveBrokerMax(t *testing.T) {
	c := newCluster(t, broker.MaxTransactionTimeout(5*time.Second))
	p, err := New(SeedBrokers(c.Bootstrap()...), TransactionalID("too-long"), TransactionTimeout(10*time.Second))
	require.NoError(t, err)
	defer p.Close(context.Background())
	err = p.InitTransactions(testCtx(t))
	require.ErrorIs(t, err, kshare.ErrFatal)
	require.ErrorIs(t, err, kerr.InvalidTransactionTimeout)
}
