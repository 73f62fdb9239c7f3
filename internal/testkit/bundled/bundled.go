// Package bundled starts kshare's bundled cluster for tests and records
// the requests it receives. It is the part of the test kit that imports
// package broker: the broker's own tests cannot import it (they use
// package testkit, which imports no kshare package), the client packages'
// tests can.
package bundled

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
)

// Cluster starts a bundled cluster that the test closes, requiring the
// close to succeed.
func Cluster(t testing.TB, opts ...broker.Opt) *broker.Cluster {
	t.Helper()
	c, err := broker.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// Observed is one request a node of the bundled cluster received.
type Observed struct {
	Node int32        // the node that received it
	Req  kmsg.Request // the decoded request
}

// RequestLog records every request the nodes of a bundled cluster receive,
// from clients and from other nodes, in arrival order. It is safe for
// concurrent use.
type RequestLog struct {
	mu   sync.Mutex
	reqs []Observed
}

// ObserveRequests starts a RequestLog of c; the observation stops when the
// test ends. The broker records a request before it handles it, so a
// request whose answer the client has is in the log.
func ObserveRequests(t testing.TB, c *broker.Cluster) *RequestLog {
	l := &RequestLog{}
	stop := c.ObserveRequests(func(node int32, req kmsg.Request) {
		l.mu.Lock()
		l.reqs = append(l.reqs, Observed{node, req})
		l.mu.Unlock()
	})
	t.Cleanup(stop)
	return l
}

// Of returns the recorded requests with any of the API keys, in arrival
// order.
func (l *RequestLog) Of(keys ...int16) []Observed {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Observed
	for _, o := range l.reqs {
		for _, k := range keys {
			if o.Req.Key() == k {
				out = append(out, o)
				break
			}
		}
	}
	return out
}

// Reset forgets what was recorded so far.
func (l *RequestLog) Reset() {
	l.mu.Lock()
	l.reqs = nil
	l.mu.Unlock()
}

// WithoutRenew makes the nodes of c look like brokers from before KIP-1222
// (ShareAcknowledge v1 at most, so no RENEW) to clients that ask for their
// ApiVersions from now on, until the test ends: a share consumer then
// cannot renew a lock, and its records keep their first one. It installs
// c's fault hook, replacing any other.
func WithoutRenew(t testing.TB, c *broker.Cluster) {
	stop := c.InjectFaults(func(_ int32, _ string, req kmsg.Request) broker.FaultAction {
		if _, ok := req.(*kmsg.ApiVersionsRequest); !ok {
			return broker.FaultAction{}
		}
		return broker.FaultAction{AfterHandling: func(resp kmsg.Response) {
			keys := resp.(*kmsg.ApiVersionsResponse).ApiKeys
			for i := range keys {
				if keys[i].ApiKey == kmsg.ShareAcknowledge.Int16() {
					keys[i].MaxVersion = 1
				}
			}
		}}
	})
	t.Cleanup(stop)
}
