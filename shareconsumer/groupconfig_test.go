package shareconsumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/shareconsumer"
)

// describeGroupConfigs returns the group's configs by name.
func (e *env) describeGroupConfigs(group string) map[string]string {
	e.t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(e.ctx, e.admin)
	require.NoError(e.t, err)
	out := map[string]string{}
	for _, c := range resp.Resources[0].Configs {
		out[c.Name] = *c.Value
	}
	return out
}

// AlterGroupConfig sets the four share configs; zero fields leave theirs
// alone; invalid values and arguments are usage errors, and a value the
// cluster refuses is one too.
func TestAlterGroupConfig(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	require.NoError(t, shareconsumer.AlterGroupConfig(ctx, e.admin, "g", shareconsumer.GroupConfig{
		AutoOffsetReset:    shareconsumer.ResetEarliest,
		RecordLockDuration: 1500 * time.Millisecond,
		DeliveryCountLimit: 4,
		IsolationLevel:     shareconsumer.ReadCommitted,
	}))
	got := e.describeGroupConfigs("g")
	require.Equal(t, "earliest", got["share.auto.offset.reset"])
	require.Equal(t, "1500", got["share.record.lock.duration.ms"])
	require.Equal(t, "4", got["share.delivery.count.limit"])
	require.Equal(t, "read_committed", got["share.isolation.level"])

	require.NoError(t, shareconsumer.AlterGroupConfig(ctx, e.admin, "g", shareconsumer.GroupConfig{AutoOffsetReset: "by_duration:PT1H"}))
	got = e.describeGroupConfigs("g")
	require.Equal(t, "by_duration:PT1H", got["share.auto.offset.reset"])
	require.Equal(t, "4", got["share.delivery.count.limit"], "zero fields leave their config alone")
	require.NoError(t, shareconsumer.AlterGroupConfig(ctx, e.admin, "g", shareconsumer.GroupConfig{}), "nothing to set")

	var nilCtx context.Context
	for name, err := range map[string]error{
		"nil ctx":          shareconsumer.AlterGroupConfig(nilCtx, e.admin, "g", shareconsumer.GroupConfig{}),
		"nil client":       shareconsumer.AlterGroupConfig(ctx, nil, "g", shareconsumer.GroupConfig{}),
		"no group":         shareconsumer.AlterGroupConfig(ctx, e.admin, "", shareconsumer.GroupConfig{}),
		"reset":            shareconsumer.AlterGroupConfig(ctx, e.admin, "g", shareconsumer.GroupConfig{AutoOffsetReset: "sideways"}),
		"negative lock":    shareconsumer.AlterGroupConfig(ctx, e.admin, "g", shareconsumer.GroupConfig{RecordLockDuration: -time.Second}),
		"sub-ms lock":      shareconsumer.AlterGroupConfig(ctx, e.admin, "g", shareconsumer.GroupConfig{RecordLockDuration: 1500 * time.Microsecond}),
		"negative limit":   shareconsumer.AlterGroupConfig(ctx, e.admin, "g", shareconsumer.GroupConfig{DeliveryCountLimit: -1}),
		"isolation":        shareconsumer.AlterGroupConfig(ctx, e.admin, "g", shareconsumer.GroupConfig{IsolationLevel: "snapshot"}),
		"refused by Kafka": shareconsumer.AlterGroupConfig(ctx, e.admin, "g", shareconsumer.GroupConfig{DeliveryCountLimit: 1}),
	} {
		require.ErrorIs(t, err, kshare.ErrUsage, name)
	}
	require.Equal(t, "4", e.describeGroupConfigs("g")["share.delivery.count.limit"], "refused values change nothing")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err := shareconsumer.AlterGroupConfig(cancelled, e.admin, "g", shareconsumer.GroupConfig{DeliveryCountLimit: 3})
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.ErrorIs(t, err, context.Canceled)
}

// SetGroupConfig applies before the consumer first joins: records written
// before the group existed are read.
func TestSetGroupConfigBeforeJoining(t *testing.T) {
	e := newEnv(t)
	e.createTopic("early", 1)
	e.produce("early", 1, "x", "y")
	c := e.consumer("fresh", "early", shareconsumer.SetGroupConfig(shareconsumer.GroupConfig{
		AutoOffsetReset:    shareconsumer.ResetEarliest,
		DeliveryCountLimit: 3,
	}))
	got := pollRecords(e.ctx, t, c, 2)
	require.Len(t, got, 2)
	require.Equal(t, "3", e.describeGroupConfigs("fresh")["share.delivery.count.limit"])

	_, err := shareconsumer.New(shareconsumer.SeedBrokers(e.c.Bootstrap()...), shareconsumer.Group("g"), shareconsumer.Topics("t"),
		shareconsumer.SetGroupConfig(shareconsumer.GroupConfig{AutoOffsetReset: "soon"}))
	require.ErrorIs(t, err, kshare.ErrUsage, "invalid on its face: New refuses it")
}

// A group config the cluster refuses keeps the consumer out of the group,
// and every Poll says why.
func TestSetGroupConfigRefused(t *testing.T) {
	e := newEnv(t)
	e.createTopic("t", 1)
	c := e.consumer("g", "t", shareconsumer.SetGroupConfig(shareconsumer.GroupConfig{RecordLockDuration: time.Millisecond}))
	for range 2 {
		_, err := c.Poll(e.ctx)
		require.ErrorIs(t, err, kshare.ErrUsage)
		require.ErrorContains(t, err, "share.record.lock.duration.ms")
	}
	require.NoError(t, c.Close(e.ctx))
}

// A subscribed topic that does not exist makes Poll fail with ErrUsage
// once metadata has said so for the timeout, once; the consumer keeps
// looking and reads the topic once it is created.
func TestPollReportsAnUnknownTopic(t *testing.T) {
	defer shareconsumer.SetUnknownTopicTimeout(300 * time.Millisecond)()
	e := newEnv(t)
	group := "missing-readers"
	e.groupConfig(group, "share.heartbeat.interval.ms", "100")
	c := e.consumer(group, "not-yet")
	start := time.Now()
	_, err := c.Poll(e.ctx)
	require.ErrorIs(t, err, kshare.ErrUsage)
	require.ErrorContains(t, err, `subscribed topic "not-yet" does not exist`)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "not before metadata said so for the timeout")

	// Reported once: the next Poll waits (here until its context ends).
	short, cancel := context.WithTimeout(e.ctx, 500*time.Millisecond)
	_, err = c.Poll(short)
	cancel()
	require.ErrorIs(t, err, kshare.ErrAbortable)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)

	e.createTopic("not-yet", 1)
	e.produce("not-yet", 1, "finally")
	got := pollRecords(e.ctx, t, c, 1)
	require.Equal(t, []byte("finally"), got[0].Value)
}
