package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/integration/kafkatest"
)

// TestJavaClientsAgainstBundledBroker runs the Java reference clients
// (kafka-clients, the version CI fetches) against a 3-node bundled cluster:
// feature detection, a transactional KafkaProducer checked by a
// read_committed KafkaConsumer, and a KafkaShareConsumer with explicit
// acknowledgement. The runner exits non-zero on any mismatch.
func TestJavaClientsAgainstBundledBroker(t *testing.T) {
	runner := kafkatest.JavaClients(t)
	c, err := broker.NewCluster(broker.Nodes(3))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	out := kafkatest.RunJavaClients(ctx, t, runner, strings.Join(c.Bootstrap(), ","), "features", "txn", "share")
	for _, scenario := range []string{"features", "txn", "share"} {
		require.Contains(t, out, "PASS "+scenario+":", "scenario %s", scenario)
	}
	t.Log(out)
}
