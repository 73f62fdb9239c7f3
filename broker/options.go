package broker

import (
	"log/slog"
	"time"
)

// Opt configures a Cluster; see NewCluster.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	nodes    int
	ports    []int
	host     string
	logger   *slog.Logger
	maxFrame int32

	txnStatePartitions   int32
	offsetsPartitions    int32
	shareStatePartitions int32
	defaultPartitions    int32

	maxTxnTimeout       time.Duration
	producerIDExpiry    time.Duration
	firstProducerEpoch  int16
	shareTxnAPIsEnabled bool

	groupSessionTimeoutMax time.Duration
	// consumerSessionTimeout and consumerHeartbeatInterval are the
	// defaults of KIP-848 consumer groups (Kafka's
	// group.consumer.session.timeout.ms and heartbeat.interval.ms).
	consumerSessionTimeout    time.Duration
	consumerHeartbeatInterval time.Duration
	shareLockDuration         time.Duration
	// shareMinLock and shareMaxLock bound share.record.lock.duration.ms
	// (Kafka's group.share.min/max.record.lock.duration.ms).
	shareMinLock, shareMaxLock time.Duration
	// shareLockDurationSet says ShareLockDuration was given: a default
	// that was not is moved into the bounds instead of refused.
	shareLockDurationSet bool
	shareDeliveryLimit   int32
	shareMaxFetchRecords int32
	// groupDefaults are GroupConfigDefault's: group config name -> the
	// value every group has unless it sets its own.
	groupDefaults map[string]string

	legacyMarkerValidation bool
	// oldNodes are nodes that serve WriteTxnMarkers up to v1 only
	// (mixed_versions.go).
	oldNodes map[int32]bool
	// versionCaps are APIVersionCap's: key -> node -> the newest version
	// that node serves (node allNodes: every node).
	versionCaps            map[int16]map[int32]int16
	legacyStaleCoordinator time.Duration
	lateMarkerCopies       time.Duration
	// lateCopiesOnNext is LateMarkerCopiesOnNextTransaction's bound.
	lateCopiesOnNext time.Duration
	// maxFetchWait caps the long poll of Fetch and ShareFetch; a client's
	// MaxWaitMillis is an int32 and could park a request for weeks.
	maxFetchWait time.Duration

	fetchMaxBytes          int32
	txnIDExpiration        time.Duration
	offsetsRetention       time.Duration
	retentionCheckInterval time.Duration
	maxBytes               int64
	readTimeout            time.Duration
	connectionsMaxIdle     time.Duration
	maxConnections         int
	// compactMinBytes is how much a coordinator partition's log may grow
	// past twice its size after the last compaction before it is
	// compacted again; tests lower it.
	compactMinBytes int64
	// compactKeep is how long compaction keeps a coordinator log's records
	// as they were appended: a reader that follows the log (a tool tailing
	// __share_group_state) and lags by less loses none of its history.
	compactKeep time.Duration
	// dlqTopicPrefix and dlqAutoCreate are Kafka's broker configs
	// errors.deadletterqueue.topic.name.prefix and
	// errors.deadletterqueue.auto.create.topics.enable (share_dlq.go).
	dlqTopicPrefix string
	dlqAutoCreate  bool
}

func defaultConfig() config {
	return config{
		nodes:                     1,
		host:                      "127.0.0.1",
		logger:                    slog.New(slog.DiscardHandler),
		maxFrame:                  100 << 20,
		txnStatePartitions:        6,
		offsetsPartitions:         6,
		shareStatePartitions:      6,
		defaultPartitions:         1,
		maxTxnTimeout:             15 * time.Minute,
		producerIDExpiry:          24 * time.Hour,
		shareTxnAPIsEnabled:       true,
		groupSessionTimeoutMax:    30 * time.Minute,
		consumerSessionTimeout:    45 * time.Second,
		consumerHeartbeatInterval: 5 * time.Second,
		shareLockDuration:         30 * time.Second,
		shareMinLock:              time.Second,
		shareMaxLock:              time.Hour,
		shareDeliveryLimit:        5,
		shareMaxFetchRecords:      500,
		maxFetchWait:              30 * time.Second,
		fetchMaxBytes:             55 << 20,
		txnIDExpiration:           7 * 24 * time.Hour,
		offsetsRetention:          7 * 24 * time.Hour,
		retentionCheckInterval:    5 * time.Minute,
		readTimeout:               30 * time.Second,
		connectionsMaxIdle:        10 * time.Minute,
		compactMinBytes:           1 << 20,
		compactKeep:               time.Minute,
		dlqTopicPrefix:            "dlq.",
	}
}

// Nodes sets how many nodes the cluster runs (default 1). Node ids are
// 0..n-1; every partition is led by exactly one of them.
func Nodes(n int) Opt { return optFunc(func(c *config) { c.nodes = n }) }

// Ports sets the listening port of each node, in node order; 0 (or a missing
// entry) picks any free port.
func Ports(ports ...int) Opt { return optFunc(func(c *config) { c.ports = ports }) }

// Host sets the loopback host the nodes listen on (default 127.0.0.1).
func Host(host string) Opt { return optFunc(func(c *config) { c.host = host }) }

// Logger sets the structured logger (default: discard).
func Logger(l *slog.Logger) Opt { return optFunc(func(c *config) { c.logger = l }) }

// MaxFrameBytes sets the largest request frame a node reads (default
// 100 MiB). A larger frame closes its connection.
func MaxFrameBytes(n int32) Opt { return optFunc(func(c *config) { c.maxFrame = n }) }

// TxnStatePartitions sets the partition count of __transaction_state
// (default 6).
func TxnStatePartitions(n int32) Opt { return optFunc(func(c *config) { c.txnStatePartitions = n }) }

// ConsumerOffsetsPartitions sets the partition count of __consumer_offsets
// (default 6).
func ConsumerOffsetsPartitions(n int32) Opt {
	return optFunc(func(c *config) { c.offsetsPartitions = n })
}

// ShareStatePartitions sets the partition count of __share_group_state
// (default 6).
func ShareStatePartitions(n int32) Opt {
	return optFunc(func(c *config) { c.shareStatePartitions = n })
}

// DefaultPartitions sets the partition count of topics created without one
// (default 1).
func DefaultPartitions(n int32) Opt { return optFunc(func(c *config) { c.defaultPartitions = n }) }

// MaxTransactionTimeout caps the transaction timeout a producer may ask for
// in InitProducerId (default 15 minutes, Kafka's
// transaction.max.timeout.ms); a larger request gets
// INVALID_TRANSACTION_TIMEOUT.
func MaxTransactionTimeout(d time.Duration) Opt {
	return optFunc(func(c *config) { c.maxTxnTimeout = d })
}

// FirstProducerEpoch sets the epoch a new producer id starts at (default 0).
// Tests set it near 32767 to reach producer-id exhaustion quickly.
func FirstProducerEpoch(e int16) Opt { return optFunc(func(c *config) { c.firstProducerEpoch = e }) }

// ShareTxnAPIs turns the KIP-1289 API (TxnShareAcknowledge, key 95 v0, as
// apache/kafka PR #22357 has it) and the finalized share.version=3 on or
// off (default on). Off, the broker looks like a KIP-932 broker without
// KIP-1289 (share.version=1), and so, as Kafka below share.version=2, it
// writes no share-group dead-letter records.
func ShareTxnAPIs(enabled bool) Opt {
	return optFunc(func(c *config) { c.shareTxnAPIsEnabled = enabled })
}

// ShareLockDuration sets the default acquisition lock duration of share
// groups (default 30s, Kafka's group.share.record.lock.duration.ms); a group
// overrides it with the share.record.lock.duration.ms group config. It must
// lie within ShareLockDurationBounds; without it, the 30s default is moved
// into them.
func ShareLockDuration(d time.Duration) Opt {
	return optFunc(func(c *config) { c.shareLockDuration, c.shareLockDurationSet = d, true })
}

// ShareLockDurationBounds sets the bounds of the share.record.lock.duration.ms
// group config, as Kafka's group.share.min.record.lock.duration.ms and
// group.share.max.record.lock.duration.ms do (default 1s and 1h; Kafka's
// are 15s and 60s, see docs/differences.md). A group that asks for a lock
// outside them is refused with INVALID_CONFIG; ShareLockDuration, if given,
// must lie within them (the 30s default is moved into them). Locks shorter than Kafka allows are for tests of lock
// expiry: lower min only for them. min must be at least 1ms.
func ShareLockDurationBounds(min, max time.Duration) Opt {
	return optFunc(func(c *config) { c.shareMinLock, c.shareMaxLock = min, max })
}

// ConsumerGroupSessionTimeout sets the default session timeout of KIP-848
// consumer groups (default 45s, Kafka's
// group.consumer.session.timeout.ms): a member that does not heartbeat for
// that long is fenced. A group overrides it with consumer.session.timeout.ms
// (within Kafka's bounds, 45s to 60s); tests set a short default here.
func ConsumerGroupSessionTimeout(d time.Duration) Opt {
	return optFunc(func(c *config) { c.consumerSessionTimeout = d })
}

// ConsumerGroupHeartbeatInterval sets the heartbeat interval KIP-848
// consumer group members are told to use (default 5s, Kafka's
// group.consumer.heartbeat.interval.ms); a group overrides it with
// consumer.heartbeat.interval.ms. A member learns of a new assignment at
// its next heartbeat, so this paces rebalances.
func ConsumerGroupHeartbeatInterval(d time.Duration) Opt {
	return optFunc(func(c *config) { c.consumerHeartbeatInterval = d })
}

// ShareDeliveryLimit sets the default delivery count limit of share groups
// (default 5); a group overrides it with share.delivery.count.limit.
func ShareDeliveryLimit(n int32) Opt { return optFunc(func(c *config) { c.shareDeliveryLimit = n }) }

// DLQTopicNamePrefix sets the prefix a share group's dead-letter topic
// (errors.deadletterqueue.topic.name) must have for dead-letter records to
// be written to it, as Kafka's broker config
// errors.deadletterqueue.topic.name.prefix does (default "dlq."; "" allows
// any name not starting with "__"). A group whose topic lacks it still has
// its records archived, without dead-letter records.
func DLQTopicNamePrefix(prefix string) Opt {
	return optFunc(func(c *config) { c.dlqTopicPrefix = prefix })
}

// DLQAutoCreateTopics makes the broker create a share group's missing
// dead-letter topic on the first dead-letter record, with the default
// partition count and errors.deadletterqueue.group.enable=true, as Kafka's
// broker config errors.deadletterqueue.auto.create.topics.enable does
// (default false: a missing topic gets no dead-letter records).
func DLQAutoCreateTopics(on bool) Opt {
	return optFunc(func(c *config) { c.dlqAutoCreate = on })
}

// GroupConfigDefault sets the value every group has for the group config
// name (for example "share.auto.offset.reset", "earliest") unless the
// group sets its own with IncrementalAlterConfigs. It overrides Kafka's
// default and, for the lock duration and the delivery limit,
// ShareLockDuration and ShareDeliveryLimit. NewCluster fails on an
// unknown name or a value the config refuses. A cluster for tests or a
// first program that writes its input before its consumers join wants
// "share.auto.offset.reset" set to "earliest".
func GroupConfigDefault(name, value string) Opt {
	return optFunc(func(c *config) {
		if c.groupDefaults == nil {
			c.groupDefaults = make(map[string]string)
		}
		c.groupDefaults[name] = value
	})
}

// LegacyMarkerValidation is a debug switch reproducing the gap KIP-1228
// closes: partition leaders check TV2 markers with the legacy rule
// (markerEpoch >= current) instead of markerEpoch > current.
func LegacyMarkerValidation(on bool) Opt {
	return optFunc(func(c *config) { c.legacyMarkerValidation = on })
}

// OldNodes makes the given nodes behave like brokers from before KIP-1228
// in a cluster being upgraded: they advertise WriteTxnMarkers up to v1
// only (ApiVersions), refuse v2 with UNSUPPORTED_VERSION, and so check
// every marker with the legacy rule (markerEpoch >= current). Transaction
// coordinators learn this through ApiVersions and send them v1 markers
// (a coordinator on an old node sends v1 everywhere), as KIP-1228's
// fallback says. Every node is new by default; ids must be nodes of the
// cluster.
func OldNodes(ids ...int32) Opt {
	return optFunc(func(c *config) {
		c.oldNodes = make(map[int32]bool, len(ids))
		for _, id := range ids {
			c.oldNodes[id] = true
		}
	})
}

// APIVersionCap makes the given nodes (every node when none is named) serve
// API key only up to version max, as a broker of an older release would:
// they advertise it so in ApiVersions and refuse newer versions with
// UNSUPPORTED_VERSION. A max below the key's oldest version makes them not
// serve the key at all. It is for testing clients against older and
// mixed-version clusters (for example a node that does not serve
// TxnShareAcknowledge, with a cap of -1). Options for the same key add up;
// a node named twice keeps the last cap. Keys must be ones the broker serves, other
// than AddPartitionsToTxn and WriteTxnMarkers, which the nodes send each
// other (OldNodes models older WriteTxnMarkers), and ids nodes of the
// cluster; NewCluster refuses anything else.
func APIVersionCap(key, max int16, nodes ...int32) Opt {
	return optFunc(func(c *config) {
		if c.versionCaps == nil {
			c.versionCaps = make(map[int16]map[int32]int16)
		}
		if c.versionCaps[key] == nil {
			c.versionCaps[key] = make(map[int32]int16)
		}
		if len(nodes) == 0 {
			c.versionCaps[key][allNodes] = max
		}
		for _, id := range nodes {
			c.versionCaps[key][id] = max
		}
	})
}

// allNodes is APIVersionCap's "every node".
const allNodes int32 = -1

// LegacyStaleCoordinator is a debug switch reproducing KAFKA-21181: when a
// coordinator partition's leadership moves, the old coordinator keeps
// answering from its cache for d before it resigns. Zero (default) checks
// leadership before every answer.
func LegacyStaleCoordinator(d time.Duration) Opt {
	return optFunc(func(c *config) { c.legacyStaleCoordinator = d })
}

// LateMarkerCopies is a debug switch: every transaction marker the
// coordinator sends is sent once more d later, as a coordinator that lost a
// response and retried late would. Zero (default) disables it.
func LateMarkerCopies(d time.Duration) Opt {
	return optFunc(func(c *config) { c.lateMarkerCopies = d })
}

// LateMarkerCopiesOnNextTransaction is a debug switch: every transaction
// marker is sent once more when the same producer's next transaction
// first writes to one of the marker's partitions (at the latest maxWait
// after the marker), the moment at which a late copy does the most harm:
// a leader that checks it with the legacy rule (OldNodes,
// LegacyMarkerValidation) commits or aborts that next transaction's
// records with it. Unlike LateMarkerCopies, whose copies meet an open
// transaction only when timing allows, it makes that meeting certain,
// for tests that must see the harm. Zero (default) disables it.
func LateMarkerCopiesOnNextTransaction(maxWait time.Duration) Opt {
	return optFunc(func(c *config) { c.lateCopiesOnNext = maxWait })
}

// FetchMaxBytes caps the record bytes of one Fetch or ShareFetch answer
// (default 55 MiB, Kafka's fetch.max.bytes): a request asking for more gets
// at most this much (but always at least one batch, as in Kafka).
func FetchMaxBytes(n int32) Opt { return optFunc(func(c *config) { c.fetchMaxBytes = n }) }

// ProducerIDExpiration sets how long a partition keeps the state of a
// producer that wrote nothing and has no open transaction (default 24h,
// Kafka's producer.id.expiration.ms). An expired producer may start again
// at any sequence, as in Kafka.
func ProducerIDExpiration(d time.Duration) Opt {
	return optFunc(func(c *config) { c.producerIDExpiry = d })
}

// TransactionalIDExpiration sets how long a transactional id with no
// transaction in progress is kept after its last update (default 7 days,
// Kafka's transactional.id.expiration.ms). An expired id is forgotten:
// its next InitProducerId starts it afresh with a new producer id.
func TransactionalIDExpiration(d time.Duration) Opt {
	return optFunc(func(c *config) { c.txnIDExpiration = d })
}

// OffsetsRetention sets how long committed offsets outlive their group's
// last member (default 7 days, Kafka's offsets.retention.minutes), with
// Kafka's rules: an empty group's offsets expire that long after it became
// empty, a group without a protocol (offsets committed from outside any
// membership) loses each offset that long after its commit, and a stable
// consumer group loses the offsets of topics it no longer subscribes to.
// An empty group whose offsets are all gone is deleted.
func OffsetsRetention(d time.Duration) Opt {
	return optFunc(func(c *config) { c.offsetsRetention = d })
}

// RetentionCheckInterval sets how often, at most, a partition's
// retention.ms and retention.bytes are enforced (default 5 minutes, Kafka's
// log.retention.check.interval.ms).
func RetentionCheckInterval(d time.Duration) Opt {
	return optFunc(func(c *config) { c.retentionCheckInterval = d })
}

// MaxBytes sets a budget for the record bytes the cluster keeps in memory,
// over all partitions (default 0: none). Past it, Produce is answered with
// POLICY_VIOLATION and a message naming the limit; reads, deletions and
// the coordinators' own writes go on. The budget counts stored batches, not
// the process's whole heap.
func MaxBytes(n int64) Opt { return optFunc(func(c *config) { c.maxBytes = n }) }

// ReadTimeout bounds how long one request may take to arrive once its
// first byte has (default 30s): a connection that declares a frame and
// then stalls is closed.
func ReadTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.readTimeout = d }) }

// ConnectionsMaxIdle closes connections that send nothing for d between
// requests (default 10 minutes, Kafka's connections.max.idle.ms). A request
// waiting for its answer (a long poll) does not count as idle.
func ConnectionsMaxIdle(d time.Duration) Opt {
	return optFunc(func(c *config) { c.connectionsMaxIdle = d })
}

// MaxConnections limits the connections open at once over all nodes
// (default 0: no limit). A connection past the limit is closed as soon as
// it is accepted.
func MaxConnections(n int) Opt { return optFunc(func(c *config) { c.maxConnections = n }) }
