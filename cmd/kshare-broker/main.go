// Command kshare-broker runs kshare's bundled Kafka-compatible cluster as a
// process, for clients in other languages and for manual testing.
//
// When every node accepts connections it prints exactly one line on
// stdout,
//
//	kshare-broker ready bootstrap=HOST:PORT[,HOST:PORT...]
//
// and logs go to stderr. SIGINT or SIGTERM stops it cleanly (exit 0), as
// -h does after printing the flags. A command line it refuses (an unknown
// flag, a bad value, a stray argument) or a cluster that cannot start (a
// port in use) exits 2 with the reason on stderr. The debug switches
// reproduce upstream faults for tests and are off by default.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kshare-go/kshare/broker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes of the command.
const (
	exitOK    = 0 // stopped by a signal, or -h
	exitUsage = 2 // refused command line, or a cluster that cannot start
)

// run runs the command with args until ctx ends, printing the ready line
// on stdout and everything else on stderr, and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, logger, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "kshare-broker:", err)
		return exitUsage
	}
	c, err := broker.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(stderr, "kshare-broker:", err)
		return exitUsage
	}
	defer c.Close()
	fmt.Fprintf(stdout, "kshare-broker ready bootstrap=%s\n", strings.Join(c.Bootstrap(), ","))
	<-ctx.Done()
	logger.Info("signal received, stopping")
	return exitOK
}

// parse reads the command line into the cluster's options and its logger
// (on stderr). The flag package reports a flag it cannot parse on stderr
// itself, and -h prints the flags there; the error is then flag.ErrHelp.
func parse(args []string, stderr io.Writer) ([]broker.Opt, *slog.Logger, error) {
	fs, flags := newFlagSet(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if fs.NArg() > 0 {
		return nil, nil, fmt.Errorf("unexpected argument %q: every setting is a flag", fs.Arg(0))
	}
	return flags.options(stderr)
}

// flagValues holds what newFlagSet's flags parse to.
type flagValues struct {
	nodes, port, txnParts, offsetParts, shareParts, maxFrame, fetchMax, maxConns *int
	host, logLevel, oldNodes                                                     *string
	shareTxn, legacyMarkers                                                      *bool
	maxBytes                                                                     *int64
	txnExpiry, offsetsRetention, producerExpiry, retentionCheck                  *time.Duration
	readTimeout, idleTimeout, staleCoord, lateMarkers, cgSession, cgHeartbeat    *time.Duration
	minLock, maxLock                                                             *time.Duration
	groupDefaults                                                                []broker.Opt
}

// newFlagSet defines the command's flags on a flag set that reports to
// stderr.
func newFlagSet(stderr io.Writer) (*flag.FlagSet, *flagValues) {
	fs := flag.NewFlagSet("kshare-broker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	v := &flagValues{}
	v.nodes = fs.Int("nodes", 1, "number of nodes, at least 1")
	v.port = fs.Int("port", 0, "port of the first node; the others take the next ports (0 = any free ports)")
	v.host = fs.String("host", "127.0.0.1", "address to listen on")
	v.logLevel = fs.String("log-level", "info", "debug, info, warn or error")
	v.shareTxn = fs.Bool("share-txn-apis", true, "serve KIP-1289's TxnShareAcknowledge (key 95 v0, as apache/kafka PR #22357 has it) and share.version=3")
	v.txnParts = fs.Int("txn-state-partitions", 6, "partitions of __transaction_state")
	v.offsetParts = fs.Int("offsets-partitions", 6, "partitions of __consumer_offsets")
	v.shareParts = fs.Int("share-state-partitions", 6, "partitions of __share_group_state")
	v.maxFrame = fs.Int("max-frame-bytes", 100<<20, "largest request frame accepted")
	v.maxBytes = fs.Int64("max-bytes", 0, "memory budget for stored records, in bytes; past it produce is refused with POLICY_VIOLATION (0 = none)")
	v.fetchMax = fs.Int("fetch-max-bytes", 55<<20, "largest Fetch or ShareFetch answer, in record bytes (Kafka's fetch.max.bytes)")
	v.txnExpiry = fs.Duration("transactional-id-expiration", 7*24*time.Hour, "forget transactional ids idle this long (Kafka's transactional.id.expiration.ms)")
	v.offsetsRetention = fs.Duration("offsets-retention", 7*24*time.Hour, "expire committed offsets of empty groups this long after (Kafka's offsets.retention.minutes)")
	v.producerExpiry = fs.Duration("producer-id-expiration", 24*time.Hour, "forget a partition's idle producer state after this long (Kafka's producer.id.expiration.ms)")
	v.retentionCheck = fs.Duration("retention-check-interval", 5*time.Minute, "enforce retention.ms and retention.bytes at most this often per partition (Kafka's log.retention.check.interval.ms)")
	v.readTimeout = fs.Duration("read-timeout", 30*time.Second, "close a connection whose request does not fully arrive within this")
	v.idleTimeout = fs.Duration("connections-max-idle", 10*time.Minute, "close connections idle this long (Kafka's connections.max.idle.ms)")
	v.maxConns = fs.Int("max-connections", 0, "close new connections past this many open ones (0 = no limit)")
	v.legacyMarkers = fs.Bool("legacy-marker-validation", false, "debug: check TV2 markers with the legacy rule (the gap KIP-1228 closes)")
	v.staleCoord = fs.Duration("legacy-stale-coordinator", 0, "debug: after a coordinator move the old coordinator answers from its cache for this long (KAFKA-21181)")
	v.lateMarkers = fs.Duration("late-marker-copies", 0, "debug: send every transaction marker once more after this delay")
	v.cgSession = fs.Duration("consumer-session-timeout", 45*time.Second, "default session timeout of KIP-848 consumer groups")
	v.oldNodes = fs.String("old-nodes", "", "comma-separated node ids that behave like brokers before KIP-1228: WriteTxnMarkers up to v1, every marker checked with the legacy rule (a cluster mid-upgrade)")
	v.cgHeartbeat = fs.Duration("consumer-heartbeat-interval", 5*time.Second, "default heartbeat interval of KIP-848 consumer group members")
	v.minLock = fs.Duration("min-lock-duration", time.Second, "shortest share.record.lock.duration.ms a share group may set (Kafka's group.share.min.record.lock.duration.ms, 15s there); lower it only to test lock expiry")
	v.maxLock = fs.Duration("max-lock-duration", time.Hour, "longest share.record.lock.duration.ms a share group may set (Kafka's group.share.max.record.lock.duration.ms, 60s there)")
	fs.Func("group-config", "NAME=VALUE: the default of a group config for every group that does not set its own, e.g. share.auto.offset.reset=earliest (repeatable)", func(s string) error {
		name, value, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return fmt.Errorf("%q is not NAME=VALUE", s)
		}
		v.groupDefaults = append(v.groupDefaults, broker.GroupConfigDefault(name, value))
		return nil
	})
	return fs, v
}

// options checks the values that the broker package cannot see whole (an
// int flag past int32 would be cut short on the way) and returns the
// cluster's options; the broker package checks the rest when the cluster
// starts.
func (v *flagValues) options(stderr io.Writer) ([]broker.Opt, *slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(*v.logLevel)); err != nil {
		return nil, nil, fmt.Errorf("-log-level %q: %w", *v.logLevel, err)
	}
	if *v.fetchMax < 1 || *v.fetchMax > math.MaxInt32 || *v.maxFrame < 0 || *v.maxFrame > math.MaxInt32 {
		return nil, nil, fmt.Errorf("-fetch-max-bytes %d and -max-frame-bytes %d must be in 1..%d", *v.fetchMax, *v.maxFrame, math.MaxInt32)
	}
	if *v.nodes < 1 || *v.nodes > math.MaxUint16 {
		return nil, nil, fmt.Errorf("-nodes %d: must be in 1..%d", *v.nodes, math.MaxUint16)
	}
	for _, p := range []struct {
		name string
		n    int
	}{{"txn-state-partitions", *v.txnParts}, {"offsets-partitions", *v.offsetParts}, {"share-state-partitions", *v.shareParts}} {
		if p.n < 1 || p.n > math.MaxInt32 {
			return nil, nil, fmt.Errorf("-%s %d: must be in 1..%d", p.name, p.n, math.MaxInt32)
		}
	}
	if *v.port < 0 || *v.port+*v.nodes-1 > 65535 {
		return nil, nil, fmt.Errorf("-port %d with %d nodes is out of range", *v.port, *v.nodes)
	}
	old, err := parseNodeIDs(*v.oldNodes)
	if err != nil {
		return nil, nil, fmt.Errorf("-old-nodes %q: %w", *v.oldNodes, err)
	}
	ports := make([]int, *v.nodes)
	if *v.port != 0 {
		for i := range ports {
			ports[i] = *v.port + i
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	return append([]broker.Opt{
		broker.Nodes(*v.nodes),
		broker.Ports(ports...),
		broker.Host(*v.host),
		broker.Logger(logger),
		broker.ShareTxnAPIs(*v.shareTxn),
		broker.TxnStatePartitions(int32(*v.txnParts)),
		broker.ConsumerOffsetsPartitions(int32(*v.offsetParts)),
		broker.ShareStatePartitions(int32(*v.shareParts)),
		broker.MaxFrameBytes(int32(*v.maxFrame)),
		broker.MaxBytes(*v.maxBytes),
		broker.FetchMaxBytes(int32(*v.fetchMax)),
		broker.TransactionalIDExpiration(*v.txnExpiry),
		broker.OffsetsRetention(*v.offsetsRetention),
		broker.ProducerIDExpiration(*v.producerExpiry),
		broker.RetentionCheckInterval(*v.retentionCheck),
		broker.ReadTimeout(*v.readTimeout),
		broker.ConnectionsMaxIdle(*v.idleTimeout),
		broker.MaxConnections(*v.maxConns),
		broker.LegacyMarkerValidation(*v.legacyMarkers),
		broker.LegacyStaleCoordinator(*v.staleCoord),
		broker.LateMarkerCopies(*v.lateMarkers),
		broker.ConsumerGroupSessionTimeout(*v.cgSession),
		broker.ConsumerGroupHeartbeatInterval(*v.cgHeartbeat),
		broker.ShareLockDurationBounds(*v.minLock, *v.maxLock),
		broker.OldNodes(old...),
	}, v.groupDefaults...), logger, nil
}

// parseNodeIDs parses a comma-separated list of node ids; "" is none.
func parseNodeIDs(s string) ([]int32, error) {
	if s == "" {
		return nil, nil
	}
	var out []int32
	for _, part := range strings.Split(s, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(part), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a node id: %w", part, err)
		}
		out = append(out, int32(id))
	}
	return out, nil
}
