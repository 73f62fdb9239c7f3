package brokerreview_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestExploreKafka(t *testing.T) {
	addr := os.Getenv("KAFKA")
	if addr == "" {
		t.Skip()
	}
	rc := dial(t, addr)
	createTopic(t, rc, "fake1", 1, nil)
	b := recordBatch(batchSpec{values: [][]byte{[]byte("x")}, numRecords: 1<<31 - 1})
	resp := rc.must(produceRequest("fake1", 0, b)).(*kmsg.ProduceResponse)
	pr := resp.Topics[0].Partitions[0]
	t.Logf("fake count: err %d base %d msg %v", pr.ErrorCode, pr.BaseOffset, pr.ErrorMessage)
	b = recordBatch(batchSpec{values: [][]byte{[]byte("x"), []byte("y")}, numRecords: 1})
	resp = rc.must(produceRequest("fake1", 0, b)).(*kmsg.ProduceResponse)
	pr = resp.Topics[0].Partitions[0]
	t.Logf("count too small: err %d base %d msg %v", pr.ErrorCode, pr.BaseOffset, pr.ErrorMessage)

	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	req.TimeoutMillis = 60000
	req.ValidateOnly = true
	for i := 0; i < 100; i++ {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = fmt.Sprintf("huge-%03d", i), 10000, 1
		req.Topics = append(req.Topics, rt)
	}
	cr := rc.must(req).(*kmsg.CreateTopicsResponse)
	for i, st := range cr.Topics {
		if i < 3 {
			t.Logf("create %s: err %d %v", st.Topic, st.ErrorCode, st.ErrorMessage)
		}
	}
}
