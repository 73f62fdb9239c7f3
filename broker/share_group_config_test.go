package broker

import (
	"math/big"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

func TestGroupConfigsAreKafkasSet(t *testing.T) {
	c := newTestCluster(t)
	cl := newTestClient(t, c)
	d, names, err := describeGroupConfigs(t, cl, "g")
	require.NoError(t, err)
	require.Len(t, names, 21, "Kafka 4.4's group configs")
	require.True(t, sort.StringsAreSorted(names))
	for name, want := range map[string]struct {
		value string
		typ   kmsg.ConfigType
	}{
		"share.isolation.level":              {"read_uncommitted", kmsg.ConfigTypeString},
		"share.partition.max.record.locks":   {"2000", kmsg.ConfigTypeInt},
		"share.renew.acknowledge.enable":     {"true", kmsg.ConfigTypeBoolean},
		"streams.rack.aware.assignment.tags": {"", kmsg.ConfigTypeList},
		"consumer.session.timeout.ms":        {"45000", kmsg.ConfigTypeInt},
		"errors.deadletterqueue.topic.name":  {"", kmsg.ConfigTypeString},
	} {
		require.Equal(t, want.value, *d[name].Value, name)
		require.Equal(t, want.typ, d[name].ConfigType, name)
		require.Equal(t, kmsg.ConfigSourceDefaultConfig, d[name].Source, name)
	}

	_, _, err = describeGroupConfigs(t, cl, "")
	require.ErrorIs(t, err, kerr.InvalidRequest, "there is no default group resource")
	require.ErrorIs(t, alterGroupConfig(t, cl, "", kmsg.IncrementalAlterConfigOpSet, "share.isolation.level", "read_committed"), kerr.InvalidRequest)

	require.ErrorIs(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpAppend, "streams.rack.aware.assignment.tags", "zone"), kerr.InvalidConfig,
		"group configs take SET and DELETE only, the list one too")
	require.ErrorIs(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpSet, "streams.rack.aware.assignment.tags", "zone,zone"), kerr.InvalidConfig)
	require.ErrorIs(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpSet, "share.partition.max.record.locks", "4001"), kerr.InvalidConfig)
	require.ErrorIs(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpSet, "share.isolation.level", "READ_COMMITTED"), kerr.InvalidConfig)
	require.ErrorIs(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpSet, "errors.deadletterqueue.topic.name", "__dlq"), kerr.InvalidConfig)

	for name, set := range map[string][2]string{ // as given, as kept
		"share.delivery.count.limit":         {" +4 ", "4"},
		"share.renew.acknowledge.enable":     {"FALSE", "false"},
		"streams.rack.aware.assignment.tags": {" zone , rack", "zone,rack"},
		"share.auto.offset.reset":            {" by_duration:pt1h", "by_duration:pt1h"},
	} {
		require.NoError(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpSet, name, set[0]), name)
		d, _, err := describeGroupConfigs(t, cl, "g")
		require.NoError(t, err)
		require.Equal(t, set[1], *d[name].Value, name)
		require.Equal(t, kmsg.ConfigSourceGroupConfig, d[name].Source, name)
	}
}

func TestShareOffsetResetParse(t *testing.T) {
	hour := new(big.Int).SetInt64(int64(time.Hour))
	for value, want := range map[string]*big.Int{
		"by_duration:PT1H":                 hour,
		"by_duration:pt1h":                 hour,
		"by_duration:+PT1H":                hour,
		"by_duration:PT60M":                hour,
		"by_duration:PT0S":                 new(big.Int),
		"by_duration:P1DT2H3M4.5S":         big.NewInt(int64(26*time.Hour + 3*time.Minute + 4500*time.Millisecond)),
		"by_duration:PT1,25S":              big.NewInt(int64(1250 * time.Millisecond)),
		"by_duration:P-1DT25H":             hour,
		"by_duration:P100000D":             new(big.Int).Mul(big.NewInt(100000*86400), big.NewInt(int64(time.Second))),
		"by_duration:PT0.000000001S":       big.NewInt(1),
		"by_duration:PT-0.5S":              nil,
		"by_duration:-PT1H":                nil,
		"by_duration:PT-1H":                nil,
		"by_duration:P1W":                  nil,
		"by_duration:P1M":                  nil,
		"by_duration:PT1.5H":               nil,
		"by_duration:P":                    nil,
		"by_duration:PT":                   nil,
		"by_duration:P1DT":                 nil,
		"by_duration:PT1M1H":               nil,
		"by_duration:":                     nil,
		"by_duration: PT1H":                nil,
		"by_duration:PT99999999999999999H": nil,
		"BY_DURATION:PT1H":                 nil,
		"Latest":                           nil,
	} {
		r, err := parseShareOffsetReset(value)
		if want == nil {
			require.Error(t, err, value)
			continue
		}
		require.NoError(t, err, value)
		require.True(t, r.byDuration, value)
		require.Zero(t, want.Cmp(r.back), "%s: %v", value, r.back)
	}
	r, err := parseShareOffsetReset("earliest")
	require.NoError(t, err)
	require.True(t, r.earliest)
	r, err = parseShareOffsetReset("latest")
	require.NoError(t, err)
	require.Equal(t, shareOffsetReset{}, r)
}

// shareProduceAt produces values to partition 0 of topic, each with its
// timestamp.
func shareProduceAt(t *testing.T, cl *kgo.Client, topic string, at map[string]time.Time, order ...string) {
	t.Helper()
	for _, v := range order {
		require.NoError(t, cl.ProduceSync(testCtx(t), &kgo.Record{Topic: topic, Value: []byte(v), Timestamp: at[v]}).FirstErr())
	}
}

func TestShareOffsetResetByDuration(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "in", 1)
	cl := shareProducer(t, c)
	now := time.Now()
	at := map[string]time.Time{
		"old-a": now.Add(-3 * time.Hour), "old-b": now.Add(-2 * time.Hour),
		"new-a": now.Add(-30 * time.Minute), "old-c": now.Add(-4 * time.Hour), "new-b": now.Add(-10 * time.Minute),
	}
	shareProduceAt(t, cl, "in", at, "old-a", "old-b", "new-a", "old-c", "new-b")

	shareSetGroupConfigs(t, cl, "hour", "share.auto.offset.reset", "by_duration:PT1H")
	hour := shareJoin(t, c, "hour", "m", "in")
	require.Equal(t, offsetsFrom(2, 4, 1), hour.fetch("in", 0),
		"from the first record of the last hour on, the older one after it included")

	shareSetGroupConfigs(t, cl, "all", "share.auto.offset.reset", "by_duration:P100000D")
	all := shareJoin(t, c, "all", "m", "in")
	require.Equal(t, offsetsFrom(0, 4, 1), all.fetch("in", 0), "further back than any record: the log start")

	shareSetGroupConfigs(t, cl, "minute", "share.auto.offset.reset", "by_duration:PT1M")
	minute := shareJoin(t, c, "minute", "m", "in")
	resp := minute.fetchFrom(minute.leader("in", 0), "in", 0)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	require.ErrorIs(t, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode), kerr.OffsetNotAvailable,
		"no record that recent: the share-partition waits for one")
	shareProduceAt(t, cl, "in", map[string]time.Time{"fresh": time.Now()}, "fresh")
	require.Equal(t, offsetsFrom(5, 5, 1), minute.fetch("in", 0))
}

func TestShareIsolationLevel(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "in", 1)
	cl := shareProducer(t, c)
	shareProduce(t, cl, "in", 1, "a")
	txn := newTestClient(t, c, kgo.TransactionalID("iso"), kgo.DefaultProduceTopic("in"))
	require.NoError(t, txn.BeginTransaction())
	require.NoError(t, txn.ProduceSync(testCtx(t), &kgo.Record{Value: []byte("open")}).FirstErr())
	shareProduce(t, cl, "in", 1, "b")

	shareSetGroupConfigs(t, cl, "ru", "share.auto.offset.reset", "earliest")
	shareSetGroupConfigs(t, cl, "rc", "share.auto.offset.reset", "earliest", "share.isolation.level", "read_committed")
	ru := shareJoin(t, c, "ru", "m", "in")
	rc := shareJoin(t, c, "rc", "m", "in")
	require.Equal(t, offsetsFrom(0, 2, 1), ru.fetch("in", 0), "read_uncommitted: up to the high watermark")
	require.Equal(t, offsetsFrom(0, 0, 1), rc.fetch("in", 0), "read_committed: up to the last stable offset")

	require.NoError(t, txn.EndTransaction(testCtx(t), kgo.TryAbort))
	require.Equal(t, map[int64]int16{2: 1, 3: 1}, rc.fetch("in", 0), "the aborted record archived, the marker handed out")
	require.Equal(t, offsetsFrom(3, 3, 1), ru.fetch("in", 0), "the marker")
}

func TestShareRenewDisabled(t *testing.T) {
	c := shareTopicSetup(t, "share.renew.acknowledge.enable", "false")
	m := shareJoin(t, c, "g", "m", "in")
	require.Len(t, m.fetch("in", 0), 10)
	require.ErrorIs(t, m.renew("in", 0, 0, 0), kerr.InvalidRecordState, "RENEW refused by the group config")
	require.NoError(t, m.acknowledge("in", 0, 0, 0, wire.AckAccept))

	shareSetGroupConfigs(t, newTestClient(t, c), "g", "share.renew.acknowledge.enable", "true")
	require.NoError(t, m.renew("in", 0, 1, 1))
}

// TestShareLockDurationBounds: share.record.lock.duration.ms is bounded by
// the cluster's ShareLockDurationBounds, as Kafka bounds it with
// group.share.min/max.record.lock.duration.ms, so that a short lock for a
// test of lock expiry must be allowed by the broker first.
func TestShareLockDurationBounds(t *testing.T) {
	const name = "share.record.lock.duration.ms"
	cl := newTestClient(t, newTestCluster(t))
	require.ErrorIs(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpSet, name, "999"), kerr.InvalidConfig,
		"below the default floor of 1s")
	require.ErrorIs(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpSet, name, "3600001"), kerr.InvalidConfig,
		"above the default ceiling of 1h")
	require.NoError(t, alterGroupConfig(t, cl, "g", kmsg.IncrementalAlterConfigOpSet, name, "1000"))

	low := newTestClient(t, newTestCluster(t, ShareLockDurationBounds(100*time.Millisecond, 20*time.Second), ShareLockDuration(10*time.Second)))
	require.NoError(t, alterGroupConfig(t, low, "g", kmsg.IncrementalAlterConfigOpSet, name, "100"), "a lowered floor allows short locks")
	require.ErrorIs(t, alterGroupConfig(t, low, "g", kmsg.IncrementalAlterConfigOpSet, name, "99"), kerr.InvalidConfig)
	require.ErrorIs(t, alterGroupConfig(t, low, "g", kmsg.IncrementalAlterConfigOpSet, name, "20001"), kerr.InvalidConfig)

	for what, opts := range map[string][]Opt{
		"default lock below the floor": {ShareLockDuration(500 * time.Millisecond)},
		"a given lock above a ceiling": {ShareLockDuration(30 * time.Second), ShareLockDurationBounds(time.Second, 10*time.Second)},
		"inverted bounds":              {ShareLockDurationBounds(time.Minute, time.Second)},
		"floor below 1ms":              {ShareLockDurationBounds(time.Microsecond, time.Second), ShareLockDuration(time.Second)},
		"group default below floor":    {GroupConfigDefault(name, "500")},
	} {
		_, err := NewCluster(opts...)
		require.Error(t, err, what)
	}

	// The 30s default, not given, follows tighter bounds.
	tight := newTestClient(t, newTestCluster(t, ShareLockDurationBounds(time.Second, 10*time.Second)))
	d, _, err := describeGroupConfigs(t, tight, "g")
	require.NoError(t, err)
	require.Equal(t, "10000", *d[name].Value)
}
