package kgoclient

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// Settings are the connection settings of one client. The zero value has
// no seed brokers and a nil logger, which Validate refuses; client
// packages start from Defaults.
type Settings struct {
	// Seeds are the host:port addresses used to discover the cluster.
	Seeds []string
	// KgoOpts are transport options passed to kgo.NewClient after the
	// client package's own, so that an application's choice wins.
	KgoOpts []kgo.Opt
	// Logger receives the client's log lines and kgo's.
	Logger *slog.Logger
}

// Defaults returns Settings with a logger that discards everything.
func Defaults() Settings { return Settings{Logger: slog.New(slog.DiscardHandler)} }

// Setting changes Settings; the client packages wrap each one in their own
// option type.
type Setting func(*Settings)

// SeedBrokers adds seed broker addresses.
func SeedBrokers(addrs ...string) Setting {
	return func(s *Settings) { s.Seeds = append(s.Seeds, addrs...) }
}

// DialTLSConfig turns TLS on for every connection (kgo.DialTLSConfig). A
// nil cfg is refused by kgo.NewClient.
func DialTLSConfig(cfg *tls.Config) Setting {
	return KgoOpts(kgo.DialTLSConfig(cfg))
}

// SASL authenticates every connection with the first mechanism the broker
// supports (kgo.SASL).
func SASL(mechanisms ...sasl.Mechanism) Setting {
	return KgoOpts(kgo.SASL(mechanisms...))
}

// KgoOpts adds transport options for kgo.NewClient.
func KgoOpts(opts ...kgo.Opt) Setting {
	return func(s *Settings) { s.KgoOpts = append(s.KgoOpts, opts...) }
}

// Logger sets the logger. A nil logger is refused by Validate.
func Logger(l *slog.Logger) Setting {
	return func(s *Settings) { s.Logger = l }
}

// Validate reports the first missing or invalid setting: no seed
// brokers, a seed that is not a host or host:port, a nil logger, or a nil
// kgo option (kgo.NewClient would panic on it).
func (s *Settings) Validate() error {
	switch {
	case len(s.Seeds) == 0:
		return errors.New("no seed brokers (use SeedBrokers)")
	case s.Logger == nil:
		return errors.New("nil logger")
	}
	for _, seed := range s.Seeds {
		if err := checkSeed(seed); err != nil {
			return err
		}
	}
	for i, o := range s.KgoOpts {
		if o == nil {
			return fmt.Errorf("kgo option %d of %d is nil", i+1, len(s.KgoOpts))
		}
	}
	return nil
}

// checkSeed reports why addr is not a seed broker address kgo can dial:
// "host", "host:port" or "[ipv6]:port", with a port in 1..65535 (kgo
// adds 9092 to a bare host).
func checkSeed(addr string) error {
	if strings.TrimSpace(addr) == "" {
		return errors.New("empty seed broker address")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if strings.Contains(addr, ":") && net.ParseIP(strings.Trim(addr, "[]")) == nil {
			return fmt.Errorf("seed broker address %q: %w", addr, err)
		}
		return nil // a bare host or IPv6 address: kgo adds the port
	}
	if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
		return fmt.Errorf("seed broker address %q: port %q is not a number in 1..65535", addr, port)
	}
	if host == "" {
		return fmt.Errorf("seed broker address %q has no host", addr)
	}
	return nil
}

// NewClient creates the kgo client: the seed brokers, the logger (kgo's
// own lines go to it too, at the matching slog level and tagged
// component=kgo) and a Dials that follows its connection attempts, then
// own, the options the client package needs, then the application's
// KgoOpts, which thereby override own (kgo adds hooks up, so the
// application's hooks run too). It does not contact the cluster. It fails
// when kgo refuses an option, with kgo's error wrapped.
func (s *Settings) NewClient(own ...kgo.Opt) (*kgo.Client, *Dials, error) {
	dials := new(Dials)
	opts := make([]kgo.Opt, 0, 3+len(own)+len(s.KgoOpts))
	opts = append(opts, kgo.SeedBrokers(s.Seeds...), kgo.WithLogger(slogLogger{s.Logger}), kgo.WithHooks(dials))
	opts = append(opts, own...)
	opts = append(opts, s.KgoOpts...)
	var faults *faultDialer
	if InjectFaults.Load() && len(s.KgoOpts) == 0 {
		faults = &faultDialer{open: make(map[*faultConn]struct{})}
		opts = append(opts, kgo.Dialer(faults.dial))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("kgo client: %w", err)
	}
	if faults != nil {
		faulty.Store(cl, faults)
	}
	return cl, dials, nil
}
