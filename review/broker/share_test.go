package brokerreview_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// shareJoin makes member join share group group subscribed to topics and
// returns its epoch.
func shareJoin(t testing.TB, rc *rawConn, group, member string, topics ...string) int32 {
	t.Helper()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.MemberEpoch = group, member, 0
	req.SubscribedTopicNames = topics
	resp := rc.must(req).(*kmsg.ShareGroupHeartbeatResponse)
	require.Zero(t, resp.ErrorCode, "%v", resp.ErrorMessage)
	return resp.MemberEpoch
}

// shareFetch builds a ShareFetch v1 of the given partitions of topicID.
func shareFetch(group, member string, epoch int32, topicID [16]byte, partitions []int32) *kmsg.ShareFetchRequest {
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 1
	req.GroupID, req.MemberID = kmsg.StringPtr(group), kmsg.StringPtr(member)
	req.ShareSessionEpoch = epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = 0, 1, 1<<20, 500, 500
	if len(partitions) > 0 {
		rt := kmsg.NewShareFetchRequestTopic()
		rt.TopicID = topicID
		for _, p := range partitions {
			rp := kmsg.NewShareFetchRequestTopicPartition()
			rp.Partition = p
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req
}

func seq(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// TestShareFetchOfManyUnknownPartitionsDoesNotFreezeTheBroker: a member of
// a share group opens a share session with one ShareFetch (< 1 MiB)
// naming 80,000 partitions of a topic id that does not exist (480 KiB).
//
// Today: every partition goes into the session (s.parts), and fetchInto
// answers each with UNKNOWN_TOPIC_ID through shareFetchPartitionResp
// (share_session.go), which finds the partition's entry by a linear scan
// of the answer's partitions: O(N^2) on the loop. Measured: the prober
// waited 3.4 s with 60,000, 15-23 s with 100,000, 38 s with 150,000
// (still < 1 MiB). Worse,
// the partitions stay in the session, so every later ShareFetch of the
// session pays the same again (the second measurement), and further
// requests add more: a session's partition set is unbounded, in memory
// and in the work of each of its fetches. Kafka builds the answer with a
// map (linear), and the session should refuse partitions it cannot
// serve rather than keep them.
func TestShareFetchOfManyUnknownPartitionsDoesNotFreezeTheBroker(t *testing.T) {
	c, pl := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	createTopic(t, rc, "s", 1, nil)
	shareJoin(t, rc, "sg", "member-a", "s")
	req := shareFetch("sg", "member-a", 0, [16]byte{1, 2, 3}, seq(80000))
	require.Less(t, len(frame(req, 1)), 1<<20)
	var resp *kmsg.ShareFetchResponse
	worst := measure(t, p, "ShareFetch of 80,000 unknown partitions", func() {
		resp = rc.must(req).(*kmsg.ShareFetchResponse)
	})
	require.Zero(t, resp.ErrorCode)
	require.Empty(t, pl.count())
	assert.Less(t, worst, freezeBound, "one ShareFetch stalled every other client")
	// The session keeps them: the next (empty) fetch of the session
	// must not pay for them again either.
	worst = measure(t, p, "next ShareFetch of the same session", func() {
		rc.must(shareFetch("sg", "member-a", 1, [16]byte{}, nil))
	})
	require.Less(t, worst, freezeBound, "a later ShareFetch of the session stalled every other client")
}

// TestShareGroupJoinOverManyPartitionsDoesNotFreezeTheBroker: a member
// joins a share group with one small ShareGroupHeartbeat subscribing to
// 20 topics of 10,000 partitions each (each created within Kafka's 10,000
// partitions-per-request limit).
//
// Today: the heartbeat answers with every partition of every topic
// (shareAssignment) and initializes the share state of all 200,000
// share-partitions at once (initAssigned -> initState -> writeState, one
// JSON record appended to __share_group_state each), on the loop; the
// burst then makes the state log compact, again in one turn. Measured:
// 79 ms for one 10,000-partition topic, a 4.2 s stall for 10 topics, ~8 s
// for 20 here. The state written never goes: share groups do not expire
// and compaction keeps one snapshot per share-partition (+42 MiB of live
// heap for 100,000). Kafka initializes share-partitions asynchronously
// (the share coordinator's InitializeShareGroupState, in batches, off the
// request path) and assigns partitions among members.
func TestShareGroupJoinOverManyPartitionsDoesNotFreezeTheBroker(t *testing.T) {
	c, pl := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	var names []string
	for i := 0; i < 20; i++ {
		names = append(names, fmt.Sprintf("wide-%02d", i))
		createTopic(t, rc, names[i], 10000, nil)
	}
	worst := measure(t, p, "share group join over 20 x 10,000 partitions", func() {
		shareJoin(t, rc, "sg-wide", "member-a", names...)
	})
	require.Empty(t, pl.count())
	require.Less(t, worst, freezeBound, "one share heartbeat stalled every other client")
}
