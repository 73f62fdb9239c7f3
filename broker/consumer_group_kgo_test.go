package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cgKgoCluster is a cluster whose consumer group members heartbeat
// quickly, so that rebalances take milliseconds.
func cgKgoCluster(t *testing.T, opts ...Opt) *Cluster {
	return newTestCluster(t, append([]Opt{Nodes(3), ConsumerGroupHeartbeatInterval(50 * time.Millisecond)}, opts...)...)
}

// cgKgoConsumer is a kgo consumer using the KIP-848 protocol: it
// commits what it polled before it lets a rebalance take partitions away,
// so that no record is consumed twice.
type cgKgoConsumer struct {
	cl   *kgo.Client
	mu   sync.Mutex
	seen []string
}

func newCGKgoConsumer(t *testing.T, c *Cluster, group, topic string, opts ...kgo.Opt) *cgKgoConsumer {
	t.Helper()
	return &cgKgoConsumer{cl: groupConsumer(t, c, group, topic, append([]kgo.Opt{
		kgo.ServerSideBalancer(),
		kgo.BlockRebalanceOnPoll(),
	}, opts...)...)}
}

// poll polls once, records what it got and commits it.
func (k *cgKgoConsumer) poll(ctx context.Context) error {
	defer k.cl.AllowRebalance()
	pollCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	fetches := k.cl.PollFetches(pollCtx)
	cancel()
	var got []string
	fetches.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	if len(got) == 0 {
		return nil
	}
	k.mu.Lock()
	k.seen = append(k.seen, got...)
	k.mu.Unlock()
	return k.cl.CommitUncommittedOffsets(ctx)
}

// reset forgets what was seen so far.
func (k *cgKgoConsumer) reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seen = nil
}

func (k *cgKgoConsumer) values() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.seen...)
}

// pollAll polls the consumers in turn until want records arrived in
// total, and returns them all.
func cgPollAll(t *testing.T, want int, consumers ...*cgKgoConsumer) []string {
	t.Helper()
	ctx := testCtx(t)
	for {
		var all []string
		for _, k := range consumers {
			all = append(all, k.values()...)
		}
		if len(all) >= want {
			return all
		}
		require.NoError(t, ctx.Err(), "got %d of %d records", len(all), want)
		for _, k := range consumers {
			require.NoError(t, k.poll(ctx))
		}
	}
}

// cgWaitStable waits until the group is Stable with n members and returns how
// many partitions of topic each holds. It polls the consumers given while
// it waits: a member blocking rebalances on poll lets a revocation go
// only when it polls, so a group whose members stopped polling might
// never settle.
func cgWaitStable(t *testing.T, adm *kadm.Client, group, topic string, n int, polling ...*cgKgoConsumer) map[string]int {
	t.Helper()
	ctx := testCtx(t)
	for {
		described, err := adm.DescribeConsumerGroups(ctx, group)
		if err == nil {
			if d := described[group]; d.Err == nil && d.State == "Stable" && len(d.Members) == n {
				out := make(map[string]int)
				for _, m := range d.Members {
					out[m.MemberID] = len(m.Assignment[topic])
				}
				return out
			}
		}
		require.NoError(t, ctx.Err(), "the group did not become Stable with %d members", n)
		for _, k := range polling {
			require.NoError(t, k.poll(ctx))
		}
		if len(polling) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestConsumerGroupKgoRebalances runs kgo consumers with the KIP-848
// protocol through members joining and leaving: the uniform assignor
// spreads the partitions, revoked partitions are committed before they
// move, and every record is consumed exactly once.
func TestConsumerGroupKgoRebalances(t *testing.T) {
	c := cgKgoCluster(t)
	const topic, group, partitions = "kgo848", "g-kgo848", 6
	createTopic(t, c, topic, partitions)
	adm := kadm.NewClient(newTestClient(t, c))
	var produced []string
	produce := func(prefix string) {
		produced = append(produced, groupProduce(t, c, topic, partitions, 20, prefix)...)
	}

	produce("one")
	a := newCGKgoConsumer(t, c, group, topic)
	all := cgPollAll(t, len(produced), a)
	require.ElementsMatch(t, produced, all)
	require.Equal(t, []int{6}, counts(cgWaitStable(t, adm, group, topic, 1)))

	b := newCGKgoConsumer(t, c, group, topic)
	d := newCGKgoConsumer(t, c, group, topic)
	produce("two")
	all = cgPollAll(t, len(produced), a, b, d)
	require.ElementsMatch(t, produced, all, "every record once across the rebalance")
	// The members settle, polling (so that they can revoke) until the
	// group is Stable, not for a number of polls.
	require.Equal(t, []int{2, 2, 2}, counts(cgWaitStable(t, adm, group, topic, 3, a, b, d)))

	a.cl.Close() // leaves with epoch -1
	produce("three")
	all = cgPollAll(t, len(produced), a, b, d)
	require.ElementsMatch(t, produced, all, "every record once after a member left")
	require.Equal(t, []int{3, 3}, counts(cgWaitStable(t, adm, group, topic, 2, b, d)))
	require.Equal(t, groupEach(partitions, 60), groupCommitted(t, adm, group, topic))
	require.Equal(t, 0, c.handlerPanics)
}

func partitionsOfSet(s map[int32]struct{}) []int32 {
	out := make([]int32, 0, len(s))
	for p := range s {
		out = append(out, p)
	}
	return out
}

func counts(m map[string]int) []int {
	out := make([]int, 0, len(m))
	for _, n := range m {
		out = append(out, n)
	}
	for i := range out { // insertion sort: at most a handful
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// TestConsumerGroupKgoStaticRestart: kgo does not leave when a static
// member closes. A leave with epoch -2 on its behalf (what the docs of
// kgo's InstanceID ask an operator to send) lets the restart take the
// partitions back without a rebalance and resume from the committed
// offsets. (Without it the restart gets UNRELEASED_INSTANCE_ID until the
// old session times out: TestConsumerGroupStaticMembers.)
func TestConsumerGroupKgoStaticRestart(t *testing.T) {
	c := cgKgoCluster(t)
	const topic, group, partitions = "static848", "g-static848", 4
	createTopic(t, c, topic, partitions)
	admCl := newTestClient(t, c)
	adm := kadm.NewClient(admCl)
	first := groupProduce(t, c, topic, partitions, 10, "one")

	a := newCGKgoConsumer(t, c, group, topic, kgo.InstanceID("instance-a"))
	b := newCGKgoConsumer(t, c, group, topic, kgo.InstanceID("instance-b"))
	require.ElementsMatch(t, first, cgPollAll(t, len(first), a, b))
	require.Equal(t, []int{2, 2}, counts(cgWaitStable(t, adm, group, topic, 2, a, b)))
	instanceMember := func(instance string) (string, []int32, int32) {
		described, err := adm.DescribeConsumerGroups(testCtx(t), group)
		require.NoError(t, err)
		for _, m := range described[group].Members {
			if *m.InstanceID == instance {
				return m.MemberID, partitionsOfSet(m.Assignment[topic]), described[group].Epoch
			}
		}
		t.Fatalf("no member with instance id %s", instance)
		return "", nil, 0
	}
	aID, aParts, epoch := instanceMember("instance-a")

	a.cl.Close()
	leave := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	leave.Group, leave.MemberID, leave.MemberEpoch = group, aID, -2
	leave.InstanceID = kmsg.StringPtr("instance-a")
	resp, err := leave.RequestWith(testCtx(t), admCl)
	require.NoError(t, err)
	require.Zero(t, resp.ErrorCode)

	second := groupProduce(t, c, topic, partitions, 10, "two")
	b.reset()
	a2 := newCGKgoConsumer(t, c, group, topic, kgo.InstanceID("instance-a"))
	require.ElementsMatch(t, second, cgPollAll(t, len(second), a2, b), "the restart resumes from the committed offsets")
	a2ID, a2Parts, epoch2 := instanceMember("instance-a")
	require.NotEqual(t, aID, a2ID)
	require.Equal(t, epoch, epoch2, "no rebalance")
	require.ElementsMatch(t, aParts, a2Parts, "the same partitions")

}

// TestConsumerGroupKgoRegex consumes the topics a regular expression
// matches, resolved by the broker, including one created later.
func TestConsumerGroupKgoRegex(t *testing.T) {
	c := cgKgoCluster(t)
	createTopic(t, c, "regex-a", 2)
	createTopic(t, c, "other", 1)
	k := newCGKgoConsumer(t, c, "g-regex", "regex-.*", kgo.ConsumeRegex(), kgo.MetadataMinAge(50*time.Millisecond))
	want := groupProduce(t, c, "regex-a", 2, 5, "a")
	groupProduce(t, c, "other", 1, 5, "no")
	require.ElementsMatch(t, want, cgPollAll(t, len(want), k))
	createTopic(t, c, "regex-b", 1)
	want = append(want, groupProduce(t, c, "regex-b", 1, 5, "b")...)
	require.ElementsMatch(t, want, cgPollAll(t, len(want), k))
}

// TestConsumerGroupKgoTransactSession runs kgo's consume-transform-produce
// session on a KIP-848 group: the group's offsets commit in the
// transaction (TxnOffsetCommit with the member epoch), aborted batches
// commit nothing, and a second session joining mid-way takes over half the
// partitions; the read_committed output has each input exactly once.
func TestConsumerGroupKgoTransactSession(t *testing.T) {
	c := cgKgoCluster(t)
	const in, out, group, partitions = "ctp848-in", "ctp848-out", "g-ctp848", 4
	createTopic(t, c, in, partitions)
	createTopic(t, c, out, partitions)
	adm := kadm.NewClient(newTestClient(t, c))
	inputs := groupProduce(t, c, in, partitions, 50, "in")

	var mu sync.Mutex
	memberEpochs := map[int32]bool{}
	stop := c.ObserveRequests(func(_ int32, req kmsg.Request) {
		if r, ok := req.(*kmsg.TxnOffsetCommitRequest); ok && r.Group == group {
			mu.Lock()
			memberEpochs[r.Generation] = true
			mu.Unlock()
		}
	})
	defer stop()

	session := func(id string) *kgo.GroupTransactSession {
		sess, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(c.Bootstrap()...),
			kgo.TransactionalID(id),
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(in),
			kgo.ServerSideBalancer(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.FetchMaxWait(100*time.Millisecond),
			kgo.DefaultProduceTopic(out),
		)
		require.NoError(t, err)
		t.Cleanup(sess.Close)
		return sess
	}
	ctx := testCtx(t)
	// step runs one transaction: poll, one output per input, end.
	step := func(sess *kgo.GroupTransactSession, commit kgo.TransactionEndTry) (bool, []string) {
		require.NoError(t, sess.Begin())
		pollCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fetches := sess.PollRecords(pollCtx, 10)
		cancel()
		var seen []string
		fetches.EachRecord(func(r *kgo.Record) {
			seen = append(seen, string(r.Value))
			sess.Produce(ctx, &kgo.Record{Key: r.Key, Value: []byte("out:" + string(r.Value))}, nil)
		})
		committed, err := sess.End(ctx, commit)
		require.NoError(t, err)
		return committed, seen
	}

	a := session("ctp848-a")
	var aborted []string
	for len(aborted) == 0 {
		require.NoError(t, ctx.Err())
		_, aborted = step(a, kgo.TryAbort)
	}
	require.Empty(t, groupCommitted(t, adm, group, in), "an aborted transaction committed offsets")

	var done []string
	var b *kgo.GroupTransactSession
	for i := 0; len(done) < len(inputs); i++ {
		require.NoError(t, ctx.Err())
		if i == 3 {
			b = session("ctp848-b")
		}
		for _, s := range []*kgo.GroupTransactSession{a, b} {
			if s == nil {
				continue
			}
			if committed, seen := step(s, kgo.TryCommit); committed {
				done = append(done, seen...)
			}
		}
	}
	require.ElementsMatch(t, inputs, done, "each input in exactly one committed transaction")
	require.Equal(t, groupEach(partitions, 50), groupCommitted(t, adm, group, in))
	mu.Lock()
	require.NotEmpty(t, memberEpochs)
	for e := range memberEpochs {
		require.Positive(t, e, "TxnOffsetCommit carries the member epoch")
	}
	mu.Unlock()

	groupRequireOutputs(t, c, out, inputs)
	require.Equal(t, 0, c.handlerPanics)
}
