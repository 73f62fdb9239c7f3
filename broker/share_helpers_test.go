package broker

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/wire"
)

// shareSetGroupConfigs sets group configs with IncrementalAlterConfigs.
func shareSetGroupConfigs(t testing.TB, cl *kgo.Client, group string, kvs ...string) {
	t.Helper()
	testkit.SetGroupConfigs(testCtx(t), t, cl, group, kvs...)
}

// alterGroupConfig applies op to group's configs (testkit.AlterGroupConfigs).
func alterGroupConfig(t testing.TB, cl *kgo.Client, group string, op kmsg.IncrementalAlterConfigOp, kvs ...string) error {
	t.Helper()
	return testkit.AlterGroupConfigs(testCtx(t), t, cl, group, op, kvs...)
}

// describeGroupConfigs describes every config of group, by name and in
// the order of the answer, or returns the resource's error.
func describeGroupConfigs(t testing.TB, cl *kgo.Client, group string) (map[string]kmsg.DescribeConfigsResponseResourceConfig, []string, error) {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(testCtx(t), cl)
	require.NoError(t, err)
	require.Len(t, resp.Resources, 1)
	if err := kerr.ErrorForCode(resp.Resources[0].ErrorCode); err != nil {
		return nil, nil, err
	}
	out := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
	var names []string
	for _, cfg := range resp.Resources[0].Configs {
		out[cfg.Name] = cfg
		names = append(names, cfg.Name)
	}
	return out, names, nil
}

// shareProduce writes values round-robin over the topic's partitions and
// returns, for each value, where it landed.
func shareProduce(t testing.TB, cl *kgo.Client, topic string, partitions int32, values ...string) map[string]kgo.Record {
	t.Helper()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(v)}
	}
	results := cl.ProduceSync(testCtx(t), recs...)
	require.NoError(t, results.FirstErr())
	out := make(map[string]kgo.Record, len(values))
	for _, r := range results {
		out[string(r.Record.Value)] = *r.Record
	}
	return out
}

// shareValues returns n distinct values with a prefix.
func shareValues(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + "-" + strconv.Itoa(i)
	}
	return out
}

// shareProducer returns a client that produces with a manual partitioner.
func shareProducer(t testing.TB, c *Cluster) *kgo.Client {
	return newTestClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

// shareConsumer returns a kgo share-group consumer of topic.
func shareConsumer(t testing.TB, c *Cluster, group, topic string, opts ...kgo.Opt) *kgo.Client {
	return newTestClient(t, c, append([]kgo.Opt{
		kgo.ShareGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}, opts...)...)
}

// sharePoll polls cl once with a bound, failing the test on fetch errors
// other than the context ending.
func sharePoll(t testing.TB, ctx context.Context, cl *kgo.Client) []*kgo.Record {
	t.Helper()
	pollCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	fs := cl.PollRecords(pollCtx, 1000)
	fs.EachError(func(topic string, p int32, err error) {
		if ctx.Err() == nil && pollCtx.Err() == nil {
			t.Errorf("share fetch %s/%d: %v", topic, p, err)
		}
	})
	return fs.Records()
}

// shareDelivery is one record a share consumer received.
type shareDelivery struct {
	consumer int
	value    string
	count    int32
}

// shareCollector gathers deliveries from several goroutines.
type shareCollector struct {
	mu   sync.Mutex
	seen []shareDelivery
}

func (sc *shareCollector) add(d shareDelivery) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.seen = append(sc.seen, d)
}

// collect polls cl on a goroutine until the returned stop is called (or
// the test ends) and adds every record it gets, as consumer's. stop waits
// for the goroutine to exit and may be called more than once.
func (sc *shareCollector) collect(t testing.TB, ctx context.Context, cl *kgo.Client, consumer int) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
			}
			for _, r := range sharePoll(t, ctx, cl) {
				sc.add(shareDelivery{consumer: consumer, value: string(r.Value), count: r.DeliveryCount()})
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop)
	return stop
}

func (sc *shareCollector) snapshot() []shareDelivery {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return append([]shareDelivery(nil), sc.seen...)
}

// shareOffsets describes a share group's start offsets by partition
// through DescribeShareGroupOffsets at the group coordinator.
func shareOffsets(t testing.TB, cl *kgo.Client, group, topic string) map[int32]kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition {
	t.Helper()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(testCtx(t), cl)
	require.NoError(t, err)
	require.Len(t, resp.Groups, 1)
	require.NoError(t, kerr.ErrorForCode(resp.Groups[0].ErrorCode))
	out := map[int32]kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition{}
	for _, rt := range resp.Groups[0].Topics {
		if rt.Topic != topic {
			continue
		}
		for _, rp := range rt.Partitions {
			out[rp.Partition] = rp
		}
	}
	return out
}

// shareEventually polls cond until it holds or the test context ends.
func shareEventually(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(ctx, t, what, cond)
}

// shareRecordStates returns how many records of a share-partition are in
// each state at its leader, white-box.
func shareRecordStates(t testing.TB, c *Cluster, group, topic string, partition int32) map[shareRecordState]int {
	t.Helper()
	var out map[shareRecordState]int
	require.NoError(t, c.do(func() {
		tp := c.topics[topic]
		sp := c.coordinators.share.live[shareKey{group: group, topicID: tp.id, partition: partition}]
		if sp != nil {
			out = shareCounts(sp)
		}
	}))
	return out
}

// rawShareMember is a share group member driven by raw requests: it joins
// with ShareGroupHeartbeat and keeps one share session per node, whose
// requests travel on one kept connection per node.
type rawShareMember struct {
	t        testing.TB
	c        *Cluster
	group    string
	id       string
	epoch    int32
	sessions map[int32]int32 // node -> the next session epoch
	conns    map[int32]*wireConn
}

// wire sends a request of the member's session at node on its connection
// there, opening one if needed.
func (m *rawShareMember) wire(node int32, req kmsg.Request) kmsg.Response {
	m.t.Helper()
	if m.conns == nil {
		m.conns = map[int32]*wireConn{}
	}
	w := m.conns[node]
	if w == nil {
		w = dialWire(m.t, m.c, node)
		m.conns[node] = w
	}
	return w.send(req)
}

// disconnect closes the member's connection to node without closing its
// session, as a dying process does; the next request goes on a new one.
func (m *rawShareMember) disconnect(node int32) {
	if w := m.conns[node]; w != nil {
		w.close()
		delete(m.conns, node)
	}
}

// shareJoin joins group as member id, subscribed to topic.
func shareJoin(t testing.TB, c *Cluster, group, id, topic string) *rawShareMember {
	t.Helper()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.MemberEpoch = group, id, 0
	req.SubscribedTopicNames = []string{topic}
	resp := txnWire(t, c, shareGroupCoordinator(t, c, group), req).(*kmsg.ShareGroupHeartbeatResponse)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	return &rawShareMember{t: t, c: c, group: group, id: id, epoch: resp.MemberEpoch, sessions: map[int32]int32{}}
}

func shareGroupCoordinator(t testing.TB, c *Cluster, group string) int32 {
	t.Helper()
	leader, err := c.Leader(wire.ConsumerOffsetsTopic, c.CoordinatorPartition(coordinatorGroup, group))
	require.NoError(t, err)
	return leader
}

// fetch sends a ShareFetch for topic/partition to its leader, without
// waiting, and returns the acquired offsets with their delivery counts.
func (m *rawShareMember) fetch(topic string, partition int32) map[int64]int16 {
	m.t.Helper()
	resp := m.fetchFrom(m.leader(topic, partition), topic, partition)
	require.NoError(m.t, kerr.ErrorForCode(resp.ErrorCode))
	out := map[int64]int16{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			require.NoError(m.t, kerr.ErrorForCode(rp.ErrorCode))
			for _, ar := range rp.AcquiredRecords {
				for o := ar.FirstOffset; o <= ar.LastOffset; o++ {
					out[o] = ar.DeliveryCount
				}
			}
		}
	}
	return out
}

func (m *rawShareMember) leader(topic string, partition int32) int32 {
	m.t.Helper()
	leader, err := m.c.Leader(topic, partition)
	require.NoError(m.t, err)
	return leader
}

func (m *rawShareMember) topicID(topic string) [16]byte {
	m.t.Helper()
	var id [16]byte
	require.NoError(m.t, m.c.do(func() { id = m.c.topics[topic].id }))
	return id
}

// fetchFrom sends a ShareFetch to node in this member's session there.
func (m *rawShareMember) fetchFrom(node int32, topic string, partition int32) *kmsg.ShareFetchResponse {
	m.t.Helper()
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 2
	req.GroupID, req.MemberID = &m.group, &m.id
	req.ShareSessionEpoch = m.sessions[node]
	req.MaxRecords, req.MaxBytes = 1000, 1<<20
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = m.topicID(topic)
	rp := kmsg.NewShareFetchRequestTopicPartition()
	rp.Partition = partition
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := m.wire(node, req).(*kmsg.ShareFetchResponse)
	if resp.ErrorCode == 0 {
		m.sessions[node]++
	}
	return resp
}

// acknowledge sends a ShareAcknowledge of one range to the partition's
// leader and returns the top-level error, or else the partition's.
func (m *rawShareMember) acknowledge(topic string, partition int32, first, last int64, typ wire.AckType) error {
	m.t.Helper()
	node := m.leader(topic, partition)
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.Version = 2
	req.GroupID, req.MemberID = &m.group, &m.id
	req.ShareSessionEpoch = m.sessions[node]
	rt := kmsg.NewShareAcknowledgeRequestTopic()
	rt.TopicID = m.topicID(topic)
	rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
	rp.Partition = partition
	b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
	b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = first, last, []int8{int8(typ)}
	rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, b)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := m.wire(node, req).(*kmsg.ShareAcknowledgeResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return err
	}
	m.sessions[node]++
	require.Len(m.t, resp.Topics, 1)
	require.Len(m.t, resp.Topics[0].Partitions, 1)
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// renew sends a RENEW of one range (ShareAcknowledge v2 with IsRenewAck)
// to the partition's leader and returns the top-level error, or else the
// partition's.
func (m *rawShareMember) renew(topic string, partition int32, first, last int64) error {
	m.t.Helper()
	node := m.leader(topic, partition)
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.Version = 2
	req.GroupID, req.MemberID = &m.group, &m.id
	req.ShareSessionEpoch = m.sessions[node]
	req.IsRenewAck = true
	rt := kmsg.NewShareAcknowledgeRequestTopic()
	rt.TopicID = m.topicID(topic)
	rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
	rp.Partition = partition
	b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
	b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = first, last, []int8{int8(wire.AckRenew)}
	rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, b)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := m.wire(node, req).(*kmsg.ShareAcknowledgeResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return err
	}
	m.sessions[node]++
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// closeSession closes the member's session at node with a
// ShareAcknowledge at the final epoch (-1), carrying nothing.
func (m *rawShareMember) closeSession(node int32) error {
	m.t.Helper()
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.Version = 2
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &m.group, &m.id, -1
	resp := m.wire(node, req).(*kmsg.ShareAcknowledgeResponse)
	m.sessions[node] = 0
	return kerr.ErrorForCode(resp.ErrorCode)
}

// shareConnCloses returns how many closes of connections with share
// sessions the loop has handled.
func shareConnCloses(t testing.TB, c *Cluster) int {
	t.Helper()
	var n int
	require.NoError(t, c.do(func() { n = c.stats.shareConnCloses }))
	return n
}

// shareAcquireEventually fetches as m until it acquires something and
// returns what: a released record becomes available once the loop has
// handled the close that released it, which a test cannot time.
func shareAcquireEventually(t testing.TB, m *rawShareMember, topic string, partition int32) map[int64]int16 {
	t.Helper()
	var got map[int64]int16
	shareEventually(t, testCtx(t), m.id+" to acquire records", func() bool {
		got = m.fetch(topic, partition)
		return len(got) > 0
	})
	return got
}

// shareRange is one acknowledged range for stageTxn.
type shareRange struct {
	first, last int64
	typ         wire.AckType
}

// stageTxn sends TxnShareAcknowledge for topic/partition to its leader and
// returns the top-level and the partition's errors.
func (m *rawShareMember) stageTxn(txnID string, pid int64, epoch int16, topic string, partition int32, ranges ...shareRange) (top, part error) {
	m.t.Helper()
	req := &wire.TxnShareAcknowledgeRequest{
		TransactionalID: txnID, GroupID: m.group, MemberID: m.id, MemberEpoch: m.epoch,
		ProducerID: pid, ProducerEpoch: epoch,
	}
	tp := wire.TxnShareAcknowledgePartition{Partition: partition}
	for _, r := range ranges {
		tp.AcknowledgementBatches = append(tp.AcknowledgementBatches, wire.TxnShareAcknowledgeBatch{FirstOffset: r.first, LastOffset: r.last, AcknowledgeTypes: []wire.AckType{r.typ}})
	}
	req.Topics = []wire.TxnShareAcknowledgeTopic{{TopicID: m.topicID(topic), Partitions: []wire.TxnShareAcknowledgePartition{tp}}}
	resp := txnWire(m.t, m.c, m.leader(topic, partition), req).(*wire.TxnShareAcknowledgeResponse)
	require.Len(m.t, resp.Topics, 1)
	require.Len(m.t, resp.Topics[0].Partitions, 1)
	return kerr.ErrorForCode(resp.ErrorCode), kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// shareEndTxn ends a transaction with EndTxn v5 and returns the epoch the
// producer continues with.
func shareEndTxn(t testing.TB, c *Cluster, txnID string, pid int64, epoch int16, commit bool) int16 {
	t.Helper()
	resp := txnEnd(t, c, txnCoordinatorNode(t, c, txnID), 5, txnID, pid, epoch, commit)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	return resp.ProducerEpoch
}

// shareStatePartition returns the __share_group_state partition of a
// share-partition.
func shareStatePartition(t testing.TB, c *Cluster, group, topic string, partition int32) int32 {
	t.Helper()
	var idx int32
	require.NoError(t, c.do(func() {
		idx = c.CoordinatorPartition(coordinatorShare, shareStateKey(group, c.topics[topic].id, partition))
	}))
	return idx
}

// shareCounts returns how many records of the window are in each state.
func shareCounts(sp *sharePartition) map[shareRecordState]int {
	out := make(map[shareRecordState]int)
	for _, r := range sp.recs {
		out[r.state]++
	}
	return out
}
