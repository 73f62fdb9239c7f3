package benthos

import (
	"testing"
	"time"
)

// TestCopiesExactlyOnce runs input -> mapping -> output over N records:
// the committed output holds every input exactly once and the group has
// acknowledged every input, all through the output's transactions.
func TestCopiesExactlyOnce(t *testing.T) {
	c := newCluster(t)
	r := c.newRun(t, "copy", 3, 2000, 0)
	obs := &observed{}
	began := time.Now()
	p := start(t, testEnv(t, obs, nil), r.yaml(basicPipeline))
	r.waitAcknowledged(t, 2*time.Minute)
	p.stop(t, 30*time.Second)
	requireExactlyOnce(t, r.verify(t, nil, time.Since(began)))
}
