package broker

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupProduce writes perPartition records to each partition of topic,
// valued prefix-partition-i, and returns the values.
func groupProduce(t testing.TB, c *Cluster, topic string, partitions int32, perPartition int, prefix string) []string {
	t.Helper()
	cl := newTestClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	var values []string
	for p := int32(0); p < partitions; p++ {
		for i := 0; i < perPartition; i++ {
			v := fmt.Sprintf("%s-%d-%d", prefix, p, i)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)})
			values = append(values, v)
		}
	}
	require.NoError(t, cl.ProduceSync(testCtx(t), recs...).FirstErr())
	cl.Close()
	return values
}

// groupConsumer starts a kgo group consumer that commits only when told.
func groupConsumer(t testing.TB, c *Cluster, group, topic string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return newTestClient(t, c, append([]kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}, opts...)...)
}

// groupPollUntil polls the consumers in turn, each briefly, until want
// records arrived in total; it returns the values each consumer got and
// the partitions they came from.
func groupPollUntil(t testing.TB, want int, consumers ...*kgo.Client) ([][]string, []map[int32]bool) {
	t.Helper()
	ctx := testCtx(t)
	values := make([][]string, len(consumers))
	parts := make([]map[int32]bool, len(consumers))
	for i := range parts {
		parts[i] = make(map[int32]bool)
	}
	got := 0
	for got < want {
		require.NoError(t, ctx.Err(), "got %d of %d records", got, want)
		for i, cl := range consumers {
			pollCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			fetches := cl.PollFetches(pollCtx)
			cancel()
			fetches.EachRecord(func(r *kgo.Record) {
				values[i] = append(values[i], string(r.Value))
				parts[i][r.Partition] = true
				got++
			})
		}
	}
	return values, parts
}

// groupAssignments returns each member's assigned partitions of topic,
// once the group is stable with n members that hold every partition.
func groupAssignments(t testing.TB, adm *kadm.Client, group, topic string, n, partitions int) [][]int32 {
	t.Helper()
	var out [][]int32
	require.Eventually(t, func() bool {
		described, err := adm.DescribeGroups(testCtx(t), group)
		if err != nil || described[group].State != "Stable" || len(described[group].Members) != n {
			return false
		}
		out = out[:0]
		total := 0
		for _, m := range described[group].Members {
			a, ok := m.Assigned.AsConsumer()
			if !ok {
				return false
			}
			var ps []int32
			for _, at := range a.Topics {
				if at.Topic == topic {
					ps = append(ps, at.Partitions...)
				}
			}
			total += len(ps)
			out = append(out, ps)
		}
		return total == partitions
	}, 60*time.Second, 50*time.Millisecond)
	return out
}

// groupCommitted returns the group's committed offsets of topic.
func groupCommitted(t testing.TB, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	fetched, err := adm.FetchOffsets(testCtx(t), group)
	require.NoError(t, err)
	out := make(map[int32]int64)
	for p, o := range fetched[topic] {
		require.NoError(t, o.Err)
		out[p] = o.At
	}
	return out
}

func groupEach(partitions int32, offset int64) map[int32]int64 {
	out := make(map[int32]int64)
	for p := int32(0); p < partitions; p++ {
		out[p] = offset
	}
	return out
}

func TestGroupKgoConsumersSplitPartitionsAndCommit(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	const topic, group, partitions = "split", "g-split", 6
	createTopic(t, c, topic, partitions)
	adm := kadm.NewClient(newTestClient(t, c))

	a := groupConsumer(t, c, group, topic)
	b := groupConsumer(t, c, group, topic)
	assigned := groupAssignments(t, adm, group, topic, 2, partitions)
	require.Len(t, assigned, 2)
	require.NotEmpty(t, assigned[0])
	require.NotEmpty(t, assigned[1])
	all := append(append([]int32{}, assigned[0]...), assigned[1]...)
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	require.Equal(t, []int32{0, 1, 2, 3, 4, 5}, all, "the members split the partitions")

	produced := groupProduce(t, c, topic, partitions, 50, "v")
	values, parts := groupPollUntil(t, len(produced), a, b)
	require.ElementsMatch(t, produced, append(values[0], values[1]...), "every record once")
	for p := range parts[0] {
		require.False(t, parts[1][p], "partition %d went to both members", p)
	}

	ctx := testCtx(t)
	require.NoError(t, a.CommitUncommittedOffsets(ctx))
	require.NoError(t, b.CommitUncommittedOffsets(ctx))
	require.Equal(t, groupEach(partitions, 50), groupCommitted(t, adm, group, topic))
}

func TestGroupKgoRestartResumesFromCommitted(t *testing.T) {
	c := newTestCluster(t)
	const topic, group, partitions = "resume", "g-resume", 3
	createTopic(t, c, topic, partitions)
	adm := kadm.NewClient(newTestClient(t, c))

	first := groupProduce(t, c, topic, partitions, 20, "old")
	a := groupConsumer(t, c, group, topic)
	values, _ := groupPollUntil(t, len(first), a)
	require.ElementsMatch(t, first, values[0])
	require.NoError(t, a.CommitUncommittedOffsets(testCtx(t)))
	a.Close()
	require.Equal(t, groupEach(partitions, 20), groupCommitted(t, adm, group, topic))

	second := groupProduce(t, c, topic, partitions, 10, "new")
	b := groupConsumer(t, c, group, topic)
	values, _ = groupPollUntil(t, len(second), b)
	require.ElementsMatch(t, second, values[0], "the restarted consumer starts at the committed offsets")
}

func TestGroupKgoCommittedOffsetsSurviveCoordinatorMove(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	const topic, group, partitions = "moving", "g-moving", 3
	createTopic(t, c, topic, partitions)
	adm := kadm.NewClient(newTestClient(t, c))

	first := groupProduce(t, c, topic, partitions, 10, "one")
	a := groupConsumer(t, c, group, topic)
	values, _ := groupPollUntil(t, len(first), a)
	require.ElementsMatch(t, first, values[0])
	require.NoError(t, a.CommitUncommittedOffsets(testCtx(t)))

	// The coordinator moves under a live member: the new one replays the
	// group and its offsets, and the member keeps committing there.
	groupMoveCoordinator(t, c, group)
	require.Equal(t, groupEach(partitions, 10), groupCommitted(t, adm, group, topic))
	second := groupProduce(t, c, topic, partitions, 10, "two")
	values, _ = groupPollUntil(t, len(second), a)
	require.ElementsMatch(t, second, values[0])
	require.NoError(t, a.CommitUncommittedOffsets(testCtx(t)))
	a.Close()

	groupMoveCoordinator(t, c, group)
	require.Equal(t, groupEach(partitions, 20), groupCommitted(t, adm, group, topic))
	third := groupProduce(t, c, topic, partitions, 5, "three")
	b := groupConsumer(t, c, group, topic)
	values, _ = groupPollUntil(t, len(third), b)
	require.ElementsMatch(t, third, values[0], "a new member resumes from the offsets the moved coordinator replayed")
}

func TestGroupKgoTransactSessionCommitsOffsetsOnlyOnCommit(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	const in, out, group, partitions = "ctp-in", "ctp-out", "g-ctp", 3
	createTopic(t, c, in, partitions)
	createTopic(t, c, out, partitions)
	adm := kadm.NewClient(newTestClient(t, c))
	inputs := groupProduce(t, c, in, partitions, 30, "in")

	// kgo with TV2 skips AddOffsetsToTxn: TxnOffsetCommit v5+ makes the
	// group coordinator add the offsets partition itself.
	var txnCommitsV5, addOffsets atomic.Int32
	stop := c.ObserveRequests(func(_ int32, req kmsg.Request) {
		switch r := req.(type) {
		case *kmsg.TxnOffsetCommitRequest:
			if r.Version >= 5 {
				txnCommitsV5.Add(1)
			}
		case *kmsg.AddOffsetsToTxnRequest:
			addOffsets.Add(1)
		}
	})
	defer stop()

	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(c.Bootstrap()...),
		kgo.TransactionalID("ctp-txn"),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.DefaultProduceTopic(out),
	)
	require.NoError(t, err)
	defer sess.Close()
	ctx := testCtx(t)

	// transform polls once and writes one output per input in the open
	// transaction; it returns the inputs it saw.
	transform := func() []string {
		require.NoError(t, sess.Begin())
		pollCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fetches := sess.PollFetches(pollCtx)
		cancel()
		var seen []string
		fetches.EachRecord(func(r *kgo.Record) {
			seen = append(seen, string(r.Value))
			require.NoError(t, sess.ProduceSync(ctx, &kgo.Record{Value: []byte("out:" + string(r.Value))}).FirstErr())
		})
		return seen
	}

	// The first batch is aborted: its offsets are not committed.
	var aborted []string
	for len(aborted) == 0 {
		require.NoError(t, ctx.Err())
		aborted = transform()
		committed, err := sess.End(ctx, kgo.TryAbort)
		require.NoError(t, err)
		require.False(t, committed)
	}
	require.Empty(t, groupCommitted(t, adm, group, in), "an aborted transaction committed offsets")

	var done []string
	for len(done) < len(inputs) {
		require.NoError(t, ctx.Err())
		seen := transform()
		committed, err := sess.End(ctx, kgo.TryCommit)
		require.NoError(t, err)
		if committed {
			done = append(done, seen...)
		}
	}
	require.ElementsMatch(t, inputs, done)
	require.Positive(t, txnCommitsV5.Load())
	require.Zero(t, addOffsets.Load())
	require.Equal(t, groupEach(partitions, 30), groupCommitted(t, adm, group, in))

	// A read_committed reader sees one output per input: the aborted
	// batch's outputs are invisible.
	groupRequireOutputs(t, c, out, inputs)
}

// groupRequireOutputs requires a read_committed reader of out to see
// "out:"+v once for every input v, and nothing else.
func groupRequireOutputs(t *testing.T, c *Cluster, out string, inputs []string) {
	t.Helper()
	reader := newTestClient(t, c,
		kgo.ConsumeTopics(out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	values, _ := groupPollUntil(t, len(inputs), reader)
	want := make([]string, len(inputs))
	for i, v := range inputs {
		want[i] = "out:" + v
	}
	require.ElementsMatch(t, want, values[0])
}

func TestGroupKgoListGroupsShowsClassicAndShareGroups(t *testing.T) {
	c := newTestCluster(t, Nodes(3))
	const topic = "listed"
	createTopic(t, c, topic, 2)
	adm := kadm.NewClient(newTestClient(t, c))

	classic := groupConsumer(t, c, "g-listed", topic)
	groupAssignments(t, adm, "g-listed", topic, 1, 2)
	share := newTestClient(t, c, kgo.ShareGroup("s-listed"), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(200*time.Millisecond))

	ctx := testCtx(t)
	require.Eventually(t, func() bool {
		pollCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		share.PollFetches(pollCtx)
		cancel()
		listed, err := adm.ListGroups(ctx)
		return err == nil && listed["s-listed"].GroupType == "share"
	}, 60*time.Second, 10*time.Millisecond)

	listed, err := adm.ListGroups(ctx)
	require.NoError(t, err)
	require.Equal(t, "classic", listed["g-listed"].GroupType)
	require.Equal(t, "consumer", listed["g-listed"].ProtocolType)
	require.Equal(t, "Stable", listed["g-listed"].State)
	require.Equal(t, groupCoordinatorNode(t, c, "g-listed"), listed["g-listed"].Coordinator)
	require.Equal(t, groupCoordinatorNode(t, c, "s-listed"), listed["s-listed"].Coordinator)

	onlyShare, err := adm.ListGroupsByType(ctx, []string{"share"})
	require.NoError(t, err)
	require.Equal(t, []string{"s-listed"}, onlyShare.Groups())
	classic.Close()
}
