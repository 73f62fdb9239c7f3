package txn

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/wire"
)

func testCtx(t testing.TB) context.Context { return testkit.Context(t) }

// newClient returns a kgo client allowed to send the KIP-1289 keys.
func newClient(t testing.TB, c *broker.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return testkit.Client(t, c.Bootstrap(), append([]kgo.Opt{kgo.MaxVersions(wire.KgoMaxVersions())}, opts...)...)
}

func newManager(t testing.TB, cl *kgo.Client, txnID string) *Manager {
	t.Helper()
	m, err := New(Config{Client: cl, TransactionalID: txnID, TransactionTimeout: 20 * time.Second})
	require.NoError(t, err)
	return m
}

func createTopic(t testing.TB, c *broker.Cluster, name string, partitions int32) {
	t.Helper()
	testkit.CreateTopic(testCtx(t), t, newClient(t, c), name, partitions)
}

// emptyAcks returns acknowledgements with none in them.
func emptyAcks() *kshare.ShareAcks { return (*kshare.ShareAcks)(acktrack.New(nil)) }
