// Package lifecycle_test holds the regression tests of an adversarial
// review of kshare's lifecycle paths: consumer-side faults and lost
// answers, Close racing commits and Polls, contexts ending while a call
// waits, lock renewal across leader moves. Public APIs and the bundled
// cluster only, as an application would use them.
package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hangGuard bounds every test: a hang fails instead of stalling the run.
const hangGuard = 90 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// env is a bundled cluster with an admin client (appenv); this package's
// clients are transactional and carry client ids the fault hooks match.
type env struct{ *appenv.Env }

func newEnv(t *testing.T, opts ...broker.Opt) *env { return &env{appenv.New(t, opts...)} }

func (e *env) consumer(t *testing.T, group, topic string, opts ...shareconsumer.Opt) *shareconsumer.Consumer {
	t.Helper()
	return e.Consumer(t, group, topic, append([]shareconsumer.Opt{
		shareconsumer.Mode(shareconsumer.Transactional), shareconsumer.KgoOpts(kgo.ClientID("lc-consumer")),
	}, opts...)...)
}

func (e *env) producer(ctx context.Context, t *testing.T, id string, opts ...producer.Opt) *producer.Producer {
	t.Helper()
	return e.Producer(ctx, t, id, append([]producer.Opt{producer.KgoOpts(kgo.ClientID("lc-producer"))}, opts...)...)
}

// cameBack learns what became of the n records of a one-partition topic
// once their transaction was settled, and returns how many of them a fresh
// member of group got: it polls until all n came back or the group
// acknowledged them (its start offset reached n), whichever happens, so
// that neither outcome depends on how much fits in a window. Once they
// are acknowledged it polls for 2 s more: any record that comes back then
// counts. Neither outcome within the test's context fails the test (some
// came back and the others stay acknowledged, say).
func (e *env) cameBack(ctx context.Context, t *testing.T, group, topic string, n int) int {
	t.Helper()
	fresh := e.consumer(t, group, topic)
	back := 0
	poll := func(within time.Duration) {
		pctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		for {
			rs, err := fresh.Poll(pctx)
			back += len(rs)
			if err != nil || back >= n {
				return
			}
		}
	}
	for back < n {
		start := testkit.StartOffsets(ctx, t, e.Admin, group, topic)[0]
		if start >= int64(n) {
			poll(2 * time.Second)
			return back
		}
		require.NoError(t, ctx.Err(), "%d of %d records came back and the group's start offset is %d", back, n, start)
		poll(200 * time.Millisecond)
	}
	return back
}
