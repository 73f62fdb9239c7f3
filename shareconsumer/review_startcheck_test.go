package shareconsumer_test

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// Review finding (fixed: the check looks at partitions as their first
// answers come): the one-time INFO about a group that began at the
// latest offset past existing records looks only at the partitions
// answered by the first ShareFetch answer that arrives. startCheckLoop
// wakes on the first noteFirstFetchLocked, copies began (the partitions
// noted so far), and turns the check off; partitions whose leader answers
// later are never looked at. With several leaders the log undercounts the
// skipped records, or, as here, says nothing at all: partition 0 (empty,
// node A) answers first, partition 1 (5 records written before the group
// began, node B) a moment later, and the 5 skipped records are never
// mentioned.
//
// Expected: the INFO names t/1 and its 5 skipped records.
func TestReviewStartAtLatestCheckSeesEveryLeader(t *testing.T) {
	e := newEnv(t, broker.Nodes(2))
	e.createTopic("t", 2)
	l0, err := e.c.Leader("t", 0)
	require.NoError(t, err)
	if l1, _ := e.c.Leader("t", 1); l1 == l0 {
		require.NoError(t, e.c.MoveLeader("t", 1, 1-l0))
	}
	l1, _ := e.c.Leader("t", 1)
	recs := make([]*kgo.Record, 5)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "t", Partition: 1, Value: []byte("old")}
	}
	require.NoError(t, e.admin.ProduceSync(e.ctx, recs...).FirstErr())

	// The leader of partition 1 answers its first ShareFetch after the
	// leader of partition 0 answered (held until the check is done, so
	// that the order is certain; a few milliseconds do the same).
	logs := &lineLog{}
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	stop := e.c.InjectFaults(func(node int32, _ string, req kmsg.Request) broker.FaultAction {
		if _, ok := req.(*kmsg.ShareFetchRequest); ok && node == l1 {
			<-gate
		}
		return broker.FaultAction{}
	})
	t.Cleanup(stop)
	c := e.consumer("g", "t", shareconsumer.Logger(slog.New(logs)))
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			if _, err := c.Poll(e.ctx); errors.Is(err, kshare.ErrClosed) || e.ctx.Err() != nil {
				return
			}
		}
	}()
	e.eventually("the start-offset check done", func() bool { return logs.has("start-offset check done") })
	open()
	// The INFO comes once partition 1's leader answered (the check looks
	// at partitions as their first answers come); a check that looked
	// only at the first answer never says it, and this times out.
	e.eventually("the INFO about t/1", func() bool { return logs.find("began reading partitions at their latest offset") != "" })
	line := logs.find("began reading partitions at their latest offset")
	require.Contains(t, line, "t/1 from offset 5", "the 5 records the group skipped in t/1 are never mentioned; logs:\n%s",
		strings.Join(logs.snapshot(), "\n"))
	require.NoError(t, c.Close(e.ctx))
	<-polled
}

func (l *lineLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}
