package differential_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kshare-go/kshare/integration/kafkatest"
)

// scenarioTimeout bounds one scenario on one target.
const scenarioTimeout = 2 * time.Minute

// scenario is one sequence of raw requests run the same way against both
// targets.
type scenario struct {
	name string
	run  func(ctx context.Context, tg *target, tr *transcript)
}

// scenarios, in the order they run. The share-group scenarios come last:
// their broker side was the last to be written.
var scenarios = []scenario{
	{"metadata", scenarioMetadata},
	{"create_topics", scenarioCreateTopics},
	{"delete_topics", scenarioDeleteTopics},
	{"produce_errors", scenarioProduceErrors},
	{"produce_idempotent", scenarioProduceIdempotent},
	{"fetch", scenarioFetch},
	{"fetch_read_committed", scenarioFetchReadCommitted},
	{"list_offsets", scenarioListOffsets},
	{"repeated_partitions", scenarioRepeatedPartitions},
	{"fetch_limits", scenarioFetchLimits},
	{"delete_records", scenarioDeleteRecords},
	{"init_producer_id", scenarioInitProducerID},
	{"init_fences_ongoing", scenarioInitFencesOngoing},
	{"txn_tv2_commit", scenarioTxnTV2Commit},
	{"txn_tv2_abort", scenarioTxnTV2Abort},
	{"txn_tv1", scenarioTxnTV1},
	{"txn_timeout", scenarioTxnTimeout},
	{"txn_offsets", scenarioTxnOffsets},
	{"txn_admin", scenarioTxnAdmin},
	{"find_coordinator", scenarioFindCoordinator},
	{"api_versions", scenarioApiVersions},
	{"group_configs", scenarioGroupConfigs},
	{"group_config_values", scenarioGroupConfigValues},
	{"share_heartbeat", scenarioShareHeartbeat},
	{"share_fetch", scenarioShareFetch},
	{"share_reset_by_duration", scenarioShareResetByDuration},
	{"share_isolation", scenarioShareIsolation},
	{"share_record_locks", scenarioShareRecordLocks},
	{"share_acknowledgements", scenarioShareAcknowledgements},
	{"share_offsets_admin", scenarioShareOffsetsAdmin},
	{"share_sessions", scenarioShareSessions},
	{"share_dlq", scenarioShareDLQ},
	{"produce_message_size", scenarioProduceMessageSize},
	{"consumer_heartbeat", scenarioConsumerHeartbeat},
	{"consumer_offsets", scenarioConsumerOffsets},
	{"consumer_group_types", scenarioConsumerGroupTypes},
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestDifferential runs every scenario against the real Kafka named by
// KSHARE_KAFKA_BOOTSTRAP and against a fresh bundled cluster, at the same
// time, and requires the two transcripts to be equal except for the steps
// knownDifferences lists.
func TestDifferential(t *testing.T) {
	seeds := kafkatest.Bootstrap(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var kafka, bundled *transcript
			t.Run("run", func(t *testing.T) {
				t.Run(kindKafka, func(t *testing.T) {
					t.Parallel()
					kafka = runScenario(t, sc, newTarget(t, kindKafka, seeds))
				})
				t.Run(kindBundled, func(t *testing.T) {
					t.Parallel()
					bundled = runScenario(t, sc, newBundledTarget(t))
				})
			})
			if kafka == nil || bundled == nil {
				t.Fatal("a target did not finish the scenario")
			}
			for _, p := range compareTranscripts(sc.name, kafka, bundled, knownDifferences) {
				t.Error(p)
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("transcripts of %s:\n%s", sc.name, sideBySide(kafka, bundled))
			}
		})
	}
}

func runScenario(t *testing.T, sc scenario, tg *target) *transcript {
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	tr := &transcript{}
	sc.run(ctx, tg, tr)
	return tr
}

// sideBySide renders both transcripts step by step for a failure report.
func sideBySide(kafka, bundled *transcript) string {
	var b strings.Builder
	for _, e := range kafka.entries {
		bv, _ := bundled.value(e.step)
		mark := "  "
		if bv != e.value {
			mark = "!="
		}
		b.WriteString(mark + " " + e.step + "\n\tkafka:   " + e.value + "\n\tbundled: " + bv + "\n")
	}
	return b.String()
}

// TestKnownDifferencesDocumented requires every allowed difference to name
// a scenario that exists and to be explained in docs/differences.md.
func TestKnownDifferencesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/differences.md")
	if err != nil {
		t.Fatal(err)
	}
	names := make(map[string]bool)
	for _, sc := range scenarios {
		if names[sc.name] {
			t.Errorf("scenario %q is listed twice", sc.name)
		}
		names[sc.name] = true
	}
	seen := make(map[string]bool)
	for _, d := range knownDifferences {
		if !names[d.scenario] {
			t.Errorf("known difference %s names no scenario", d.id())
		}
		if seen[d.id()] {
			t.Errorf("known difference %s is listed twice", d.id())
		}
		seen[d.id()] = true
		if d.why == "" {
			t.Errorf("known difference %s gives no reason", d.id())
		}
		if !strings.Contains(string(doc), "`"+d.id()+"`") {
			t.Errorf("docs/differences.md does not explain %s (it must name it as `%s`)", d.id(), d.id())
		}
	}
}
