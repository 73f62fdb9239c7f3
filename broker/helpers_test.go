package broker

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/internal/testkit"
)

// The broker's tests use the client packages' test kit (internal/testkit,
// which imports no kshare package); these wrappers only add the cluster.

// newTestCluster starts a cluster that the test closes.
func newTestCluster(t testing.TB, opts ...Opt) *Cluster {
	t.Helper()
	c, err := NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// newTestClient returns a kgo client on the cluster that the test closes.
func newTestClient(t testing.TB, c *Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return testkit.Client(t, c.Bootstrap(), opts...)
}

// createTopic creates a topic through the wire, as a user would.
func createTopic(t testing.TB, c *Cluster, name string, partitions int32) {
	t.Helper()
	testkit.CreateTopic(testCtx(t), t, newTestClient(t, c), name, partitions)
}

// testCtx is a context bounded so that a broken test fails instead of hanging.
func testCtx(t testing.TB) context.Context { return testkit.Context(t) }
