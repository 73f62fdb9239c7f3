package benthos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kshare-go/kshare/integration/kafkatest"
	"github.com/kshare-go/kshare/internal/eos"
	"github.com/kshare-go/kshare/internal/testkit"
)

// TestLedgerOnRealKafkaPlain runs the ledger copy pipeline of
// TestLedgerOnRealKafkaKilledAndRestarted on the two-node Apache Kafka
// cluster without killing it: the run completes exactly once.
func TestLedgerOnRealKafkaPlain(t *testing.T) {
	two := kafkatest.Bootstrap2(t)
	const n, every, partitions = 3000, 10, 3
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name := fmt.Sprintf("benthos-ledgerplain-%d", time.Now().UnixNano())
	admin := testkit.Client(t, two.Seeds)
	c := &cluster{seeds: two.Seeds, admin: admin}
	r := &run{
		c: c, name: name,
		in: name + "-in", out: name + "-out", group: name + "-group",
		inputTxn: name + "-acks", outTxn: name + "-out-txn",
	}
	ledgerTopic := name + "-claims"
	adm := kadm.NewClient(admin)
	for _, topic := range []string{r.in, r.out, ledgerTopic} {
		resp, err := adm.CreateTopic(ctx, partitions, 2, nil, topic)
		require.NoError(t, err, "create %s", topic)
		require.NoError(t, resp.Err, "create %s", topic)
	}
	in, err := eos.WriteInput(ctx, two.Seeds, r.in, n, every, testLogger())
	require.NoError(t, err)
	r.input = in

	yaml := strings.Replace(basicPipeline, "\n    - mapping: root = content()\n", dropPoison, 1)
	yaml = strings.Replace(yaml, "    auto_offset_reset: earliest\n", "    auto_offset_reset: earliest\n    record_lock_duration: 5s\n    transaction_timeout: 10s\n", 1)
	yaml = strings.Replace(yaml, "    transactional_id: $OUTTXN\n", "    transactional_id: $OUTTXN\n    commit_timeout: 5s\n", 1)
	yaml = withLedger(t, yaml, ledgerTopic)
	began := time.Now()

	p := start(t, testEnv(t, &observed{}, nil), r.yaml(yaml))
	r.waitAcknowledged(t, 3*time.Minute)
	p.stop(t, 30*time.Second)
	res := r.verify(t, nil, time.Since(began))
	requireExactlyOnce(t, res)
	require.Equal(t, n/every, res.Rejected)
}
