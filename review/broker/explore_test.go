package brokerreview_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
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

func TestExploreShareJoin(t *testing.T) {
	if os.Getenv("EXPLORE") == "" {
		t.Skip()
	}
	c, _ := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	var names []string
	for i := 0; i < 10; i++ {
		names = append(names, fmt.Sprintf("w%02d", i))
		createTopic(t, rc, names[i], 10000, nil)
	}
	h0 := heapAfterGC()
	measure(t, p, "share join 1 topic x 10k", func() { shareJoin(t, rc, "sg1", "m", names[0]) })
	measure(t, p, "share join 10 topics x 10k", func() { shareJoin(t, rc, "sg2", "m", names...) })
	measure(t, p, "share heartbeat again", func() {
		req := kmsg.NewPtrShareGroupHeartbeatRequest()
		req.Version = 1
		req.GroupID, req.MemberID, req.MemberEpoch = "sg2", "m", 2
		rc.must(req)
	})
	t.Logf("heap +%d MiB", (heapAfterGC()-h0)>>20)
}

func offsetCommit(group, topic string, parts []int32, offset int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 8
	req.Group = group
	req.Generation = -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	for _, p := range parts {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

func TestExploreCompaction(t *testing.T) {
	if os.Getenv("EXPLORE") == "" {
		t.Skip()
	}
	c, _ := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	var names []string
	for i := 0; i < 30; i++ {
		names = append(names, fmt.Sprintf("w%02d", i))
		createTopic(t, rc, names[i], 10000, nil)
	}
	for round := 0; round < 3; round++ {
		measure(t, p, fmt.Sprintf("commit round %d", round), func() {
			for _, n := range names {
				rc.must(offsetCommit("big-group", n, seq(10000), int64(round)))
			}
		})
	}
}

func TestExploreRepeated(t *testing.T) {
	if os.Getenv("EXPLORE") == "" {
		t.Skip()
	}
	c, _ := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	createTopic(t, rc, "one", 1, nil)
	parts := make([]int32, 58000)
	req := offsetCommit("g1", "one", parts, 5)
	t.Logf("offset commit size %d", len(frame(req, 1)))
	measure(t, p, "OffsetCommit 58k mentions of one partition", func() { rc.must(req) })

	alter := kmsg.NewPtrAlterShareGroupOffsetsRequest()
	alter.GroupID = "sg-alter"
	at := kmsg.NewAlterShareGroupOffsetsRequestTopic()
	at.Topic = "one"
	for i := 0; i < 80000; i++ {
		ap := kmsg.NewAlterShareGroupOffsetsRequestTopicPartition()
		ap.StartOffset = int64(i)
		at.Partitions = append(at.Partitions, ap)
	}
	alter.Topics = append(alter.Topics, at)
	t.Logf("alter size %d", len(frame(alter, 1)))
	measure(t, p, "AlterShareGroupOffsets 80k mentions of one partition", func() { rc.must(alter) })
}

func TestExploreFakeCount(t *testing.T) {
	if os.Getenv("EXPLORE") == "" {
		t.Skip()
	}
	c, _ := startCluster(t, broker.GroupConfigDefault("share.auto.offset.reset", "earliest"))
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	id := createTopic(t, rc, "fake", 1, nil)
	b := recordBatch(batchSpec{values: [][]byte{[]byte("x")}, numRecords: 1<<31 - 1})
	resp := rc.must(produceRequest("fake", 0, b)).(*kmsg.ProduceResponse)
	t.Logf("produce %d-byte batch claiming 2^31-1 records: err %d base %d", len(b), resp.Topics[0].Partitions[0].ErrorCode, resp.Topics[0].Partitions[0].BaseOffset)
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 7
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "fake"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	t.Logf("end offset %d", rc.must(lo).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].Offset)
	shareJoin(t, rc, "sgf", "m", "fake")
	h0 := heapAfterGC()
	measure(t, p, "share fetch MaxRecords 3M", func() {
		req := shareFetch("sgf", "m", 0, id, []int32{0})
		req.MaxRecords = 3000000
		r := rc.must(req).(*kmsg.ShareFetchResponse)
		for _, tp := range r.Topics {
			for _, pp := range tp.Partitions {
				t.Logf("err %d acquired %v", pp.ErrorCode, len(pp.AcquiredRecords))
				for _, a := range pp.AcquiredRecords {
					t.Logf("  %d-%d", a.FirstOffset, a.LastOffset)
				}
			}
		}
	})
	t.Logf("heap +%d MiB", (heapAfterGC()-h0)>>20)
}

func TestExploreCGMembers(t *testing.T) {
	if os.Getenv("EXPLORE") == "" {
		t.Skip()
	}
	c, _ := startCluster(t, broker.ConsumerGroupSessionTimeout(3*time.Second))
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	createTopic(t, rc, "wide", 10000, nil)
	n := 200
	measure(t, p, "members join", func() {
		for i := 0; i < n; i++ {
			if i%25 == 0 {
				t.Logf("%v joined %d", time.Now().Format("15:04:05.000"), i)
			}
			r := rc.must(consumerJoin("g", fmt.Sprintf("member-%04d", i), "wide")).(*kmsg.ConsumerGroupHeartbeatResponse)
			if r.ErrorCode != 0 {
				t.Fatal(r.ErrorCode)
			}
		}
	})
	measure(t, p, "all expire", func() { time.Sleep(6 * time.Second) })
}
