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
	ledger   string
}

// viaProducer passes an option on to the acknowledger's producer, which
// validates it when New creates the producer.
func viaProducer(o producer.Opt) Opt {
	return optFunc(func(c *config) { c.producer = append(c.producer, o) })
}

// SeedBrokers sets the host:port addresses used to discover the cluster.
// Required; New fails with kshare.ErrUsage without them.
func SeedBrokers(addrs ...string) Opt { return viaProducer(producer.SeedBrokers(addrs...)) }

// TransactionalID sets the acknowledger's own transactional id. Required;
// New fails with kshare.ErrUsage without it. A second acknowledger (or
// producer) with the same id fences this one, which then fails with
// kshare.ErrFatal.
func TransactionalID(id string) Opt { return viaProducer(producer.TransactionalID(id)) }

// TransactionTimeout sets the transaction timeout (default 60s): the
// coordinator aborts a transaction left open longer, and every retry inside
// one gives up when it elapses. A timeout that is not positive makes New
// fail with kshare.ErrUsage; one above the broker's
// transaction.max.timeout.ms makes InitTransactions fail with
// kshare.ErrFatal.
func TransactionTimeout(d time.Duration) Opt { return viaProducer(producer.TransactionTimeout(d)) }

// DialTLSConfig turns TLS on for every connection (kgo.DialTLSConfig). A
// handshake failure surfaces as the error of the first request,
// InitTransactions usually.
func DialTLSConfig(cfg *tls.Config) Opt { return viaProducer(producer.DialTLSConfig(cfg)) }

// SASL authenticates every connection with the first mechanism the broker
// supports (kgo.SASL). An authentication failure surfaces as the error of
// the first request, InitTransactions usually.
func SASL(mechanisms ...sasl.Mechanism) Opt { return viaProducer(producer.SASL(mechanisms...)) }

// KgoOpts passes transport options (dialer, client id, request timeouts,
// ...) to the underlying kgo.Client; see producer.KgoOpts for what they
// cannot change. New fails with kshare.ErrUsage if kgo refuses one.
func KgoOpts(opts ...kgo.Opt) Opt { return viaProducer(producer.KgoOpts(opts...)) }

// Logger sets the structured logger of the acknowledger and its producer
// (default: discard). A nil logger makes New fail with kshare.ErrUsage.
func Logger(l *slog.Logger) Opt {
	return optFunc(func(c *config) {
		c.logger = l
		c.producer = append(c.producer, producer.Logger(l))
	})
}

// ShareLedger names the claim ledger topic through which the acknowledger
// commits share acknowledgements exactly-once on clusters without
// KIP-1289, as producer.ShareLedger does for a producer: each commit
// writes a claim for every accepted or rejected record, renews every
// record's lock once the claims are durable (a failed renewal makes the
// commit kshare.ErrAbortable and gives the records back), and after it
// committed the consumers acknowledge the records themselves. Staged
// checkpoints are staged for the ledger too. Every consumer whose
// acknowledgements it commits must name the same topic
// (shareconsumer.ShareLedger), or the staging fails with kshare.ErrUsage.
func ShareLedger(topic string) Opt {
	return optFunc(func(c *config) {
		c.ledger = topic
		c.producer = append(c.producer, producer.ShareLedger(topic))
	})
}
