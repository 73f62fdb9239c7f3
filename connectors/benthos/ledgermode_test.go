package benthos

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
)

// withLedger gives the input and the output of a pipeline template the
// same claim ledger topic.
func withLedger(t *testing.T, tmpl, topic string) string {
	t.Helper()
	out := strings.Replace(tmpl, "    transactional_id: $INTXN\n", "    transactional_id: $INTXN\n    ledger_topic: "+topic+"\n", 1)
	out = strings.Replace(out, "    transactional_id: $OUTTXN\n", "    transactional_id: $OUTTXN\n    ledger_topic: "+topic+"\n", 1)
	require.Equal(t, 2, strings.Count(out, "ledger_topic: "+topic), "both components name the ledger")
	return out
}

// resolvedFromLedger sums what the inputs' consumers resolved from the
// claim ledger.
func (is *instances) resolvedFromLedger() int64 {
	is.mu.Lock()
	defer is.mu.Unlock()
	var n int64
	for _, in := range is.inputs {
		if in.cons != nil {
			n += in.cons.Metrics().ResolvedFromLedger
		}
	}
	return n
}

// TestLedgerCopiesExactlyOnceWithoutKIP1289 runs the copy pipeline, with
// dropped poison messages, on a cluster without KIP-1289 (the bundled
// broker as Apache Kafka is released): with ledger_topic on the input and
// the output, every input is output exactly once and acknowledged, the
// dropped ones by the input's own acknowledger; without it, the input
// refuses to connect and names ledger_topic.
func TestLedgerCopiesExactlyOnceWithoutKIP1289(t *testing.T) {
	const n, every = 2000, 10
	c := newCluster(t, broker.ShareTxnAPIs(false))
	r := c.newRun(t, "ledger-copy", 3, n, every)
	yaml := strings.Replace(basicPipeline, "\n    - mapping: root = content()\n", dropPoison, 1)

	// Without a ledger, the input's Connect is refused and says what to
	// set.
	in := inputOf(t, r.yaml(yaml))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := in.Connect(ctx)
	require.ErrorIs(t, err, kshare.ErrUnsupported)
	require.ErrorContains(t, err, "give the input and its outputs the same ledger_topic")
	require.NoError(t, in.Close(ctx))

	is := trackInstances(t)
	began := time.Now()
	p := start(t, testEnv(t, &observed{}, nil), r.yaml(withLedger(t, yaml, "ledger-copy-claims")))
	r.waitAcknowledged(t, 2*time.Minute)
	p.stop(t, 30*time.Second)
	res := r.verify(t, nil, time.Since(began))
	requireExactlyOnce(t, res)
	require.Equal(t, n/every, res.Rejected)
	require.EqualValues(t, n/every, is.in(func(m *inputMetrics) *counter { return m.accepted }), "dropped records accepted by the input's acknowledger")
}

// TestLedgerKilledAfterCommitRestarts kills the pipeline (every connection
// of its clients cut) after a transaction committed and before the plain
// acknowledgements that follow it reached the leader: the records come
// back to the restarted pipeline, which finds their committed claims in
// the ledger and acknowledges them without writing them again.
func TestLedgerKilledAfterCommitRestarts(t *testing.T) {
	const n, every, killAt = 3000, 10, 3
	c := newCluster(t, broker.ShareTxnAPIs(false))
	r := c.newRun(t, "ledger-kill", 3, n, every)
	yaml := strings.Replace(basicPipeline, "\n    - mapping: root = content()\n", dropPoison, 1)
	yaml = strings.Replace(yaml, "    transactional_id: $INTXN\n", "    transactional_id: $INTXN\n    client_id: kill-in\n    transaction_timeout: 5s\n", 1)
	yaml = strings.Replace(yaml, "    transactional_id: $OUTTXN\n", "    transactional_id: $OUTTXN\n    client_id: kill-out\n    commit_timeout: 3s\n", 1)
	yaml = withLedger(t, yaml, "ledger-kill-claims")
	began := time.Now()

	ks := useKillSwitch(t)
	killed := make(chan struct{})
	var once sync.Once
	var commits atomic.Int64
	stop := c.InjectFaults(func(_ int32, client string, req kmsg.Request) broker.FaultAction {
		switch req := req.(type) {
		case *kmsg.EndTxnRequest:
			if client == "kill-out" && req.Commit {
				commits.Add(1)
			}
		case *kmsg.ShareAcknowledgeRequest:
			// The plain acknowledgements of a committed ledger
			// transaction, once killAt commits were sent: the answer
			// to the last commit has come, since its records are
			// being acknowledged.
			if client == "kill-in" && commits.Load() >= killAt && carriesAccept(req) {
				once.Do(func() { ks.kill(); close(killed) })
				return broker.FaultAction{Fault: broker.DropRequest}
			}
		}
		return broker.FaultAction{}
	})
	t.Cleanup(stop)
	p := start(t, testEnv(t, &observed{}, nil), r.yaml(yaml))
	select {
	case <-killed:
	case <-time.After(time.Minute):
		t.Fatalf("the pipeline never acknowledged after its commit %d (%d committed)", killAt, commits.Load())
	}
	p.stopDead(t)
	stop()

	useKillSwitch(t)
	is := trackInstances(t)
	p = start(t, testEnv(t, &observed{}, nil), r.yaml(yaml))
	r.waitAcknowledged(t, 2*time.Minute)
	p.stop(t, 30*time.Second)
	res := r.verify(t, nil, time.Since(began))
	requireExactlyOnce(t, res)
	require.Equal(t, n/every, res.Rejected)
	require.Positive(t, is.resolvedFromLedger(), "the restarted pipeline resolved the committed records from the ledger")
}

// inputOf builds the kshare_share input of a pipeline config, unconnected.
func inputOf(t *testing.T, yaml string) *shareInput {
	t.Helper()
	section := yaml[strings.Index(yaml, "  kshare_share:\n")+len("  kshare_share:\n") : strings.Index(yaml, "\npipeline:")]
	lines := strings.Split(section, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "    ")
	}
	conf, err := inputSpec().ParseYAML(strings.Join(lines, "\n"), service.NewEnvironment())
	require.NoError(t, err)
	in, err := newShareInput(conf, service.MockResources())
	require.NoError(t, err)
	return in
}

// carriesAccept reports whether a ShareAcknowledge accepts records.
func carriesAccept(req *kmsg.ShareAcknowledgeRequest) bool {
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			for _, b := range p.AcknowledgementBatches {
				for _, typ := range b.AcknowledgeTypes {
					if typ == 1 {
						return true
					}
				}
			}
		}
	}
	return false
}
