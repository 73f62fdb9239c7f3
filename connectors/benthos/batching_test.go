package benthos

import (
	"strings"
	"testing"
	"time"
)

// TestBatchingPeriodFlushes batches the input by a count that the input
// never reaches and a period: every batch is flushed by its period, and
// the run is exactly-once. (The input used to wait for UntilNext to say
// 0, which it never does: past the period it says 1ns, and the input
// polled in a loop without flushing.)
func TestBatchingPeriodFlushes(t *testing.T) {
	const n = 150
	c := newCluster(t)
	r := c.newRun(t, "period", 1, n, 0)
	yaml := strings.Replace(basicPipeline, "    max_wait: 100ms\n", "    max_wait: 100ms\n    batching:\n      count: 1000\n      period: 50ms\n", 1)
	began := time.Now()
	p := start(t, testEnv(t, &observed{}, nil), r.yaml(yaml))
	r.waitAcknowledged(t, time.Minute)
	p.stop(t, 30*time.Second)
	requireExactlyOnce(t, r.verify(t, nil, time.Since(began)))
}
