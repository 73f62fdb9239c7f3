package kshare_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
)

// usage requires that err is exactly a usage error.
func usage(t *testing.T, err error, what string) {
	t.Helper()
	require.Equal(t, []error{kshare.ErrUsage}, errs.ClassesOf(err), "%s: %v", what, err)
}

// Clients that New did not create, nil or zero, answer every call with
// ErrUsage (or an empty answer) instead of panicking.
func TestZeroAndNilClients(t *testing.T) {
	ctx := context.Background()
	for name, p := range map[string]*producer.Producer{"nil": nil, "zero": {}} {
		usage(t, p.InitTransactions(ctx), name+" producer InitTransactions")
		usage(t, p.BeginTransaction(), name+" producer BeginTransaction")
		usage(t, p.CommitTransaction(ctx), name+" producer CommitTransaction")
		usage(t, p.AbortTransaction(ctx), name+" producer AbortTransaction")
		usage(t, p.SendShareAcksToTransaction(ctx, nil, kshare.ShareGroupMetadata{}), name+" producer SendShareAcksToTransaction")
		usage(t, p.SendOffsetsToTransaction(ctx, nil, producer.GroupMetadata{}), name+" producer SendOffsetsToTransaction")
		usage(t, p.ProduceSync(ctx, &kgo.Record{Topic: "t"}).FirstErr(), name+" producer ProduceSync")
		usage(t, p.Flush(ctx), name+" producer Flush")
		usage(t, p.Close(ctx), name+" producer Close")
		require.Zero(t, p.Metrics())
		require.Nil(t, p.Client())
		usage(t, p.Status().Err, name+" producer Status")
	}
	for name, c := range map[string]*shareconsumer.Consumer{"nil": nil, "zero": {}} {
		_, err := c.Poll(ctx)
		usage(t, err, name+" consumer Poll")
		usage(t, c.Ack(&kgo.Record{}, kshare.AckAccept), name+" consumer Ack")
		usage(t, c.Commit(ctx), name+" consumer Commit")
		var async error
		c.CommitAsync(func(err error) { async = err })
		usage(t, async, name+" consumer CommitAsync")
		usage(t, c.Close(ctx), name+" consumer Close")
		require.Zero(t, c.Acks([]*kgo.Record{{}}, kshare.AckAccept).Len())
		_, held := c.DeliveryCount(&kgo.Record{})
		require.False(t, held)
		_, held = c.LockDeadline(&kgo.Record{})
		require.False(t, held)
		require.Empty(t, c.Assigned())
		require.Zero(t, c.GroupMetadata())
		require.Nil(t, c.Client())
		require.Equal(t, shareconsumer.Implicit, c.Mode())
	}
	for name, a := range map[string]*acknowledger.Acknowledger{"nil": nil, "zero": {}} {
		usage(t, a.InitTransactions(ctx), name+" acknowledger InitTransactions")
		usage(t, a.CommitAcknowledgements(ctx, new(kshare.ShareAcks), kshare.ShareGroupMetadata{}), name+" acknowledger CommitAcknowledgements")
		usage(t, a.AbortAcknowledgements(ctx), name+" acknowledger AbortAcknowledgements")
		usage(t, a.Stage(1, new(kshare.ShareAcks), kshare.ShareGroupMetadata{GroupID: "g", MemberID: "m"}), name+" acknowledger Stage")
		usage(t, a.CommitCheckpoint(ctx, 1), name+" acknowledger CommitCheckpoint")
		usage(t, a.AbortCheckpoint(1), name+" acknowledger AbortCheckpoint")
		usage(t, a.Close(ctx), name+" acknowledger Close")
		require.Empty(t, a.Staged())
		require.Zero(t, a.Metrics())
	}
	var acks *kshare.ShareAcks
	require.Zero(t, acks.Len(), "a nil ShareAcks is empty")
	require.Empty(t, acks.Partitions())
	require.Empty(t, acks.Records(kshare.TopicPartition{Topic: "t"}))
	require.Zero(t, acks.Merge(nil).Len())
	require.Equal(t, "AckType(9)", kshare.AckType(9).String())
}

// Acknowledgements misused: nil, another member's, merged from two
// consumers, from a consumer in another mode, of records another consumer
// holds. Each refusal is a usage error that also dooms the transaction, so
// that its outputs cannot commit without their acknowledgements.
func TestMisusedAcknowledgements(t *testing.T) {
	ctx := testkit.Context(t)
	cluster := bundled.Cluster(t, broker.ShareLockDuration(10*time.Minute))
	seeds := cluster.Bootstrap()
	admin := testkit.Client(t, seeds)
	testkit.CreateTopic(ctx, t, admin, "in", 1)
	testkit.CreateTopic(ctx, t, admin, "in2", 1)
	testkit.CreateTopic(ctx, t, admin, "out", 1)
	for _, g := range []string{"g1", "g2"} {
		testkit.SetGroupConfigs(ctx, t, admin, g, "share.auto.offset.reset", "earliest")
	}
	testkit.ProduceRoundRobin(ctx, t, admin, "in", 1, "a", "b")
	testkit.ProduceRoundRobin(ctx, t, admin, "in2", 1, "c", "d")

	newConsumer := func(group, topic string, mode shareconsumer.AckMode) *shareconsumer.Consumer {
		c, err := shareconsumer.New(shareconsumer.SeedBrokers(seeds...), shareconsumer.Group(group), shareconsumer.Topics(topic),
			shareconsumer.Mode(mode), shareconsumer.MaxWait(100*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	one, two := newConsumer("g1", "in", shareconsumer.Transactional), newConsumer("g2", "in2", shareconsumer.Explicit)
	var ones, twos []*kgo.Record
	testkit.PollValues(ctx, t, one, 2, func(r *kgo.Record) { ones = append(ones, r) })
	testkit.PollValues(ctx, t, two, 2, func(r *kgo.Record) { twos = append(twos, r) })

	p, err := producer.New(producer.SeedBrokers(seeds...), producer.TransactionalID("misuse"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	require.NoError(t, p.InitTransactions(ctx))

	for name, send := range map[string]func() error{
		"nil acknowledgements": func() error { return p.SendShareAcksToTransaction(ctx, nil, one.GroupMetadata()) },
		"empty metadata": func() error {
			return p.SendShareAcksToTransaction(ctx, one.Acks(ones, kshare.AckAccept), kshare.ShareGroupMetadata{})
		},
		"another member's metadata": func() error {
			return p.SendShareAcksToTransaction(ctx, one.Acks(ones, kshare.AckAccept), two.GroupMetadata())
		},
		"merged from two consumers": func() error {
			merged := one.Acks(ones, kshare.AckAccept).Merge(two.Acks(twos, kshare.AckAccept))
			return p.SendShareAcksToTransaction(ctx, merged, one.GroupMetadata())
		},
		"an Explicit consumer's": func() error {
			return p.SendShareAcksToTransaction(ctx, two.Acks(twos, kshare.AckAccept), two.GroupMetadata())
		},
		"records another consumer holds": func() error {
			return p.SendShareAcksToTransaction(ctx, one.Acks(twos, kshare.AckAccept), one.GroupMetadata())
		},
		"a type no transaction takes": func() error {
			return p.SendShareAcksToTransaction(ctx, one.Acks(ones, kshare.AckType(4)), one.GroupMetadata())
		},
	} {
		require.NoError(t, p.BeginTransaction(), name)
		p.Produce(ctx, &kgo.Record{Topic: "out", Value: []byte(name)}, nil)
		usage(t, send(), name)
		require.ErrorIs(t, p.CommitTransaction(ctx), kshare.ErrAbortable, "%s: the transaction cannot commit without its acknowledgements", name)
		require.NoError(t, p.AbortTransaction(ctx), name)
	}
	_, err = shareconsumer.New(shareconsumer.SeedBrokers(seeds...), shareconsumer.Group("g1"), shareconsumer.Topics("in"), shareconsumer.Mode(9))
	usage(t, err, "an unknown mode")

	// Mixing modes on the consumer itself.
	usage(t, one.Ack(ones[0], kshare.AckAccept), "Ack in Transactional mode")
	usage(t, one.Commit(ctx), "Commit in Transactional mode")
	err = two.Ack(ones[0], kshare.AckAccept)
	require.ErrorIs(t, err, shareconsumer.ErrNotHeld, "another consumer's record")
	usage(t, err, "another consumer's record")

	// The zero ShareAcks commits nothing, and the records stay held.
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendShareAcksToTransaction(ctx, new(kshare.ShareAcks), one.GroupMetadata()))
	require.NoError(t, p.CommitTransaction(ctx))
	_, held := one.DeliveryCount(ones[0])
	require.True(t, held)

	// The right ones commit after all that.
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendShareAcksToTransaction(ctx, one.Acks(ones, kshare.AckAccept), one.GroupMetadata()))
	require.NoError(t, p.CommitTransaction(ctx))
	_, held = one.DeliveryCount(ones[0])
	require.False(t, held, "acknowledged and forgotten")
}
