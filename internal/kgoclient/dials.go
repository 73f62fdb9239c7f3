package kgoclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Dials follows the connection attempts of one client (it is kgo's
// HookBrokerConnect), so that a call that ran out of time because no
// broker could be reached says so. kgo retries a failed connection inside
// each request until the request's context ends, and then returns only
// the context's error: without Dials, a client whose seed brokers refuse
// every connection would report "context deadline exceeded" and nothing
// else. It is safe for concurrent use.
type Dials struct {
	mu        sync.Mutex
	connected bool      // some attempt has succeeded
	failing   error     // the last attempt's error; nil once one succeeds
	since     time.Time // the first failed attempt since the last success
}

var _ kgo.HookBrokerConnect = (*Dials)(nil)

// OnBrokerConnect records the outcome of one connection attempt (the dial
// and the connection's set-up: ApiVersions, TLS, SASL).
func (d *Dials) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		d.connected, d.failing, d.since = true, nil, time.Time{}
		return
	}
	if d.failing == nil {
		d.since = time.Now()
	}
	addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	if meta.NodeID < 0 {
		d.failing = fmt.Errorf("connecting to seed broker %s: %w", addr, err)
	} else {
		d.failing = fmt.Errorf("connecting to broker %d at %s: %w", meta.NodeID, addr, err)
	}
}

// State returns the error of the last connection attempt and since when
// every attempt has failed (nil and zero when the last attempt succeeded
// or none was made yet), and whether any attempt ever succeeded.
func (d *Dials) State() (failing error, since time.Time, connected bool) {
	if d == nil {
		return nil, time.Time{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failing, d.since, d.connected
}

// Explain returns err, the error of a call, with the last connection
// error added when err is a context's error (the call ran out of time)
// and connection attempts have been failing since: the call could not
// reach a broker, which the context's error does not say. errors.Is and
// errors.As find both. Any other err is returned as it is, as is one that
// names a connection error already. A nil Dials explains nothing.
func (d *Dials) Explain(err error) error {
	if err == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		return err
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return err
	}
	failing, since, _ := d.State()
	if failing == nil {
		return err
	}
	return fmt.Errorf("%w (connection attempts have failed for %v: %w)", err, time.Since(since).Round(time.Millisecond), failing)
}
