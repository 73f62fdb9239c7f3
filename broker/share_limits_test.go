package broker

import (
	"testing"

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
	resp := txnWire(t, c, 0, req).(*kmsg.ShareFetchResponse)
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
		for _, s := range c.coordinators.share.sessions {
			held += len(s.parts)
		}
	}))
	require.Equal(t, 2, held, "only the partitions that exist are in the session")

	// The next fetch of the session answers nothing for them.
	next := kmsg.NewPtrShareFetchRequest()
	next.Version = 2
	next.GroupID, next.MemberID = &m.group, &m.id
	next.ShareSessionEpoch = 1
	next.MaxRecords, next.MaxBytes = 500, 1<<20
	resp = txnWire(t, c, 0, next).(*kmsg.ShareFetchResponse)
	require.Zero(t, resp.ErrorCode)
	require.Empty(t, resp.Topics)
	require.Equal(t, 0, c.handlerPanics)
}
