package kgoclient

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// InjectFaults makes every client created from now on without transport
// options of the application (KgoOpts, DialTLSConfig, SASL) dial through
// a faultDialer, so that DropConnections and PauseConnections can act on
// its connections. For fault injection (internal/eos) only. A dropped connection is how a share session is lost on
// Apache Kafka (the broker releases what the session's member holds at
// once, and the member goes on); paused writes are what a stopped process
// looks like to the brokers (nothing is sent, nothing is closed).
var InjectFaults atomic.Bool

// faulty maps each client created while InjectFaults was set to its
// dialer.
var faulty sync.Map // *kgo.Client -> *faultDialer

// faultDialer dials the connections of one client and keeps the open ones.
type faultDialer struct {
	mu     sync.Mutex
	open   map[*faultConn]struct{}
	paused time.Time     // writes wait until then
	resume chan struct{} // closed when the pause is replaced
}

func (d *faultDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	nc, err := (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 20 * time.Second}).DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	c := &faultConn{Conn: nc, d: d, closed: make(chan struct{})}
	d.mu.Lock()
	d.open[c] = struct{}{}
	d.mu.Unlock()
	return c, nil
}

func (d *faultDialer) pause() (until time.Time, resume <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.paused, d.resume
}

// faultConn is a connection of a faultDialer.
type faultConn struct {
	net.Conn
	d         *faultDialer
	closeOnce sync.Once
	closed    chan struct{}
}

// Write waits out a pause first, so that nothing reaches the broker
// meanwhile; a pause replaced by another is waited out anew, and a Close
// ends the wait.
func (c *faultConn) Write(b []byte) (int, error) {
	for {
		until, resume := c.d.pause()
		wait := time.Until(until)
		if wait <= 0 {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-resume:
		case <-c.closed:
			t.Stop()
			return 0, net.ErrClosed
		}
		t.Stop()
	}
	return c.Conn.Write(b)
}

func (c *faultConn) Close() error {
	c.d.mu.Lock()
	delete(c.d.open, c)
	c.d.mu.Unlock()
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// DropConnections closes every open connection of cl, as a network fault
// would (the client reconnects when it next needs a broker), and returns
// how many it closed. It does nothing to a client created while
// InjectFaults was not set.
func DropConnections(cl *kgo.Client) int {
	d := faultDialerOf(cl)
	if d == nil {
		return 0
	}
	d.mu.Lock()
	open := make([]*faultConn, 0, len(d.open))
	for c := range d.open {
		open = append(open, c)
	}
	d.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
	return len(open)
}

// PauseConnections holds every write of cl, on the connections it has and
// those it opens, for pause, as if its process were stopped: what it
// sends meanwhile reaches the brokers when the pause ends, and nothing is
// closed. A call replaces the pause in force (0 ends it). It reports
// whether cl was created while InjectFaults was set.
func PauseConnections(cl *kgo.Client, pause time.Duration) bool {
	d := faultDialerOf(cl)
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.resume != nil {
		close(d.resume)
	}
	d.paused, d.resume = time.Now().Add(pause), make(chan struct{})
	return true
}

// ForgetFaults forgets cl (its owner is done with it).
func ForgetFaults(cl *kgo.Client) { faulty.Delete(cl) }

func faultDialerOf(cl *kgo.Client) *faultDialer {
	v, ok := faulty.Load(cl)
	if !ok {
		return nil
	}
	return v.(*faultDialer)
}
