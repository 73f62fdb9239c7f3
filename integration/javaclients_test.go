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
// read_committed KafkaConsumer, a KafkaShareConsumer with explicit
// acknowledgement (ACCEPT, RELEASE, REJECT and RENEW), and a
// consume-transform-produce loop whose KafkaConsumer uses the KIP-848
// protocol (group.protocol=consumer) and commits its offsets with
// sendOffsetsToTransaction. The runner exits non-zero on any mismatch.
func TestJavaClientsAgainstBundledBroker(t *testing.T) {
	runner := kafkatest.JavaClients(t)
	c, err := broker.NewCluster(broker.Nodes(3))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	scenarios := []string{"features", "txn", "share", "ctp"}
	out := kafkatest.RunJavaClients(ctx, t, runner, strings.Join(c.Bootstrap(), ","), scenarios...)
	for _, scenario := range scenarios {
		require.Contains(t, out, "PASS "+scenario+":", "scenario %s", scenario)
	}
	t.Log(out)
}
