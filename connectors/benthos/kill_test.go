package benthos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
)

// killSwitch dials the connections of every client created while it is
// testDialer, and kills them all at once: what a process that dies does
// to its connections. After kill nothing it dialed sends anything, and
// nothing dials again.
type killSwitch struct {
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
}

var errKilled = errors.New("killed")

func (k *killSwitch) dial(ctx context.Context, network, host string) (net.Conn, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return nil, errKilled
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	k.conns = append(k.conns, c)
	return c, nil
}

func (k *killSwitch) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

// useKillSwitch makes the clients created from now on dial through a new
// kill switch.
func useKillSwitch(t *testing.T) *killSwitch {
	k := &killSwitch{}
	dial := k.dial
	testDialer.Store(&dial)
	t.Cleanup(func() { testDialer.Store(nil) })
	return k
}

// TestKilledMidBatchRestarts kills the pipeline in the middle of a
// transaction (every connection of its clients cut at once, so nothing
// is committed, aborted or released by it), stops what is left of it, and
// starts it again with the same ids. The new producer fences the old one
// and aborts its transaction, the records the dead consumer held come
// back, and the run completes exactly-once. Two places to die: after the
// batch's records were produced and before its acknowledgements were sent,
// and with the acknowledgements staged at the partition leaders, when the
// commit is sent.
func TestKilledMidBatchRestarts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		where string
	}{
		{"before acknowledgements", "before"},
		{"at commit", "commit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n, every = 3000, 10
			const killBatch, killAt = 100, 5
			c := newCluster(t)
			r := c.newRun(t, "kill-"+tc.where, 3, n, every)
			yaml := strings.Replace(basicPipeline, "\n    - mapping: root = content()\n", dropPoison, 1)
			yaml = strings.Replace(yaml, "    transactional_id: $OUTTXN\n", "    transactional_id: $OUTTXN\n    client_id: kill-out\n    commit_timeout: 3s\n", 1)
			// How many transactions the run has before it dies is set
			// here, not by how fast it runs. A fetch hands out whole
			// record batches (the input producer's: about a thousand
			// records each when it runs at full speed, a few dozen under
			// the race detector), so with one transaction per poll the
			// run could be three transactions long and never reach its
			// fifth. The pipeline that dies batches killBatch messages per
			// transaction (count only: it dies long before a batch could
			// be short), so it has at least (n-n/every)/killBatch
			// transactions of outputs; the restarted one needs no policy.
			doomed := strings.Replace(yaml, "    max_wait: 100ms\n", fmt.Sprintf("    max_wait: 100ms\n    batching:\n      count: %d\n", killBatch), 1)
			require.Contains(t, doomed, "batching:")
			require.GreaterOrEqual(t, (n-n/every)/killBatch, 2*killAt, "the run is long enough to die in the middle")
			began := time.Now()

			ks := useKillSwitch(t)
			killed := make(chan struct{})
			var once sync.Once
			doKill := func() { once.Do(func() { ks.kill(); close(killed) }) }
			var txns atomic.Int64
			switch tc.where {
			case "before":
				hook := func(ctx context.Context) error {
					if txns.Add(1) == killAt {
						doKill()
						return errKilled
					}
					return nil
				}
				beforeCommitHook.Store(&hook)
				t.Cleanup(func() { beforeCommitHook.Store(nil) })
			case "commit":
				stop := c.InjectFaults(func(_ int32, client string, req kmsg.Request) broker.FaultAction {
					if end, ok := req.(*kmsg.EndTxnRequest); ok && client == "kill-out" && end.Commit && txns.Add(1) == killAt {
						doKill()
						return broker.FaultAction{Fault: broker.DropRequest}
					}
					return broker.FaultAction{}
				})
				t.Cleanup(stop)
			}
			p := start(t, testEnv(t, &observed{}, nil), r.yaml(doomed))
			select {
			case <-killed:
			case <-time.After(time.Minute):
				t.Fatalf("the pipeline never reached its transaction %d (%d begun)", killAt, txns.Load())
			}
			// What is left of the dead pipeline stops, in the
			// background; it can reach no broker.
			p.stopDead(t)
			acked := r.input.CountAcknowledged(r.startOffsets(t))
			require.Less(t, acked, n, "the pipeline died before the end")
			t.Logf("killed after %d of %d inputs were acknowledged", acked, n)

			beforeCommitHook.Store(nil)
			useKillSwitch(t)
			p = start(t, testEnv(t, &observed{}, nil), r.yaml(yaml))
			r.waitAcknowledged(t, 2*time.Minute)
			p.stop(t, 30*time.Second)
			res := r.verify(t, nil, time.Since(began))
			requireExactlyOnce(t, res)
			require.Equal(t, n/every, res.Rejected)
		})
	}
}
