// Package misuse_test holds kshare's public-API misuse tests: the
// regression tests of an adversarial review of the public API against
// what docs/api.md, the package documentation and docs/design.md
// ("Lifecycle") promise. Each test is named after the behaviour it pins,
// and its comment says which finding (F1 to F16, listed in CHANGELOG.md
// under the release that fixed them) it guards and what used to happen.
// It uses only the public packages (kshare, producer, shareconsumer,
// acknowledger) and the bundled cluster, as an application would.
package misuse_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/appenv"
	"github.com/kshare-go/kshare/shareconsumer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every test: a hang fails the test instead of the run.
const testTimeout = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// classes lists the kshare classes err matches.
func classes(err error) []error {
	var out []error
	for _, c := range []error{kshare.ErrAbortable, kshare.ErrInDoubt, kshare.ErrCommitted, kshare.ErrFatal,
		kshare.ErrUnsupported, kshare.ErrUsage, kshare.ErrClosed} {
		if errors.Is(err, c) {
			out = append(out, c)
		}
	}
	return out
}

// requireClass requires err to match exactly class among the kshare
// classes.
func requireClass(t *testing.T, class, err error, what string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(what, args...)
	require.Error(t, err, msg)
	require.Equal(t, []error{class}, classes(err), "%s: %v", msg, err)
}

// checkClass is requireClass that lets the test go on.
func checkClass(t *testing.T, class, err error, what string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(what, args...)
	if assert.Error(t, err, msg) {
		assert.Equal(t, []error{class}, classes(err), "%s: %v", msg, err)
	}
}

// env is a bundled cluster with an admin client (appenv), and this
// package's way to create a share consumer: with an explicit mode.
type env struct{ *appenv.Env }

func newEnv(t *testing.T, opts ...broker.Opt) *env { return &env{appenv.New(t, opts...)} }

func (e *env) consumer(t *testing.T, group, topic string, mode shareconsumer.AckMode, opts ...shareconsumer.Opt) *shareconsumer.Consumer {
	t.Helper()
	return e.Consumer(t, group, topic, append([]shareconsumer.Opt{shareconsumer.Mode(mode)}, opts...)...)
}

// startOffset returns the share group's start offset of partition 0 of
// topic (DescribeShareGroupOffsets): every offset below it is ACKNOWLEDGED
// or ARCHIVED.
func (e *env) startOffset(ctx context.Context, t *testing.T, group, topic string) int64 {
	t.Helper()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(ctx, e.Admin)
	require.NoError(t, err)
	require.Len(t, resp.Groups, 1)
	require.NoError(t, kerr.ErrorForCode(resp.Groups[0].ErrorCode))
	for _, rt := range resp.Groups[0].Topics {
		if rt.Topic != topic {
			continue
		}
		for _, rp := range rt.Partitions {
			if rp.Partition == 0 {
				return rp.StartOffset
			}
		}
	}
	return -1
}

// checkpointFixture is a transactional consumer whose two polled records
// (of "in", group "g") are staged in checkpoint 1 of an acknowledger.
type checkpointFixture struct {
	e    *env
	c    *shareconsumer.Consumer
	a    *acknowledger.Acknowledger
	acks *kshare.ShareAcks
}

func newCheckpointFixture(ctx context.Context, t *testing.T) *checkpointFixture {
	t.Helper()
	e := newEnv(t)
	e.Topic(ctx, t, "in", 1)
	e.Input(ctx, t, "in", "a", "b")
	c := e.consumer(t, "g", "in", shareconsumer.Transactional)
	recs := appenv.PollN(ctx, t, c, 2)
	a := e.Acknowledger(ctx, t, "ack")
	acks := c.Acks(recs, kshare.AckAccept)
	require.NoError(t, a.Stage(1, acks, c.GroupMetadata()))
	return &checkpointFixture{e: e, c: c, a: a, acks: acks}
}
