package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Environment variables of the two-node cluster.
const (
	// EnvBootstrap2 names the bootstrap list of the two-node real Kafka
	// cluster that `integration/kafka/kafka.sh start --nodes 2` prints:
	// node 1 (broker and controller) first, then node 2 (broker only).
	EnvBootstrap2 = "KSHARE_KAFKA2_BOOTSTRAP"
	// EnvKafkaScript optionally names the kafka.sh that TwoNodes runs to stop
	// and start node 2; unset, it is integration/kafka/kafka.sh of the source
	// tree this package was compiled from.
	EnvKafkaScript = "KSHARE_KAFKA_SCRIPT"
)

// TwoNodes is the two-node real Kafka cluster of `kafka.sh start --nodes 2`:
// node 1 is broker and controller, node 2 only a broker, and every internal
// topic has one replica. Moving a partition of __transaction_state to the
// other node moves its transaction coordinator; stopping node 2 (StopNode2)
// makes the coordinators and partitions it hosts unavailable until
// StartNode2.
type TwoNodes struct {
	// Seeds are the bootstrap addresses, node 1's first.
	Seeds []string

	script string // kafka.sh
	port   string // node 1's client port: kafka.sh's --port for the cluster
}

// LookupBootstrap2 returns the two-node cluster named by
// KSHARE_KAFKA2_BOOTSTRAP. The error wraps ErrNotConfigured when the variable
// is unset or empty; it is a plain error when the list does not hold exactly
// two host:port entries or kafka.sh cannot be found.
func LookupBootstrap2() (*TwoNodes, error) {
	raw := strings.TrimSpace(os.Getenv(EnvBootstrap2))
	if raw == "" {
		return nil, fmt.Errorf("no two-node real Kafka: %s is %w (start one with integration/kafka/kafka.sh start --nodes 2)",
			EnvBootstrap2, ErrNotConfigured)
	}
	seeds, err := parseSeeds(EnvBootstrap2, raw)
	if err != nil {
		return nil, err
	}
	if len(seeds) != 2 {
		return nil, fmt.Errorf("%s=%q names %d brokers; the two-node cluster has exactly 2, node 1 first", EnvBootstrap2, raw, len(seeds))
	}
	_, port, err := net.SplitHostPort(seeds[0])
	if err != nil {
		return nil, fmt.Errorf("%s=%q: node 1's address: %w", EnvBootstrap2, raw, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return nil, fmt.Errorf("%s=%q: node 1's port %q is not a port number", EnvBootstrap2, raw, port)
	}
	script, err := kafkaScript()
	if err != nil {
		return nil, err
	}
	return &TwoNodes{Seeds: seeds, script: script, port: port}, nil
}

// kafkaScript finds kafka.sh: KSHARE_KAFKA_SCRIPT, or the one beside this
// package's sources.
func kafkaScript() (string, error) {
	if s := strings.TrimSpace(os.Getenv(EnvKafkaScript)); s != "" {
		if _, err := os.Stat(s); err != nil {
			return "", fmt.Errorf("%s names a kafka.sh that cannot be used: %w", EnvKafkaScript, err)
		}
		return s, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the kafkatest sources to find integration/kafka/kafka.sh; set " + EnvKafkaScript)
	}
	s := filepath.Join(filepath.Dir(file), "..", "kafka", "kafka.sh")
	if _, err := os.Stat(s); err != nil {
		return "", fmt.Errorf("integration/kafka/kafka.sh is not beside the kafkatest sources (set %s): %w", EnvKafkaScript, err)
	}
	return s, nil
}

// Bootstrap2 returns the two-node cluster for a test. When none is
// configured it skips the test, or fails it when the CI environment variable
// is "true", because CI must start it (kafka.sh start --nodes 2) and never
// skip these tests. A malformed value always fails the test. The first call
// of a process warms the cluster up (WarmUp).
func Bootstrap2(t testing.TB) *TwoNodes {
	t.Helper()
	c, err := LookupBootstrap2()
	if err != nil {
		missing(t, err, "CI must start a two-node real Kafka with integration/kafka/kafka.sh start --nodes 2 and export "+EnvBootstrap2)
		return nil
	}
	warm(t, c.Seeds)
	return c
}

// StopNode2 stops node 2 with `kafka.sh stop-node 2` (a controlled shutdown;
// it returns once the process has exited). The partitions whose only replica
// it holds, and the coordinators they carry, are unavailable until
// StartNode2. The error carries kafka.sh's output; ctx bounds the wait.
func (c *TwoNodes) StopNode2(ctx context.Context) error { return c.run(ctx, "stop-node") }

// StartNode2 starts node 2 again, with its data, with `kafka.sh start-node
// 2`, and returns once it has registered with the controller and serves.
// The error carries kafka.sh's output; ctx bounds the wait.
func (c *TwoNodes) StartNode2(ctx context.Context) error { return c.run(ctx, "start-node") }

func (c *TwoNodes) run(ctx context.Context, verb string) error {
	cmd := exec.CommandContext(ctx, c.script, verb, "2", "--port", c.port)
	// The Kafka JVM that start-node leaves running writes to its own log
	// files, not to these pipes; the delay only covers a killed script.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s 2 --port %s: %w\n%s", c.script, verb, c.port, err, out)
	}
	return nil
}
