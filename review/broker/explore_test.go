package brokerreview_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestExploreMetadata(t *testing.T) {
	if os.Getenv("EXPLORE") == "" {
		t.Skip()
	}
	c, _ := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	for i := 0; i < 30; i++ {
		createTopic(t, rc, fmt.Sprintf("m%02d", i), 10000, nil)
	}
	measure(t, p, "Metadata all, 300k partitions", func() {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 12
		rc.must(req)
	})
	measure(t, p, "Metadata v3 auto-creating 50,000 topics", func() {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 3
		for i := 0; i < 50000; i++ {
			req.Topics = append(req.Topics, kmsg.MetadataRequestTopic{Topic: kmsg.StringPtr(fmt.Sprintf("auto-%06d", i))})
		}
		t.Logf("size %d", len(frame(req, 1)))
		rc.must(req)
	})
}
