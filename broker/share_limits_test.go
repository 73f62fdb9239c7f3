package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestShareFetchUnknownPartitionsStayOutOfTheSession: one ShareFetch
// naming 80,000 partitions that do not exist (an unknown topic id, and
// partitions past a real topic's count) is answered with one error entry
// per partition, and none of them enters the session: they once stayed,
// so every later fetch of the session answered them all again, and the
// answer was built by a scan per partition (seconds on the loop).
func TestShareFetchUnknownPartitionsStayOutOfTheSession(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	createTopic(t, c, "s", 2)
	m := shareJoin(t, c, "sg-unknown", "member-a", "s")
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 2
	req.GroupID, req.MemberID = &m.group, &m.id
	req.MaxRecords, req.MaxBytes = 500, 1<<20
	unknown := kmsg.NewShareFetchRequestTopic()
	unknown.TopicID = [16]byte{1, 2, 3}
	for p := int32(0); p < 70000; p++ {
		unknown.Partitions = append(unknown.Partitions, kmsg.ShareFetchRequestTopicPartition{Partition: p})
	}
	real := kmsg.NewShareFetchRequestTopic()
	real.TopicID = m.topicID("s")
	for p := int32(0); p < 10002; p++ {
		real.Partitions = append(real.Partitions, kmsg.ShareFetchRequestTopicPartition{Partition: p})
	}
	req.Topics = append(req.Topics, unknown, real)
	resp := m.wire(0, req).(*kmsg.ShareFetchResponse)
	require.Zero(t, resp.ErrorCode)
	codes := map[[16]byte]map[int16]int{}
	for _, rt := range resp.Topics {
		codes[rt.TopicID] = map[int16]int{}
		for _, rp := range rt.Partitions {
			codes[rt.TopicID][rp.ErrorCode]++
		}
	}
	require.Equal(t, map[int16]int{kerr.UnknownTopicID.Code: 70000}, codes[unknown.TopicID])
	require.Equal(t, map[int16]int{kerr.UnknownTopicOrPartition.Code: 10000}, codes[real.TopicID],
		"partitions 0 and 1 exist and have nothing to answer")

	var held int
	require.NoError(t, c.do(func() {
		for _, byNode := range c.coordinators.share.groups[m.group].sessions {
			for _, s := range byNode {
				held += len(s.parts)
			}
		}
	}))
	require.Equal(t, 2, held, "only the partitions that exist are in the session")

	// The next fetch of the session answers nothing for them.
	next := kmsg.NewPtrShareFetchRequest()
	next.Version = 2
	next.GroupID, next.MemberID = &m.group, &m.id
	next.ShareSessionEpoch = 1
	next.MaxRecords, next.MaxBytes = 500, 1<<20
	resp = m.wire(0, next).(*kmsg.ShareFetchResponse)
	require.Zero(t, resp.ErrorCode)
	require.Empty(t, resp.Topics)
	require.Equal(t, 0, c.handlerPanics)
}

// TestShareGroupJoinInitializesInSlices: a member joining a share group
// over 20,000 partitions gets them all assigned at once, but their share
// state is initialized a bounded slice per turn of the loop (it once was
// all in the heartbeat's turn: 8 s for 200,000), and all of it is there
// in the end.
func TestShareGroupJoinInitializesInSlices(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	var names []string
	for i := 0; i < 2; i++ {
		names = append(names, fmt.Sprintf("wide-%d", i))
		createTopic(t, c, names[i], 10000)
	}
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.MemberEpoch = "sg-wide", "member-a", 0
	req.SubscribedTopicNames = names
	resp := txnWire(t, c, 0, req).(*kmsg.ShareGroupHeartbeatResponse)
	require.Zero(t, resp.ErrorCode)
	assigned := 0
	for _, tp := range resp.Assignment.TopicPartitions {
		assigned += len(tp.Partitions)
	}
	require.Equal(t, 20000, assigned)

	// The deadline is only a hang guard.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var pending bool
		require.NoError(t, c.do(func() { pending = len(c.coordinators.share.initJobs) > 0 }))
		if !pending {
			break
		}
		require.True(t, time.Now().Before(deadline), "the initialization never finished")
		time.Sleep(20 * time.Millisecond)
	}
	var initialized, maxTurn int
	require.NoError(t, c.do(func() {
		sc := c.coordinators.share
		maxTurn = c.stats.shareInitsMaxTurn
		for _, name := range names {
			for p := int32(0); p < 10000; p++ {
				key := shareKey{group: "sg-wide", topicID: c.topics[name].id, partition: p}
				if sh, err := sc.stateShard(key); err == nil && sh.state.parts[key] != nil {
					initialized++
				}
			}
		}
	}))
	require.Equal(t, 20000, initialized)
	require.LessOrEqual(t, maxTurn, 1000, "one turn initialized more than a slice")
	require.Equal(t, shareInitsPerTurn, maxTurn)
	require.Equal(t, 0, c.handlerPanics)
}
