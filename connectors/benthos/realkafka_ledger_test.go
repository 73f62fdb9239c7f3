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

// TestLedgerOnRealKafkaKilledAndRestarted runs the copy pipeline with
// dropped poison messages and ledger_topic on Apache Kafka (the two-node
// cluster CI starts; input, output and ledger with two replicas), kills
// it (every connection of its clients cut at once) once a few hundred
// outputs were committed, and starts it again with the same ids: the run
// completes exactly once. Kafka releases the dead consumer's records when
// its connections close, the new producers fence the old ones and abort
// what they left open, and records whose commit went through but whose
// acknowledgement did not are resolved from the ledger.
// realKafkaLedgerRun creates, on the two-node Apache Kafka CI starts,
// the input, output and ledger topics of a ledger copy pipeline (three
// partitions, two replicas each), writes n inputs (every tenth poison),
// and returns the run, its pipeline config and the run's context.
func realKafkaLedgerRun(t *testing.T, prefix string, n int) (context.Context, *run, string) {
	t.Helper()
	two := kafkatest.Bootstrap2(t)
	const every, partitions = 10, 3
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
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
	return ctx, r, withLedger(t, yaml, ledgerTopic)
}

// TestLedgerOnRealKafkaPlain runs the ledger copy pipeline of
// TestLedgerOnRealKafkaKilledAndRestarted on the two-node Apache Kafka
// cluster without killing it: the run completes exactly once.
func TestLedgerOnRealKafkaPlain(t *testing.T) {
	const n, every = 3000, 10
	_, r, yaml := realKafkaLedgerRun(t, "benthos-ledgerplain", n)
	began := time.Now()
	p := start(t, testEnv(t, &observed{}, nil), r.yaml(yaml))
	r.waitAcknowledged(t, 3*time.Minute)
	p.stop(t, 30*time.Second)
	res := r.verify(t, nil, time.Since(began))
	requireExactlyOnce(t, res)
	require.Equal(t, n/every, res.Rejected)
}

func TestLedgerOnRealKafkaKilledAndRestarted(t *testing.T) {
	const n, every = 3000, 10
	ctx, r, yaml := realKafkaLedgerRun(t, "benthos-ledger", n)
	began := time.Now()

	ks := useKillSwitch(t)
	is := trackInstances(t)
	p := start(t, testEnv(t, &observed{}, nil), r.yaml(yaml))
	testkit.Eventually(ctx, t, "a few hundred outputs committed", func() bool {
		return is.out(func(m *outputMetrics) *counter { return m.acked }) >= 300
	})
	ks.kill()
	p.stopDead(t)
	acked := r.input.CountAcknowledged(r.startOffsets(t))
	t.Logf("killed after %d of %d inputs were acknowledged", acked, n)
	require.Less(t, acked, n, "the pipeline died before the end")

	useKillSwitch(t)
	p = start(t, testEnv(t, &observed{}, nil), r.yaml(yaml))
	r.waitAcknowledged(t, 3*time.Minute)
	p.stop(t, 30*time.Second)
	res := r.verify(t, nil, time.Since(began))
	requireExactlyOnce(t, res)
	require.Equal(t, n/every, res.Rejected)
}
