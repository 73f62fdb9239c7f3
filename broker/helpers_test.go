package broker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

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
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// createTopic creates a topic through the wire, as a user would.
func createTopic(t testing.TB, c *Cluster, name string, partitions int32) {
	t.Helper()
	cl := newTestClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, name)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
}

// testCtx is a context bounded so that a broken test fails instead of hanging.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
