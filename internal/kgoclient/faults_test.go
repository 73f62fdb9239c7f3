package kgoclient

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
)

// newFaultyClient returns a client of a one-node bundled cluster made
// while InjectFaults is set, and the count of Metadata requests the
// cluster received.
func newFaultyClient(t *testing.T) (*kgo.Client, *atomic.Int64, []string) {
	t.Helper()
	c, err := broker.NewCluster(broker.Nodes(1))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	var metadata atomic.Int64
	t.Cleanup(c.ObserveRequests(func(_ int32, req kmsg.Request) {
		if _, ok := req.(*kmsg.MetadataRequest); ok {
			metadata.Add(1)
		}
	}))
	InjectFaults.Store(true)
	s := Defaults()
	SeedBrokers(c.Bootstrap()...)(&s)
	cl, _, err := s.NewClient()
	InjectFaults.Store(false)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	t.Cleanup(func() { ForgetFaults(cl) })
	return cl, &metadata, c.Bootstrap()
}

func metadata(ctx context.Context, cl *kgo.Client) error {
	_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	return err
}

// A dropped connection is closed under the client, which dials again for
// its next request; a client made without InjectFaults is left alone.
func TestDropConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, _, seeds := newFaultyClient(t)
	require.NoError(t, metadata(ctx, cl))
	require.Positive(t, DropConnections(cl), "the client had a connection open")
	require.Zero(t, DropConnections(cl), "nothing is left open")
	require.NoError(t, metadata(ctx, cl), "the client dials again")
	require.Positive(t, DropConnections(cl))

	other, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer other.Close()
	require.NoError(t, metadata(ctx, other))
	require.Zero(t, DropConnections(other), "a client made without InjectFaults has no fault dialer")
	require.False(t, PauseConnections(other, time.Hour))
	require.NoError(t, metadata(ctx, other), "and is not paused")
}

// During a pause nothing the client writes reaches the broker; ending the
// pause lets the next request through.
func TestPauseConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, seen, _ := newFaultyClient(t)
	require.NoError(t, metadata(ctx, cl))
	before := seen.Load()
	require.True(t, PauseConnections(cl, time.Hour))
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	require.ErrorIs(t, metadata(short, cl), context.DeadlineExceeded, "a request during the pause is not answered")
	cancelShort()
	require.Equal(t, before, seen.Load(), "the broker received nothing during the pause")
	require.True(t, PauseConnections(cl, 0))
	require.NoError(t, metadata(ctx, cl), "the pause has ended")
	require.Greater(t, seen.Load(), before)
}
