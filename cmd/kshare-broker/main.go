// Command kshare-broker runs kshare's bundled Kafka-compatible cluster as a
// process, for clients in other languages and for manual testing.
//
// When every node accepts connections it prints exactly one line on
// stdout,
//
//	kshare-broker ready bootstrap=HOST:PORT[,HOST:PORT...]
//
// and logs go to stderr. SIGINT or SIGTERM stops it cleanly. The debug
// switches reproduce upstream faults for tests and are off by default.
package main

import (
	"context"
	"flag"
	"fmt"
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
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kshare-broker:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("kshare-broker", flag.ContinueOnError)
	nodes := fs.Int("nodes", 1, "number of nodes")
	port := fs.Int("port", 0, "port of the first node; the others take the next ports (0 = any free ports)")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	shareTxn := fs.Bool("share-txn-apis", true, "serve the KIP-1289 APIs (AddShareAcksToTxn, TxnShareAcknowledge) and share.version=3")
	txnParts := fs.Int("txn-state-partitions", 6, "partitions of __transaction_state")
	offsetParts := fs.Int("offsets-partitions", 6, "partitions of __consumer_offsets")
	shareParts := fs.Int("share-state-partitions", 6, "partitions of __share_group_state")
	maxFrame := fs.Int("max-frame-bytes", 100<<20, "largest request frame accepted")
	maxBytes := fs.Int64("max-bytes", 0, "memory budget for stored records, in bytes; past it produce is refused with POLICY_VIOLATION (0 = none)")
	fetchMax := fs.Int("fetch-max-bytes", 55<<20, "largest Fetch or ShareFetch answer, in record bytes (Kafka's fetch.max.bytes)")
	txnExpiry := fs.Duration("transactional-id-expiration", 7*24*time.Hour, "forget transactional ids idle this long (Kafka's transactional.id.expiration.ms)")
	offsetsRetention := fs.Duration("offsets-retention", 7*24*time.Hour, "expire committed offsets of empty groups this long after (Kafka's offsets.retention.minutes)")
	producerExpiry := fs.Duration("producer-id-expiration", 24*time.Hour, "forget a partition's idle producer state after this long (Kafka's producer.id.expiration.ms)")
	retentionCheck := fs.Duration("retention-check-interval", 5*time.Minute, "enforce retention.ms and retention.bytes at most this often per partition (Kafka's log.retention.check.interval.ms)")
	readTimeout := fs.Duration("read-timeout", 30*time.Second, "close a connection whose request does not fully arrive within this")
	idleTimeout := fs.Duration("connections-max-idle", 10*time.Minute, "close connections idle this long (Kafka's connections.max.idle.ms)")
	maxConns := fs.Int("max-connections", 0, "close new connections past this many open ones (0 = no limit)")
	legacyMarkers := fs.Bool("legacy-marker-validation", false, "debug: check TV2 markers with the legacy rule (the gap KIP-1228 closes)")
	staleCoord := fs.Duration("legacy-stale-coordinator", 0, "debug: after a coordinator move the old coordinator answers from its cache for this long (KAFKA-21181)")
	lateMarkers := fs.Duration("late-marker-copies", 0, "debug: send every transaction marker once more after this delay")
	cgSession := fs.Duration("consumer-session-timeout", 45*time.Second, "default session timeout of KIP-848 consumer groups")
	oldNodes := fs.String("old-nodes", "", "comma-separated node ids that behave like brokers before KIP-1228: WriteTxnMarkers up to v1, every marker checked with the legacy rule (a cluster mid-upgrade)")
	cgHeartbeat := fs.Duration("consumer-heartbeat-interval", 5*time.Second, "default heartbeat interval of KIP-848 consumer group members")
	var groupDefaults []broker.Opt
	fs.Func("group-config", "NAME=VALUE: the default of a group config for every group that does not set its own, e.g. share.auto.offset.reset=earliest (repeatable)", func(s string) error {
		name, value, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return fmt.Errorf("%q is not NAME=VALUE", s)
		}
		groupDefaults = append(groupDefaults, broker.GroupConfigDefault(name, value))
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("-log-level %q: %w", *logLevel, err)
	}
	if *fetchMax < 1 || *fetchMax > math.MaxInt32 || *maxFrame < 0 || *maxFrame > math.MaxInt32 {
		return fmt.Errorf("-fetch-max-bytes %d and -max-frame-bytes %d must be in 1..%d", *fetchMax, *maxFrame, math.MaxInt32)
	}
	if *port < 0 || *port+*nodes-1 > 65535 {
		return fmt.Errorf("-port %d with %d nodes is out of range", *port, *nodes)
	}
	old, err := parseNodeIDs(*oldNodes)
	if err != nil {
		return fmt.Errorf("-old-nodes %q: %w", *oldNodes, err)
	}
	ports := make([]int, *nodes)
	if *port != 0 {
		for i := range ports {
			ports[i] = *port + i
		}
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	c, err := broker.NewCluster(append([]broker.Opt{
		broker.Nodes(*nodes),
		broker.Ports(ports...),
		broker.Host(*host),
		broker.Logger(logger),
		broker.ShareTxnAPIs(*shareTxn),
		broker.TxnStatePartitions(int32(*txnParts)),
		broker.ConsumerOffsetsPartitions(int32(*offsetParts)),
		broker.ShareStatePartitions(int32(*shareParts)),
		broker.MaxFrameBytes(int32(*maxFrame)),
		broker.MaxBytes(*maxBytes),
		broker.FetchMaxBytes(int32(*fetchMax)),
		broker.TransactionalIDExpiration(*txnExpiry),
		broker.OffsetsRetention(*offsetsRetention),
		broker.ProducerIDExpiration(*producerExpiry),
		broker.RetentionCheckInterval(*retentionCheck),
		broker.ReadTimeout(*readTimeout),
		broker.ConnectionsMaxIdle(*idleTimeout),
		broker.MaxConnections(*maxConns),
		broker.LegacyMarkerValidation(*legacyMarkers),
		broker.LegacyStaleCoordinator(*staleCoord),
		broker.LateMarkerCopies(*lateMarkers),
		broker.ConsumerGroupSessionTimeout(*cgSession),
		broker.ConsumerGroupHeartbeatInterval(*cgHeartbeat),
		broker.OldNodes(old...),
	}, groupDefaults...)...)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("kshare-broker ready bootstrap=%s\n", strings.Join(c.Bootstrap(), ","))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	logger.Info("signal received, stopping")
	return nil
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
