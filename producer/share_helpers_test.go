package producer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/testkit"
)

// shareMember is a share-group member driven with raw ShareGroupHeartbeat
// and ShareFetch requests, so that a test knows exactly which records it
// holds (the kshare share consumer is another package's job).
type shareMember struct {
	t        *testing.T
	c        *broker.Cluster
	cl       *kgo.Client
	group    string
	id       string
	epoch    int32
	topic    string
	topicID  [16]byte
	sessions map[int32]int32 // node -> next share session epoch
}

// joinShareGroup joins group, subscribed to topic, reading from the start.
func joinShareGroup(t *testing.T, c *broker.Cluster, group, topic string, configs ...string) *shareMember {
	t.Helper()
	cl := newClient(t, c)
	testkit.SetGroupConfigs(testCtx(t), t, cl, group, append([]string{"share.auto.offset.reset", "earliest"}, configs...)...)
	idBytes := make([]byte, 16)
	_, _ = rand.Read(idBytes)
	m := &shareMember{t: t, c: c, cl: cl, group: group, id: hex.EncodeToString(idBytes), topic: topic, sessions: map[int32]int32{}}
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(testCtx(t), cl)
	require.NoError(t, err)
	m.topicID = mresp.Topics[0].TopicID

	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.MemberEpoch, hb.SubscribedTopicNames = group, m.id, 0, []string{topic}
	resp, err := hb.RequestWith(testCtx(t), cl)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	m.epoch = resp.MemberEpoch
	return m
}

// metadata returns the member's group metadata for the producer.
func (m *shareMember) metadata() kshare.ShareGroupMetadata {
	return kshare.ShareGroupMetadata{GroupID: m.group, MemberID: m.id, MemberEpoch: m.epoch}
}

// acquire fetches partition until it holds want records (or, with want 0,
// once) and returns the acquired offsets with their delivery counts.
func (m *shareMember) acquire(ctx context.Context, partition int32, want int) map[int64]int16 {
	m.t.Helper()
	out := make(map[int64]int16)
	for {
		leader, err := m.c.Leader(m.topic, partition)
		require.NoError(m.t, err)
		req := kmsg.NewPtrShareFetchRequest()
		req.GroupID, req.MemberID = &m.group, &m.id
		req.ShareSessionEpoch = m.sessions[leader]
		req.MaxWaitMillis, req.MaxBytes, req.MaxRecords = 200, 1<<20, 500
		rt := kmsg.NewShareFetchRequestTopic()
		rt.TopicID = m.topicID
		rp := kmsg.NewShareFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes = partition, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := m.cl.Broker(int(leader)).Request(ctx, req)
		require.NoError(m.t, err)
		resp := kresp.(*kmsg.ShareFetchResponse)
		require.NoError(m.t, kerr.ErrorForCode(resp.ErrorCode), "share fetch")
		m.sessions[leader]++
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				require.NoError(m.t, kerr.ErrorForCode(p.ErrorCode), "share fetch partition %d", p.Partition)
				for _, ar := range p.AcquiredRecords {
					for o := ar.FirstOffset; o <= ar.LastOffset; o++ {
						out[o] = ar.DeliveryCount
					}
				}
			}
		}
		if len(out) >= want {
			return out
		}
		require.NoError(m.t, ctx.Err(), "acquired %d of %d records of partition %d", len(out), want, partition)
	}
}

// acks builds acknowledgements of typ for offsets of partition.
func acksFor(acks *acktrack.Set, topic string, id [16]byte, partition int32, offsets map[int64]int16, typ kshare.AckType) {
	for o := range offsets {
		acks.Add(topic, id, partition, acktrack.Record{Offset: o, Type: int8(typ)})
	}
}

// heldInputs creates topics in and out (one partition each), writes n
// records to in, joins group and acquires them all, and returns the member
// and the ACCEPT acknowledgements of every held record, tracked by a
// recordingTracker.
func heldInputs(t *testing.T, c *broker.Cluster, in, out, group string, n int) (*shareMember, *acktrack.Set, *recordingTracker) {
	t.Helper()
	createTopic(t, c, in, 1)
	createTopic(t, c, out, 1)
	produceInput(t, c, in, 1, n)
	member := joinShareGroup(t, c, group, in)
	held := member.acquire(testCtx(t), 0, n)
	tracker := &recordingTracker{}
	acks := acktrack.New(tracker)
	acksFor(acks, in, member.topicID, 0, held, kshare.AckAccept)
	return member, acks, tracker
}

// startOffsets returns the share group's start offset per partition of
// topic: it passes every acknowledged record.
func startOffsets(t *testing.T, cl *kgo.Client, group, topic string) map[int32]int64 {
	t.Helper()
	return testkit.StartOffsets(testCtx(t), t, cl, group, topic)
}

// produceInput writes n plain records to each partition of topic.
func produceInput(t *testing.T, c *broker.Cluster, topic string, partitions int32, n int) {
	t.Helper()
	cl := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := range partitions {
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprintf("in-%d-%d", p, i))})
		}
	}
	require.NoError(t, cl.ProduceSync(testCtx(t), recs...).FirstErr())
}

// recordingTracker is an acktrack.Tracker that records its calls and can refuse
// staging; onStage and onResolve, if set, run inside Stage and Resolve. Read its fields only after
// the calls that resolve it have returned.
type recordingTracker struct {
	stageErr  error
	onStage   func()
	onResolve func(committed bool)

	mu       sync.Mutex
	staged   int
	resolved []bool
}

func (r *recordingTracker) Stage(*acktrack.Set, acktrack.Staging) error {
	if r.onStage != nil {
		r.onStage()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.staged++
	return r.stageErr
}

func (r *recordingTracker) Resolve(_ *acktrack.Set, committed bool) {
	if r.onResolve != nil {
		r.onResolve(committed)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resolved = append(r.resolved, committed)
}

// resolutions returns the outcomes Resolve was called with so far.
func (r *recordingTracker) resolutions() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.resolved...)
}

// sleepPast waits until d has passed, for lock expiry.
func sleepPast(d time.Duration) { time.Sleep(d + d/2) }

// ka is acks as the public API takes them.
func ka(acks *acktrack.Set) *kshare.ShareAcks { return (*kshare.ShareAcks)(acks) }
