package shareconsumer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/kshare-go/kshare/internal/kgoclient"
)

// AckMode says who acknowledges the records a Consumer delivers, and when.
type AckMode int8

// The acknowledgement modes; see the package documentation.
const (
	// Implicit accepts every record of a poll when the next Poll (or
	// Close) is called: KIP-932's default.
	Implicit AckMode = iota
	// Explicit acknowledges only what the application marks with Ack;
	// Commit, CommitAsync, the next Poll and Close send the marks.
	// Records left unmarked are released on Close.
	Explicit
	// Transactional never acknowledges on its own: the application turns
	// records into kshare.ShareAcks with Acks and commits them in a Kafka
	// transaction (producer or acknowledger package).
	Transactional
)

// String names the mode.
func (m AckMode) String() string {
	switch m {
	case Implicit:
		return "implicit"
	case Explicit:
		return "explicit"
	case Transactional:
		return "transactional"
	}
	return fmt.Sprintf("AckMode(%d)", int8(m))
}

// Opt configures a Consumer; see New.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	conn       kgoclient.Settings
	group      string
	topics     []string
	mode       AckMode
	maxRecords int32
	maxWait    time.Duration
	maxBytes   int32
	// renewHeld is RenewHeldLocks: renew held records that are not
	// staged.
	renewHeld bool
	// maxPollInterval is MaxPollInterval: how long records fetched ahead
	// of Poll are kept (and renewed) while no Poll comes.
	maxPollInterval time.Duration
	// groupConfig is SetGroupConfig's, and groupConfigs its validated
	// form.
	groupConfig  *GroupConfig
	groupConfigs []kmsg.IncrementalAlterConfigsRequestResourceConfig
	// ledger is ShareLedger: the claim ledger topic, empty for none.
	ledger string
	// acquireMode is ShareAcquireMode's.
	acquireMode AcquireMode
}

// Defaults. The fetch sizes and the wait are kgo's share-consumer defaults,
// so that the two consumers compare on equal terms.
const (
	DefaultMaxPollRecords = 500
	DefaultMaxWait        = 500 * time.Millisecond
	DefaultFetchMaxBytes  = 50 << 20
	// DefaultMaxPollInterval is Kafka's max.poll.interval.ms default.
	DefaultMaxPollInterval = 5 * time.Minute
	// connIdleTimeout replaces kgo's 20s default: the broker ties a share
	// session to its connection and releases every record of the session
	// when the connection closes, so an application that holds records
	// between polls must not lose them to an idle-connection reaper.
	connIdleTimeout = 10 * time.Minute
)

func defaultConfig() config {
	return config{
		conn:       kgoclient.Defaults(),
		mode:       Implicit,
		maxRecords: DefaultMaxPollRecords,
		maxWait:    DefaultMaxWait,
		maxBytes:   DefaultFetchMaxBytes,

		maxPollInterval: DefaultMaxPollInterval,
		acquireMode:     RecordLimit,
	}
}

func (c *config) validate() error {
	if err := c.conn.Validate(); err != nil {
		return err
	}
	switch {
	case c.group == "":
		return errors.New("no share group (use Group)")
	case len(c.topics) == 0:
		return errors.New("no topics (use Topics)")
	case c.mode != Implicit && c.mode != Explicit && c.mode != Transactional:
		return fmt.Errorf("unknown ack mode %v", c.mode)
	case c.maxRecords <= 0:
		return fmt.Errorf("max poll records %d is not positive", c.maxRecords)
	case c.maxWait <= 0 || c.maxWait/time.Millisecond > 1<<31-1:
		return fmt.Errorf("max wait %v is out of range", c.maxWait)
	case c.maxBytes <= 0:
		return fmt.Errorf("fetch max bytes %d is not positive", c.maxBytes)
	case c.maxPollInterval <= 0:
		return fmt.Errorf("max poll interval %v is not positive", c.maxPollInterval)
	case c.acquireMode != RecordLimit && c.acquireMode != BatchOptimized:
		return fmt.Errorf("unknown acquire mode %d", c.acquireMode)
	case c.ledger != "" && c.mode != Transactional:
		return fmt.Errorf("a claim ledger (ShareLedger %q) needs Transactional mode, not %v", c.ledger, c.mode)
	}
	for _, t := range c.topics {
		if t == "" {
			return errors.New("empty topic name")
		}
	}
	if c.groupConfig != nil {
		configs, err := c.groupConfig.configs()
		if err != nil {
			return fmt.Errorf("SetGroupConfig: %w", err)
		}
		c.groupConfigs = configs
	}
	return nil
}

// connOpt applies a connection setting shared with the other kshare
// clients.
func connOpt(set kgoclient.Setting) Opt { return optFunc(func(c *config) { set(&c.conn) }) }

// SeedBrokers sets the host:port addresses used to discover the cluster.
// Required; New fails without them.
func SeedBrokers(addrs ...string) Opt { return connOpt(kgoclient.SeedBrokers(addrs...)) }

// Group sets the share group to join. Required. A share group starts
// reading at the latest offset unless its share.auto.offset.reset group
// config says "earliest".
func Group(id string) Opt { return optFunc(func(c *config) { c.group = id }) }

// Topics sets the topics to subscribe to. Required. The group coordinator
// assigns their partitions to the members of the group.
func Topics(topics ...string) Opt {
	return optFunc(func(c *config) { c.topics = append(c.topics, topics...) })
}

// Mode sets the acknowledgement mode (default Implicit).
func Mode(m AckMode) Opt { return optFunc(func(c *config) { c.mode = m }) }

// MaxPollRecords sets the most records one Poll returns (default 500).
// Every ShareFetch asks its leader for at most n records, in the record
// limit acquire mode by default (ShareFetch v2, KIP-1206; see
// ShareAcquireMode), so that a leader locks no more than that; a leader
// in batch-optimized mode, or without it (ShareFetch v1), may acquire
// whole record batches past n, and the records beyond n then wait,
// renewed, for the next Poll. Records of several leaders' fetches make up
// one Poll, still at most n.
func MaxPollRecords(n int32) Opt { return optFunc(func(c *config) { c.maxRecords = n }) }

// AcquireMode is how a share-partition leader applies MaxPollRecords when
// it hands records out: Kafka's share.acquire.mode (KIP-1206), sent in
// every ShareFetch (v2). Its values are the protocol's.
type AcquireMode int8

const (
	// BatchOptimized lets the leader hand out whole record batches, past
	// MaxPollRecords (Kafka's batch_optimized, the Java consumer's
	// default): fewer fetches for large batches, but the consumer holds,
	// and renews, the records past MaxPollRecords for the next Poll, and
	// no other member gets them meanwhile.
	BatchOptimized AcquireMode = 0
	// RecordLimit has the leader acquire at most MaxPollRecords records
	// per fetch, splitting a batch if it must (Kafka's record_limit):
	// what a consumer holds is one Poll and one fetch ahead. The default.
	RecordLimit AcquireMode = 1
)

// String returns the mode's name as Kafka's share.acquire.mode spells it.
func (m AcquireMode) String() string {
	switch m {
	case BatchOptimized:
		return "batch_optimized"
	case RecordLimit:
		return "record_limit"
	}
	return fmt.Sprintf("AcquireMode(%d)", int8(m))
}

// ShareAcquireMode sets how leaders apply MaxPollRecords (default
// RecordLimit). A leader with ShareFetch v1 only hands out whole batches,
// whatever the mode. New refuses a value that is neither mode
// (kshare.ErrUsage).
func ShareAcquireMode(m AcquireMode) Opt { return optFunc(func(c *config) { c.acquireMode = m }) }

// MaxPollInterval sets how long records fetched ahead of Poll are held for
// an application that does not call Poll (default 5 minutes, Kafka's
// max.poll.interval.ms). Each leader's session fetches one ShareFetch
// ahead of the application, and the leader starts the records' locks
// when it answers; the consumer renews those locks (ShareAcknowledge
// RENEW, KIP-1222) until Poll returns the records, so a record is never
// left to expire, and use up one of its deliveries, before the
// application has seen it. When no Poll has come for d, the consumer
// releases what it fetched ahead (which costs those records a delivery:
// Kafka counts every release) and from then on fetches nothing ahead:
// while a Poll waits, it asks one leader at a time, so that an application
// slower than d loses a delivery of what was fetched for it once, not at
// every slow Poll. A fetch ahead also comes only within a quarter lock of
// its Poll, and not after the consumer gave records back since (Release,
// a RELEASE acknowledgement, an aborted transaction). A broker without RENEW gets no fetch ahead at all: sessions fetch only
// while a Poll waits. It does not bound records Poll has returned; see
// RenewHeldLocks.
func MaxPollInterval(d time.Duration) Opt {
	return optFunc(func(c *config) { c.maxPollInterval = d })
}

// MaxWait sets how long a leader may hold a ShareFetch when it has no
// records (default 500ms). It also bounds how long a queued acknowledgement
// waits behind a fetch in flight.
func MaxWait(d time.Duration) Opt { return optFunc(func(c *config) { c.maxWait = d }) }

// RenewHeldLocks sets whether a Transactional consumer renews the locks of
// the records Poll returned that are not staged in a transaction yet, as
// it renews those of staged records (default false: they keep the lock
// their fetch got). With true, an application may work on a record for
// longer than the lock duration and still stage it, and no other member
// gets it meanwhile; but a record it never stages, or an application that
// stalls without closing (a fenced instance that keeps polling), holds
// its records until Close, since nothing bounds that hold the way the
// transaction timeout bounds a staged one. With false, work that outlasts
// the lock fails to stage with ErrLockExpired while the group delivers the
// records again, and forgotten records come back when their lock runs
// out. Other modes never renew.
func RenewHeldLocks(on bool) Opt { return optFunc(func(c *config) { c.renewHeld = on }) }

// FetchMaxBytes caps the bytes of one ShareFetch response (default 50 MiB).
func FetchMaxBytes(n int32) Opt { return optFunc(func(c *config) { c.maxBytes = n }) }

// DialTLSConfig turns TLS on for every connection (kgo.DialTLSConfig).
// A handshake failure is retried in the background like any connection
// error; Poll reports what the consumer cannot fix by itself.
func DialTLSConfig(cfg *tls.Config) Opt { return connOpt(kgoclient.DialTLSConfig(cfg)) }

// SASL authenticates every connection with the first mechanism the broker
// supports (kgo.SASL). A failed authentication is retried in the
// background like any connection error.
func SASL(mechanisms ...sasl.Mechanism) Opt { return connOpt(kgoclient.SASL(mechanisms...)) }

// KgoOpts passes transport options (dialer, client id, request timeouts,
// version pins, ConnIdleTimeout, ...) to the underlying kgo.Client. kgo's
// consumer and group options have no effect: the Consumer does its own
// consuming. The Consumer raises kgo's ConnIdleTimeout to 10 minutes,
// because closing a share session's connection releases its records; a
// ConnIdleTimeout given here wins. New fails if kgo refuses an option.
func KgoOpts(opts ...kgo.Opt) Opt { return connOpt(kgoclient.KgoOpts(opts...)) }

// Logger sets the structured logger (default: discard). kgo's own log lines
// go to it too. A nil logger makes New fail.
func Logger(l *slog.Logger) Opt { return connOpt(kgoclient.Logger(l)) }
