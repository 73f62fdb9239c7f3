package benthos

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/eos"
)

// slowPipeline holds the first message of each batch for longer than the
// record lock (2.5 lock durations), as a slow processor would; the input
// renews what Benthos holds, and the share consumer what it fetched ahead.
const slowPipeline = `
input:
  kshare_share:
    seed_brokers: [ $SEEDS ]
    group: $GROUP
    topics: [ $IN ]
    transactional_id: $INTXN
    auto_offset_reset: earliest
    record_lock_duration: 1s
    max_poll_records: 50
    max_wait: 100ms
pipeline:
  threads: 2
  processors:
    - test_observe: {}
    - switch:
        - check: batch_index() == 0
          processors:
            - sleep:
                duration: 2500ms
output:
  kshare_txn:
    seed_brokers: [ $SEEDS ]
    transactional_id: $OUTTXN
    topic: $OUT
    key: ${! @kafka_key }
`

// TestSlowProcessorLosesNothing: processors slower than the record lock
// (a case the input supports) on clusters of 3 and 6 nodes, each leading
// some of the 10 input partitions. No input is lost or archived, and no
// delivery is used up unseen: the first delivery Benthos sees of every
// record is its first (delivery count 1). Before the share consumer
// renewed the records it fetched ahead of Poll, each leader's fetched-ahead
// records lost their locks while the processors held the previous batch,
// and a record could use up every delivery without reaching Benthos (the
// broker then archived it: 2 to 379 of 2,000 inputs lost in the runs that
// found it).
func TestSlowProcessorLosesNothing(t *testing.T) {
	const inputs = 600
	for _, nodes := range []int{3, 6} {
		t.Run(fmt.Sprintf("%d nodes", nodes), func(t *testing.T) {
			c := newCluster(t, broker.Nodes(nodes))
			r := c.newRun(t, fmt.Sprintf("slow%d", nodes), 10, inputs, 0)
			obs := &observed{}
			began := time.Now()
			p := start(t, testEnv(t, obs, nil), r.yaml(slowPipeline))
			r.waitAcknowledged(t, 3*time.Minute)
			p.stop(t, 30*time.Second)
			res := r.verify(t, nil, time.Since(began))
			requireExactlyOnce(t, res)
			require.Zero(t, res.ArchivedByFailure)
			for i := range inputs {
				seen := obs.of(eos.ID(i))
				require.NotEmpty(t, seen, "%s never reached Benthos", eos.ID(i))
				require.EqualValues(t, 1, seen[0], "%s reached Benthos first at delivery %d: earlier deliveries were used up unseen", eos.ID(i), seen[0])
			}
		})
	}
}
