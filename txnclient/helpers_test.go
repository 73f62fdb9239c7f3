package txnclient

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newCluster(t testing.TB, opts ...broker.Opt) *broker.Cluster {
	t.Helper()
	c, err := broker.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// newClient returns a kgo client allowed to send the KIP-1289 keys.
func newClient(t testing.TB, c *broker.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...), kgo.MaxVersions(KgoMaxVersions())}
	cl, err := kgo.NewClient(append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func newManager(t testing.TB, cl *kgo.Client, txnID string) *Manager {
	t.Helper()
	m, err := New(Config{Client: cl, TransactionalID: txnID, TransactionTimeout: 20 * time.Second})
	require.NoError(t, err)
	return m
}

func createTopic(t testing.TB, c *broker.Cluster, name string, partitions int32) {
	t.Helper()
	resp, err := kadm.NewClient(newClient(t, c)).CreateTopic(testCtx(t), partitions, 1, nil, name)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
}

// requestLog records the requests the cluster receives, by key.
type requestLog struct {
	mu   sync.Mutex
	reqs []observed
}

type observed struct {
	node int32
	req  kmsg.Request
}

func observe(t testing.TB, c *broker.Cluster) *requestLog {
	l := &requestLog{}
	stop := c.ObserveRequests(func(node int32, req kmsg.Request) {
		l.mu.Lock()
		l.reqs = append(l.reqs, observed{node, req})
		l.mu.Unlock()
	})
	t.Cleanup(stop)
	return l
}

// of returns the observed requests with key.
func (l *requestLog) of(key int16) []observed {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []observed
	for _, o := range l.reqs {
		if o.req.Key() == key {
			out = append(out, o)
		}
	}
	return out
}

func (l *requestLog) reset() {
	l.mu.Lock()
	l.reqs = nil
	l.mu.Unlock()
}
