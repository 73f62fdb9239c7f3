package kgoclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Dials remembers whether connection attempts are failing, and Explain
// adds the last connection error to a context error only then.
func TestDialsExplain(t *testing.T) {
	var d Dials
	ctxErr := fmt.Errorf("find coordinator: %w", context.DeadlineExceeded)
	require.Same(t, ctxErr, d.Explain(ctxErr), "nothing failed: nothing to add")
	require.Same(t, ctxErr, (*Dials)(nil).Explain(ctxErr))

	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	d.OnBrokerConnect(kgo.BrokerMetadata{NodeID: -1, Host: "127.0.0.1", Port: 1}, 0, nil, refused)
	d.OnBrokerConnect(kgo.BrokerMetadata{NodeID: 2, Host: "127.0.0.1", Port: 2}, 0, nil, refused)
	failing, since, connected := d.State()
	require.ErrorContains(t, failing, "connecting to broker 2 at 127.0.0.1:2")
	require.False(t, since.IsZero())
	require.False(t, connected)

	err := d.Explain(ctxErr)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.ErrorContains(t, err, "connection attempts have failed for")

	other := errors.New("INVALID_TXN_STATE")
	require.Same(t, other, d.Explain(other), "only a context error is explained")
	named := fmt.Errorf("x: %w (last error: %w)", context.DeadlineExceeded, refused)
	require.Same(t, named, d.Explain(named), "an error that names a connection error already is left alone")

	d.OnBrokerConnect(kgo.BrokerMetadata{NodeID: 2, Host: "127.0.0.1", Port: 2}, time.Millisecond, nil, nil)
	failing, since, connected = d.State()
	require.NoError(t, failing)
	require.True(t, since.IsZero())
	require.True(t, connected)
	require.Same(t, ctxErr, d.Explain(ctxErr), "connections succeed again")
}

// A client made by NewClient reports its connection attempts to its
// Dials: a seed that refuses connections shows up there.
func TestNewClientFollowsDials(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	s := Defaults()
	SeedBrokers(addr)(&s)
	cl, dials, err := s.NewClient(kgo.RequestRetries(0))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.Error(t, cl.Ping(ctx))
	failing, _, connected := dials.State()
	require.False(t, connected)
	require.ErrorIs(t, failing, syscall.ECONNREFUSED)
	require.ErrorContains(t, failing, "seed broker "+addr)
}
