package brokerreview_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCreateTopicsBoundsPartitionsPerRequest: one CreateTopics of 2 KiB
// asking for 100 topics of 10,000 partitions each: a million partitions.
//
// Today: every topic is under maxPartitionsPerTopic (10,000), and nothing
// bounds the request's total, so the loop creates the million partitions
// in one turn: measured a 1.1 s stall of every client and +436 MiB of
// live heap from a 1.8 KiB request, heap that never comes back (topics
// live until deleted); a 1 MiB request names 50,000 such topics, enough
// to exhaust any machine's memory. Since KAFKA-17870 (Kafka 3.9/4.0) the
// controller refuses a CreateTopics whose partitions add up to more than
// 10,000 with POLICY_VIOLATION "Excessively large number of partitions
// per request."
func TestCreateTopicsBoundsPartitionsPerRequest(t *testing.T) {
	c, pl := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	req.TimeoutMillis = 60000
	for i := 0; i < 100; i++ {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = fmt.Sprintf("huge-%03d", i), 10000, 1
		req.Topics = append(req.Topics, rt)
	}
	heapBefore := heapAfterGC()
	var resp *kmsg.CreateTopicsResponse
	measure(t, p, "CreateTopics 100 x 10,000 partitions", func() {
		resp = rc.must(req).(*kmsg.CreateTopicsResponse)
	})
	t.Logf("request %d bytes; live heap %+.0f MiB", len(frame(req, 1)), (float64(heapAfterGC())-float64(heapBefore))/(1<<20))
	require.Empty(t, pl.count())
	created := 0
	for _, st := range resp.Topics {
		if st.ErrorCode == 0 {
			created += int(st.NumPartitions)
		}
	}
	require.LessOrEqual(t, created, 10000, "one request created %d partitions", created)
	for _, st := range resp.Topics {
		require.Equal(t, kerr.PolicyViolation.Code, st.ErrorCode, "topic %s", st.Topic)
	}
}
