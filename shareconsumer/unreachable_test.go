package shareconsumer_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/shareconsumer"
)

// A consumer that has never reached a broker says so to a Poll whose
// context never ends, once, with the connection error, and then keeps
// trying (the next Poll waits again, within its context).
func TestPollReportsAClusterNeverReached(t *testing.T) {
	defer shareconsumer.SetUnreachableTimeout(time.Second)()
	addr := testkit.RefusedAddr(t)
	c, err := shareconsumer.New(shareconsumer.SeedBrokers(addr), shareconsumer.Group("g"), shareconsumer.Topics("t"))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close(context.Background())) }()

	done := make(chan error, 1)
	go func() {
		_, err := c.Poll(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, kshare.ErrAbortable)
		require.ErrorIs(t, err, syscall.ECONNREFUSED, "the connection error is named: %v", err)
		require.ErrorContains(t, err, addr)
	case <-time.After(30 * time.Second):
		t.Fatal("Poll did not report a cluster it never reached")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Poll(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "reported once: the next Poll waits within its context")
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "and names the connection error when its context ends: %v", err)
}

// A consumer that reached the cluster never gets that report.
func TestPollDoesNotReportAReachedCluster(t *testing.T) {
	e := newEnv(t)
	e.createTopic("t", 1)
	c := e.consumer("g", "t")
	e.eventually("the consumer joined", func() bool { return c.GroupMetadata().MemberEpoch > 0 })
	shareconsumer.CheckReached(c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := c.Poll(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "an idle topic: Poll waits until its context ends")
	require.NotErrorIs(t, err, syscall.ECONNREFUSED)
}
