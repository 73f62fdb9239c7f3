package broker

// Abuse benchmarks of state: idle and expiring transactional ids, empty
// share groups, a transactional pipeline's memory, and produced volume
// against retention and the memory budget. See abuse_bench_test.go.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// createTxnIDs initializes n transactional ids on the loop, as n
// InitProducerId requests would (without n round trips).
func createTxnIDs(b *testing.B, c *Cluster, n int) {
	b.Helper()
	var failed error
	require.NoError(b, c.do(func() {
		now := time.Now()
		for i := 0; i < n && failed == nil; i++ {
			id := fmt.Sprintf("abuse-txn-%d", i)
			node := c.coordinatorPartitionFor(coordinatorTxn, id).leader
			if _, _, err := c.coordinators.txn.initProducerID(node, id, 60000, nil, now); err != nil {
				failed = err
			}
		}
	}))
	require.NoError(b, failed)
}

// BenchmarkAbuseIdleTransactionalIDs: KSHARE_ABUSE_TXN_IDS (default
// 100000) transactional ids, then the process's CPU over
// KSHARE_ABUSE_WATCH (default 10s): left idle, and expiring during the
// window (TransactionalIDExpiration of 3s).
func BenchmarkAbuseIdleTransactionalIDs(b *testing.B) {
	ids := envInt("KSHARE_ABUSE_TXN_IDS", 100000)
	watch := envDuration("KSHARE_ABUSE_WATCH", 10*time.Second)
	for _, mode := range []string{"idle", "expiring"} {
		b.Run(mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var opts []Opt
				if mode == "expiring" {
					opts = abuseTxnExpiryOpts(3 * time.Second)
				}
				c, pr := abuseCluster(b, opts...)
				createTxnIDs(b, c, ids)
				time.Sleep(time.Second) // compactions triggered by the set-up
				pr.reset()
				cpu := cpuOver(watch)
				pr.finish(b)
				heap, _ := heapInUse()
				b.ReportMetric(cpu, "cpu-%")
				b.ReportMetric(float64(heap)/mib, "heap-MiB")
				var left int
				require.NoError(b, c.do(func() {
					for _, sh := range c.coordinators.txn.shards.loaded {
						left += len(sh.state.txns)
					}
				}))
				b.ReportMetric(float64(left), "ids-left")
				c.Close()
			}
		})
	}
}

// BenchmarkAbuseEmptyShareGroups: KSHARE_ABUSE_SHARE_GROUPS (default
// 10000) share groups whose one member joins, fetches and leaves; then
// the process's CPU over KSHARE_ABUSE_WATCH (default 10s).
func BenchmarkAbuseEmptyShareGroups(b *testing.B) {
	groups := envInt("KSHARE_ABUSE_SHARE_GROUPS", 10000)
	watch := envDuration("KSHARE_ABUSE_WATCH", 10*time.Second)
	for i := 0; i < b.N; i++ {
		c, pr := abuseCluster(b)
		require.NoError(b, c.do(func() { c.createTopic("shared", 1, nil, false) }))
		var topicID [16]byte
		require.NoError(b, c.do(func() { topicID = c.topics["shared"].id }))
		for g := 0; g < groups; g++ {
			group := fmt.Sprintf("abuse-share-%d", g)
			node := groupCoordinatorNode(b, c, group)
			hb := kmsg.NewPtrShareGroupHeartbeatRequest()
			hb.Version = 1
			hb.GroupID, hb.MemberID, hb.MemberEpoch = group, "m", 0
			hb.SubscribedTopicNames = []string{"shared"}
			requireOK(b, groupAwait(b, groupSend(b, c, node, hb)).(*kmsg.ShareGroupHeartbeatResponse).ErrorCode, "join")
			sf := kmsg.NewPtrShareFetchRequest()
			sf.Version = 2
			sf.GroupID, sf.MemberID = kmsg.StringPtr(group), kmsg.StringPtr("m")
			sf.MaxRecords, sf.MaxBytes = 10, 1<<20
			sf.Topics = []kmsg.ShareFetchRequestTopic{{TopicID: topicID, Partitions: []kmsg.ShareFetchRequestTopicPartition{{Partition: 0}}}}
			requireOK(b, shareFetchError(groupAwait(b, groupSend(b, c, 0, sf))), "fetch")
			hb.MemberEpoch = -1
			hb.SubscribedTopicNames = nil
			requireOK(b, groupAwait(b, groupSend(b, c, node, hb)).(*kmsg.ShareGroupHeartbeatResponse).ErrorCode, "leave")
		}
		time.Sleep(time.Second)
		pr.reset()
		cpu := cpuOver(watch)
		pr.finish(b)
		var n int
		require.NoError(b, c.do(func() { n = armedTimers(c) }))
		heap, _ := heapInUse()
		b.ReportMetric(cpu, "cpu-%")
		b.ReportMetric(float64(n), "timers-armed")
		b.ReportMetric(float64(heap)/mib, "heap-MiB")
		c.Close()
	}
}

// BenchmarkAbuseTransactionalPipeline: one transactional producer
// committing one record per transaction for KSHARE_ABUSE_PIPELINE
// (default 30s), its output topic bounded by retention.bytes (1 MiB), so
// that what the broker keeps is its state, not the data. Reports the
// heap's growth per commit from the first third of the run to the last
// (the lowest heap after GC in each: the logs grow and shrink in a saw
// tooth between retention checks and compactions), and the size of
// __transaction_state.
func BenchmarkAbuseTransactionalPipeline(b *testing.B) {
	run := envDuration("KSHARE_ABUSE_PIPELINE", 30*time.Second)
	for i := 0; i < b.N; i++ {
		c, pr := abuseCluster(b, abuseRetentionOpts(time.Second, 0)...)
		require.NoError(b, c.do(func() {
			c.createTopic("out", 1, map[string]string{"retention.bytes": fmt.Sprint(mib)}, false)
		}))
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.TransactionalID("abuse-pipeline"),
			kgo.DefaultProduceTopic("out"), kgo.RecordRetries(3))
		require.NoError(b, err)
		ctx := context.Background()
		commit := func() {
			require.NoError(b, cl.BeginTransaction())
			require.NoError(b, cl.ProduceSync(ctx, &kgo.Record{Value: []byte("payload")}).FirstErr())
			require.NoError(b, cl.EndTransaction(ctx, kgo.TryCommit))
		}
		for w := 0; w < 200; w++ {
			commit() // warm up: the first compactions, the client's buffers
		}
		pr.reset()
		type sample struct {
			commits int
			heap    uint64
		}
		var samples []sample
		start, commits := time.Now(), 0
		nextSample := start
		for time.Since(start) < run {
			commit()
			commits++
			if time.Now().After(nextSample) {
				heap, _ := heapInUse()
				samples = append(samples, sample{commits, heap})
				nextSample = time.Now().Add(run / 30)
			}
		}
		elapsed := time.Since(start)
		cl.Close()
		pr.finish(b)
		lowest := func(ss []sample) sample {
			low := ss[0]
			for _, s := range ss {
				if s.heap < low.heap {
					low = s
				}
			}
			return low
		}
		for _, s := range samples {
			b.Logf("after %d commits: heap %.2f MiB", s.commits, float64(s.heap)/mib)
		}
		third := len(samples) / 3
		early, late := lowest(samples[:third]), lowest(samples[len(samples)-third:])
		growth := (float64(late.heap) - float64(early.heap)) / float64(late.commits-early.commits)
		var txnState, stored int64
		require.NoError(b, c.do(func() {
			for _, p := range c.topics[wire.TransactionStateTopic].partitions {
				txnState += p.bytes
			}
			stored = storedBytesOf(c)
		}))
		b.ReportMetric(float64(commits), "commits")
		b.ReportMetric(float64(commits)/elapsed.Seconds(), "commits/s")
		b.ReportMetric(growth, "heap-B/commit")
		b.ReportMetric(float64(samples[len(samples)-1].heap)/mib, "heap-MiB")
		b.ReportMetric(float64(txnState)/1024, "txn-state-KiB")
		b.ReportMetric(float64(stored)/1024, "stored-KiB")
		c.Close()
	}
}

// BenchmarkAbuseProduceVolume: KSHARE_ABUSE_VOLUME_MB (default 1024) MiB
// produced in 1 MiB batches into a topic whose retention.bytes is 64 MiB
// (retention checked every second), then into a cluster whose MaxBytes is
// 128 MiB until it refuses. Reports the peak heap and, for the budget,
// the refusal.
func BenchmarkAbuseProduceVolume(b *testing.B) {
	volume := envInt("KSHARE_ABUSE_VOLUME_MB", 1024)
	produce := func(b *testing.B, c *Cluster, topic string, n int) (int, *kmsg.ProduceResponseTopicPartition) {
		rc := dialNode(b, c, 0)
		require.NoError(b, rc.conn.SetDeadline(time.Now().Add(time.Hour)))
		value := make([]byte, mib-100)
		peak := uint64(0)
		for i := 0; i < n; i++ {
			req := kmsg.NewPtrProduceRequest()
			req.Version = 9
			req.Acks, req.TimeoutMillis = -1, 30000
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = buildBatch([]kv{{value: value}}, -1, -1, -1, false, false, time.Now())
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp := rc.roundTrip(req, int32(i)).(*kmsg.ProduceResponse)
			if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 {
				return i, &p
			}
			if i%64 == 0 {
				heap, _ := heapInUse()
				peak = max(peak, heap)
			}
		}
		b.ReportMetric(float64(peak)/mib, "peak-heap-MiB")
		return n, nil
	}
	b.Run("retention-bytes", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c, pr := abuseCluster(b, abuseRetentionOpts(time.Second, 0)...)
			require.NoError(b, c.do(func() {
				c.createTopic("bulk", 1, map[string]string{"retention.bytes": fmt.Sprint(64 * mib)}, false)
			}))
			pr.reset()
			produce(b, c, "bulk", volume)
			time.Sleep(1500 * time.Millisecond) // one more retention check
			pr.finish(b)
			_, _, _, bytes := logShape(b, c, "bulk", 0)
			b.ReportMetric(float64(bytes)/mib, "kept-MiB")
			b.ReportMetric(float64(rssBytes(b))/mib, "rss-MiB")
			c.Close()
		}
	})
	b.Run("max-bytes", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c, pr := abuseCluster(b, abuseRetentionOpts(time.Second, 128*mib)...)
			require.NoError(b, c.do(func() { c.createTopic("bulk", 1, nil, false) }))
			pr.reset()
			accepted, refused := produce(b, c, "bulk", volume)
			pr.finish(b)
			require.NotNil(b, refused, "the budget must refuse")
			require.ErrorIs(b, kerr.ErrorForCode(refused.ErrorCode), kerr.PolicyViolation)
			b.Logf("refused after %d MiB: %s", accepted, *refused.ErrorMessage)
			b.ReportMetric(float64(accepted), "accepted-MiB")
			resp := dialNode(b, c, 0).roundTrip(fetchReq("bulk", 1<<20, 0, 0, fetchPart(0, 0, 1<<20)), 1).(*kmsg.FetchResponse)
			requireOK(b, resp.Topics[0].Partitions[0].ErrorCode, "reads go on")
			b.ReportMetric(float64(rssBytes(b))/mib, "rss-MiB")
			c.Close()
		}
	})
}
