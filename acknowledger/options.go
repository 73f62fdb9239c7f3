package acknowledger

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/kshare-go/kshare/producer"
)

// Opt configures an Acknowledger; see New.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	logger   *slog.Logger
	producer []producer.Opt
}

// SeedBrokers sets the host:port addresses used to discover the cluster.
// Required.
func SeedBrokers(addrs ...string) Opt {
	return optFunc(func(c *config) { c.producer = append(c.producer, producer.SeedBrokers(addrs...)) })
}

// TransactionalID sets the acknowledger's own transactional id. Required.
// A second acknowledger (or producer) with the same id fences this one,
// which then fails with txnclient.ErrFatal.
func TransactionalID(id string) Opt {
	return optFunc(func(c *config) { c.producer = append(c.producer, producer.TransactionalID(id)) })
}

// TransactionTimeout sets the transaction timeout (default 60s): the
// coordinator aborts a transaction left open longer, and every retry inside
// one gives up when it elapses.
func TransactionTimeout(d time.Duration) Opt {
	return optFunc(func(c *config) { c.producer = append(c.producer, producer.TransactionTimeout(d)) })
}

// DialTLSConfig turns TLS on for every connection (kgo.DialTLSConfig).
func DialTLSConfig(cfg *tls.Config) Opt {
	return optFunc(func(c *config) { c.producer = append(c.producer, producer.DialTLSConfig(cfg)) })
}

// SASL authenticates every connection with the first mechanism the broker
// supports (kgo.SASL).
func SASL(mechanisms ...sasl.Mechanism) Opt {
	return optFunc(func(c *config) { c.producer = append(c.producer, producer.SASL(mechanisms...)) })
}

// KgoOpts passes transport options (dialer, client id, request timeouts,
// ...) to the underlying kgo.Client.
func KgoOpts(opts ...kgo.Opt) Opt {
	return optFunc(func(c *config) { c.producer = append(c.producer, producer.KgoOpts(opts...)) })
}

// Logger sets the structured logger (default: discard).
func Logger(l *slog.Logger) Opt {
	return optFunc(func(c *config) {
		c.logger = l
		c.producer = append(c.producer, producer.Logger(l))
	})
}
