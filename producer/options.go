package producer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/internal/txn"
)

// Opt configures a Producer; see New.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	conn             kgoclient.Settings
	txnID            string
	txnTimeout       time.Duration
	linger           time.Duration
	batchMaxBytes    int32
	compression      []kgo.CompressionCodec
	partitioner      kgo.Partitioner
	maxBuffered      int
	maxInflight      int
	produceTimeout   time.Duration
	autoCreateTopics bool
	ledger           string // ShareLedger
}

func defaultConfig() config {
	return config{
		conn:           kgoclient.Defaults(),
		txnTimeout:     txn.DefaultTransactionTimeout,
		linger:         10 * time.Millisecond,
		batchMaxBytes:  1000012, // Kafka's default max.message.bytes
		compression:    []kgo.CompressionCodec{kgo.SnappyCompression(), kgo.NoCompression()},
		partitioner:    kgo.UniformBytesPartitioner(64<<10, true, true, nil),
		maxBuffered:    50000,
		maxInflight:    5,
		produceTimeout: 30 * time.Second,
	}
}

func (c *config) validate() error {
	if err := c.conn.Validate(); err != nil {
		return err
	}
	switch {
	case c.txnID == "":
		return errors.New("no transactional id (use TransactionalID)")
	case c.txnTimeout < time.Millisecond:
		// Sent in milliseconds: below one, it would be 0.
		return fmt.Errorf("transaction timeout %v is below one millisecond", c.txnTimeout)
	case c.linger < 0:
		return fmt.Errorf("linger %v is negative", c.linger)
	case c.batchMaxBytes < 1024:
		return fmt.Errorf("batch max bytes %d is below 1024", c.batchMaxBytes)
	case c.partitioner == nil:
		return errors.New("nil partitioner")
	case c.maxBuffered <= 0:
		return fmt.Errorf("max buffered records %d is not positive", c.maxBuffered)
	case c.maxInflight <= 0:
		return fmt.Errorf("max in-flight requests %d is not positive", c.maxInflight)
	case c.produceTimeout <= 0 || c.produceTimeout/time.Millisecond > 1<<31-1:
		return fmt.Errorf("produce request timeout %v is out of range", c.produceTimeout)
	}
	return nil
}

// connOpt applies a connection setting shared with the other kshare
// clients.
func connOpt(set kgoclient.Setting) Opt { return optFunc(func(c *config) { set(&c.conn) }) }

// SeedBrokers sets the host:port addresses used to discover the cluster.
// Required; New fails with ErrUsage without them.
func SeedBrokers(addrs ...string) Opt { return connOpt(kgoclient.SeedBrokers(addrs...)) }

// TransactionalID sets the transactional id. Required. A second producer
// with the same id fences this one (it then gets ErrFatal).
func TransactionalID(id string) Opt { return optFunc(func(c *config) { c.txnID = id }) }

// TransactionTimeout sets the transaction timeout (default 60s): the
// coordinator aborts a transaction open for longer, and every retry inside
// a transaction gives up (with ErrAbortable) when it elapses. It must not
// exceed the broker's transaction.max.timeout.ms, or InitTransactions fails
// with ErrFatal; New refuses one below a millisecond (ErrUsage).
func TransactionTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.txnTimeout = d }) }

// Linger sets how long a partition's batch waits for more records before it
// is sent (default 10ms, as kgo). Commit and Flush send at once regardless.
func Linger(d time.Duration) Opt { return optFunc(func(c *config) { c.linger = d }) }

// BatchMaxBytes caps the uncompressed size of one record batch (default
// 1000012, Kafka's max.message.bytes). A single record larger than this
// fails with MESSAGE_TOO_LARGE.
func BatchMaxBytes(n int32) Opt { return optFunc(func(c *config) { c.batchMaxBytes = n }) }

// Compression sets the batch compression codecs in order of preference, as
// kgo.ProducerBatchCompression (default snappy, as kgo). The codecs are
// kgo's own.
func Compression(codecs ...kgo.CompressionCodec) Opt {
	return optFunc(func(c *config) { c.compression = codecs })
}

// Partitioner sets the kgo partitioner that picks a partition for records
// without one (default kgo.UniformBytesPartitioner(64KiB, adaptive, keys),
// kgo's default). kgo.ManualPartitioner uses Record.Partition as given.
func Partitioner(p kgo.Partitioner) Opt { return optFunc(func(c *config) { c.partitioner = p }) }

// DialTLSConfig turns TLS on for every connection (kgo.DialTLSConfig).
// A handshake failure surfaces as the connection error of the first
// request, InitTransactions usually.
func DialTLSConfig(cfg *tls.Config) Opt { return connOpt(kgoclient.DialTLSConfig(cfg)) }

// SASL authenticates every connection with the first mechanism the broker
// supports (kgo.SASL). An authentication failure surfaces as the error of
// the first request, InitTransactions usually.
func SASL(mechanisms ...sasl.Mechanism) Opt { return connOpt(kgoclient.SASL(mechanisms...)) }

// KgoOpts passes transport-level options (dialer, client id, request
// timeouts, version pins, ...) to the underlying kgo.Client. Producer and
// consumer options of kgo have no effect: the Producer does its own
// producing. A kgo.MaxVersions pin replaces wire.KgoMaxVersions(); if
// it leaves out the KIP-1289 keys, share acknowledgements fail with
// kshare.ErrUnsupported, and below EndTxn v5 or Produce v12 transactions
// run as TV1. New fails with ErrUsage if kgo refuses an option.
func KgoOpts(opts ...kgo.Opt) Opt { return connOpt(kgoclient.KgoOpts(opts...)) }

// Logger sets the structured logger (default: discard). kgo's own log lines
// go to it too. A nil logger makes New fail with ErrUsage.
func Logger(l *slog.Logger) Opt { return connOpt(kgoclient.Logger(l)) }

// MaxBufferedRecords caps the records produced but not yet acknowledged
// (default 50000, as kgo); Produce blocks, within its context, while the
// cap is reached.
func MaxBufferedRecords(n int) Opt { return optFunc(func(c *config) { c.maxBuffered = n }) }

// MaxInflightPerBroker caps the produce requests in flight to one broker
// (default 5). Each partition has at most one batch in flight, so sequence
// numbers stay in order across retries; requests to one broker carry
// disjoint partitions.
func MaxInflightPerBroker(n int) Opt { return optFunc(func(c *config) { c.maxInflight = n }) }

// ProduceRequestTimeout sets the time a broker may take to answer a produce
// request (default 30s).
func ProduceRequestTimeout(d time.Duration) Opt {
	return optFunc(func(c *config) { c.produceTimeout = d })
}

// AllowAutoTopicCreation lets metadata requests create missing topics, if
// the broker allows it (default off, as kgo).
func AllowAutoTopicCreation() Opt { return optFunc(func(c *config) { c.autoCreateTopics = true }) }
