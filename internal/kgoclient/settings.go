package kgoclient

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

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

// Validate reports the first missing or invalid setting: no seed brokers
// or a nil logger.
func (s *Settings) Validate() error {
	switch {
	case len(s.Seeds) == 0:
		return errors.New("no seed brokers (use SeedBrokers)")
	case s.Logger == nil:
		return errors.New("nil logger")
	}
	return nil
}

// NewClient creates the kgo client: the seed brokers and the logger (kgo's
// own lines go to it too, at the matching slog level and tagged
// component=kgo), then own, the options the client package
// needs, then the application's KgoOpts, which thereby override own. It
// does not contact the cluster. It fails when kgo refuses an option, with
// kgo's error wrapped.
func (s *Settings) NewClient(own ...kgo.Opt) (*kgo.Client, error) {
	opts := make([]kgo.Opt, 0, 2+len(own)+len(s.KgoOpts))
	opts = append(opts, kgo.SeedBrokers(s.Seeds...), kgo.WithLogger(slogLogger{s.Logger}))
	opts = append(opts, own...)
	opts = append(opts, s.KgoOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kgo client: %w", err)
	}
	return cl, nil
}
