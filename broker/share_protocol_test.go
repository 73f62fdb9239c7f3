package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// shareTopicSetup starts a 3-node cluster with topic "in" holding ten
// records and group "g" reading it from the earliest offset.
func shareTopicSetup(t *testing.T, configs ...string) *Cluster {
	t.Helper()
	c := newTestCluster(t, Nodes(3))
	createTopic(t, c, "in", 1)
	shareSetGroupConfigs(t, newTestClient(t, c), "g", append([]string{"share.auto.offset.reset", "earliest"}, configs...)...)
	shareProduce(t, shareProducer(t, c), "in", 1, shareValues("in", 10)...)
	return c
}

func TestShareGroupHeartbeatProtocol(t *testing.T) {
	c := shareTopicSetup(t)
	coord := shareGroupCoordinator(t, c, "g")
	beat := func(node int32, member string, epoch int32, topics []string) *kmsg.ShareGroupHeartbeatResponse {
		req := kmsg.NewPtrShareGroupHeartbeatRequest()
		req.Version = 1
		req.GroupID, req.MemberID, req.MemberEpoch, req.SubscribedTopicNames = "g", member, epoch, topics
		return txnWire(t, c, node, req).(*kmsg.ShareGroupHeartbeatResponse)
	}
	require.ErrorIs(t, txnErr(beat(txnOtherNode(c, coord), "a", 0, []string{"in"}).ErrorCode), kerr.NotCoordinator)
	require.ErrorIs(t, txnErr(beat(coord, "a", 0, nil).ErrorCode), kerr.InvalidRequest, "joining needs a subscription")
	require.ErrorIs(t, txnErr(beat(coord, "a", 3, nil).ErrorCode), kerr.GroupIDNotFound, "a non-zero epoch needs the group")
	require.ErrorIs(t, txnErr(beat(coord, "a", -1, nil).ErrorCode), kerr.GroupIDNotFound, "so does leaving")
	adm := kadm.NewClient(newTestClient(t, c))
	var offsets kadm.Offsets
	offsets.AddOffset("in", 0, 1, -1)
	committed, err := adm.CommitOffsets(testCtx(t), "classic", offsets)
	require.NoError(t, err)
	require.NoError(t, committed.Error())
	classicCoord := shareGroupCoordinator(t, c, "classic")
	classic := kmsg.NewPtrShareGroupHeartbeatRequest()
	classic.Version = 1
	classic.GroupID, classic.MemberID, classic.SubscribedTopicNames = "classic", "a", []string{"in"}
	require.ErrorIs(t, txnErr(txnWire(t, c, classicCoord, classic).(*kmsg.ShareGroupHeartbeatResponse).ErrorCode), kerr.GroupIDNotFound,
		"a classic group's name is taken")

	a := beat(coord, "a", 0, []string{"in", "missing"})
	require.NoError(t, txnErr(a.ErrorCode))
	require.NotNil(t, a.Assignment)
	require.Len(t, a.Assignment.TopicPartitions, 1, "only existing topics are assigned")
	require.Equal(t, []int32{0}, a.Assignment.TopicPartitions[0].Partitions)
	require.Equal(t, int32(5000), a.HeartbeatIntervalMillis)
	require.Equal(t, int32(2), a.MemberEpoch, "a new group's first subscription and first topic metadata, as on Kafka")
	require.ErrorIs(t, txnErr(beat(coord, "x", 3, nil).ErrorCode), kerr.UnknownMemberID)

	rejoin := beat(coord, "a", 0, []string{"in", "missing"})
	require.NoError(t, txnErr(rejoin.ErrorCode))
	require.Equal(t, a.MemberEpoch, rejoin.MemberEpoch, "rejoining with the same subscription keeps the epoch")
	require.NotNil(t, rejoin.Assignment, "a (re)join is sent its assignment")

	b := beat(coord, "b", 0, []string{"in"})
	require.NoError(t, txnErr(b.ErrorCode))
	require.Equal(t, a.MemberEpoch+1, b.MemberEpoch, "a new member's subscription moves the epoch by one")
	require.NotNil(t, b.Assignment, "every member gets every partition")
	require.Len(t, b.Assignment.TopicPartitions, 1)

	require.ErrorIs(t, txnErr(beat(coord, "a", a.MemberEpoch+10, nil).ErrorCode), kerr.FencedMemberEpoch)
	again := beat(coord, "a", a.MemberEpoch, nil)
	require.NoError(t, txnErr(again.ErrorCode))
	require.Equal(t, b.MemberEpoch, again.MemberEpoch, "a member takes the group epoch at its next heartbeat")
	require.Nil(t, again.Assignment, "an unchanged assignment is not sent again")
	lost := beat(coord, "a", a.MemberEpoch, nil)
	require.NoError(t, txnErr(lost.ErrorCode), "the previous epoch is accepted: the client lost the answer that raised it")
	require.Equal(t, again.MemberEpoch, lost.MemberEpoch)
	require.ErrorIs(t, txnErr(beat(coord, "a", a.MemberEpoch-1, nil).ErrorCode), kerr.FencedMemberEpoch, "older epochs are not")

	createTopic(t, c, "missing", 2)
	grown := beat(coord, "a", again.MemberEpoch, nil)
	require.NoError(t, txnErr(grown.ErrorCode))
	require.Greater(t, grown.MemberEpoch, again.MemberEpoch, "a subscribed topic appearing moves the epoch")
	require.NotNil(t, grown.Assignment)
	require.Len(t, grown.Assignment.TopicPartitions, 2)

	described, err := adm.DescribeShareGroups(testCtx(t), "g")
	require.NoError(t, err)
	require.NoError(t, described["g"].Err)
	require.Equal(t, "Stable", described["g"].GroupState)
	require.Len(t, described["g"].Members, 2)

	left := beat(coord, "b", b.MemberEpoch, nil)
	require.NoError(t, txnErr(left.ErrorCode))
	leave := beat(coord, "b", -1, nil)
	require.NoError(t, txnErr(leave.ErrorCode))
	require.Equal(t, int32(-1), leave.MemberEpoch)
	require.NotNil(t, leave.MemberID)
	require.Equal(t, "b", *leave.MemberID, "the answer to a leave names the member")
	require.ErrorIs(t, txnErr(beat(coord, "b", left.MemberEpoch, nil).ErrorCode), kerr.UnknownMemberID)
}

func TestShareSessions(t *testing.T) {
	c := shareTopicSetup(t, "share.record.lock.duration.ms", "600000")
	stranger := &rawShareMember{t: t, c: c, group: "g", id: "stranger", sessions: map[int32]int32{}}
	leader, err := c.Leader("in", 0)
	require.NoError(t, err)
	require.ErrorIs(t, txnErr(stranger.fetchFrom(leader, "in", 0).ErrorCode), kerr.UnknownMemberID)

	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Len(t, m1.fetch("in", 0), 10)
	m1.sessions[leader] += 5
	require.ErrorIs(t, txnErr(m1.fetchFrom(leader, "in", 0).ErrorCode), kerr.InvalidShareSessionEpoch)
	m1.sessions[leader] -= 5
	other := txnOtherNode(c, leader)
	m1.sessions[other] = 1
	require.ErrorIs(t, txnErr(m1.fetchFrom(other, "in", 0).ErrorCode), kerr.ShareSessionNotFound)

	notLeader := *m1
	notLeader.sessions = map[int32]int32{}
	resp := notLeader.fetchFrom(other, "in", 0)
	require.NoError(t, txnErr(resp.ErrorCode))
	rp := resp.Topics[0].Partitions[0]
	require.ErrorIs(t, txnErr(rp.ErrorCode), kerr.NotLeaderForPartition)
	require.Equal(t, leader, rp.CurrentLeader.LeaderID)
	require.Len(t, resp.NodeEndpoints, 1)
	require.Equal(t, leader, resp.NodeEndpoints[0].NodeID)

	// Closing the session at the leader releases what m1 holds there.
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.Version = 2
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &m1.group, &m1.id, -1
	ack := txnWire(t, c, leader, req).(*kmsg.ShareAcknowledgeResponse)
	require.NoError(t, txnErr(ack.ErrorCode))
	require.Equal(t, int32(600000), ack.AcquisitionLockTimeoutMillis)
	m2 := shareJoin(t, c, "g", "m2", "in")
	require.Equal(t, offsetsFrom(0, 9, 2), m2.fetch("in", 0))
	require.ErrorIs(t, m1.acknowledge("in", 0, 0, 0, wire.AckAccept), kerr.ShareSessionNotFound)
}

func TestShareAcknowledgeTypes(t *testing.T) {
	c := shareTopicSetup(t, "share.record.lock.duration.ms", "600000")
	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Len(t, m1.fetch("in", 0), 10)
	require.ErrorIs(t, m1.acknowledge("in", 0, 0, 0, wire.AckRenew), kerr.InvalidRequest, "RENEW needs IsRenewAck")
	require.ErrorIs(t, m1.acknowledge("in", 0, 8, 12, wire.AckAccept), kerr.InvalidRequest, "offsets past the window")
	require.NoError(t, m1.acknowledge("in", 0, 0, 1, wire.AckGap))
	require.NoError(t, m1.acknowledge("in", 0, 2, 3, wire.AckReject))
	require.NoError(t, m1.acknowledge("in", 0, 4, 5, wire.AckAccept))
	require.NoError(t, m1.acknowledge("in", 0, 4, 4, wire.AckAccept), "before the start offset: done, ignored")

	node, err := c.Leader("in", 0)
	require.NoError(t, err)
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.Version = 2
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &m1.group, &m1.id, m1.sessions[node]
	req.IsRenewAck = true
	rt := kmsg.NewShareAcknowledgeRequestTopic()
	rt.TopicID = m1.topicID("in")
	rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
	b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
	b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = 6, 9, []int8{4, 1, 2, 3}
	rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, b)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := txnWire(t, c, node, req).(*kmsg.ShareAcknowledgeResponse)
	require.NoError(t, txnErr(resp.ErrorCode))
	require.NoError(t, txnErr(resp.Topics[0].Partitions[0].ErrorCode), "one type per offset, RENEW allowed")
	m1.sessions[node]++
	require.Equal(t, map[shareRecordState]int{shareAcquired: 1, shareAcknowledged: 1, shareAvailable: 1, shareArchived: 1},
		shareRecordStates(t, c, "g", "in", 0), "the window starts at 6: renewed, accepted, released, rejected")
	require.ErrorIs(t, m1.acknowledge("in", 0, 7, 7, wire.AckAccept), kerr.InvalidRecordState, "already acknowledged, in the window")
}

// TestShareSessionTimeoutFencesMember: a member that stops heartbeating is
// fenced, and, as on Kafka 4.4 (whose group coordinator does not tell the
// share-partition leaders), keeps its records and its share session:
// nobody else gets them, it may still renew them, and they come back, at
// once and counted, when its session's connection closes.
func TestShareSessionTimeoutFencesMember(t *testing.T) {
	c := shareTopicSetup(t, "share.record.lock.duration.ms", "600000", "share.session.timeout.ms", "1000")
	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Len(t, m1.fetch("in", 0), 10)
	// m1 never heartbeats again.
	ctx := testCtx(t)
	shareEventually(t, ctx, "m1 to be fenced", func() bool {
		var gone bool
		require.NoError(t, c.do(func() { gone = c.coordinators.share.groups["g"].members["m1"] == nil }))
		return gone
	})
	m2 := shareJoin(t, c, "g", "m2", "in")
	require.Empty(t, m2.fetch("in", 0), "the fenced member still holds its records")
	require.NoError(t, m1.renew("in", 0, 0, 9), "its session still serves it")
	leader, err := c.Leader("in", 0)
	require.NoError(t, err)
	m1.disconnect(leader)
	require.Equal(t, offsetsFrom(0, 9, 2), shareAcquireEventually(t, m2, "in", 0),
		"its connection's close released them, long before their lock, the cut-short delivery counted")
}

func TestShareGroupConfigs(t *testing.T) {
	c := newTestCluster(t, ShareLockDuration(7*time.Second))
	admin := newTestClient(t, c)
	describe := func() map[string]kmsg.DescribeConfigsResponseResourceConfig {
		d, _, err := describeGroupConfigs(t, admin, "g")
		require.NoError(t, err)
		return d
	}
	alter := func(op kmsg.IncrementalAlterConfigOp, name string, value *string) error {
		if value == nil {
			return alterGroupConfig(t, admin, "g", op, name, "")
		}
		return alterGroupConfig(t, admin, "g", op, name, *value)
	}
	str := func(s string) *string { return &s }

	d := describe()
	require.Equal(t, "7000", *d["share.record.lock.duration.ms"].Value, "the cluster default")
	require.Equal(t, kmsg.ConfigSourceDefaultConfig, d["share.record.lock.duration.ms"].Source)
	require.Equal(t, "latest", *d["share.auto.offset.reset"].Value)
	require.Equal(t, "5", *d["share.delivery.count.limit"].Value)

	require.ErrorIs(t, alter(kmsg.IncrementalAlterConfigOpSet, "share.auto.offset.reset", str("middle")), kerr.InvalidConfig)
	require.ErrorIs(t, alter(kmsg.IncrementalAlterConfigOpSet, "share.delivery.count.limit", str("1")), kerr.InvalidConfig)
	require.ErrorIs(t, alter(kmsg.IncrementalAlterConfigOpSet, "share.record.lock.duration.ms", str("soon")), kerr.InvalidConfig)
	require.ErrorIs(t, alter(kmsg.IncrementalAlterConfigOpSet, "share.no.such.config", str("1")), kerr.InvalidConfig)
	require.ErrorIs(t, alter(kmsg.IncrementalAlterConfigOpAppend, "share.auto.offset.reset", str("earliest")), kerr.InvalidConfig)
	require.Equal(t, "latest", *describe()["share.auto.offset.reset"].Value, "refused changes change nothing")

	require.NoError(t, alter(kmsg.IncrementalAlterConfigOpSet, "share.delivery.count.limit", str("3")))
	d = describe()
	require.Equal(t, "3", *d["share.delivery.count.limit"].Value)
	require.Equal(t, kmsg.ConfigSourceGroupConfig, d["share.delivery.count.limit"].Source)
	require.NoError(t, alter(kmsg.IncrementalAlterConfigOpDelete, "share.delivery.count.limit", nil))
	require.Equal(t, "5", *describe()["share.delivery.count.limit"].Value)
}

func TestShareTopicConfigs(t *testing.T) {
	c := newTestCluster(t)
	createTopic(t, c, "cfg", 1)
	adm := kadm.NewClient(newTestClient(t, c))
	ctx := testCtx(t)
	str := func(s string) *string { return &s }
	resps, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.ms", Value: str("1000")},
		{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: str("compact")},
	}, "cfg")
	require.NoError(t, err)
	require.NoError(t, resps[0].Err)
	described, err := adm.DescribeTopicConfigs(ctx, "cfg")
	require.NoError(t, err)
	got := map[string]string{}
	for _, cfg := range described[0].Configs {
		got[cfg.Key] = *cfg.Value
	}
	require.Equal(t, "1000", got["retention.ms"])
	require.Equal(t, "compact", got["cleanup.policy"])
	require.Equal(t, "producer", got["compression.type"], "a default")

	resps, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "x", Value: str("1")}}, "nope")
	require.NoError(t, err)
	require.ErrorIs(t, resps[0].Err, kerr.UnknownTopicOrPartition)
}

func TestShareDeleteGroup(t *testing.T) {
	c := shareTopicSetup(t)
	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Len(t, m1.fetch("in", 0), 10)
	require.NoError(t, m1.acknowledge("in", 0, 0, 9, wire.AckAccept))
	admin := newTestClient(t, c)
	require.Equal(t, int64(10), shareOffsets(t, admin, "g", "in")[0].StartOffset)
	adm := kadm.NewClient(admin)

	resps, err := adm.DeleteGroups(testCtx(t), "g")
	require.NoError(t, err)
	require.ErrorIs(t, resps["g"].Err, kerr.NonEmptyGroup)

	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.MemberEpoch = "g", "m1", -1
	require.NoError(t, txnErr(txnWire(t, c, shareGroupCoordinator(t, c, "g"), req).(*kmsg.ShareGroupHeartbeatResponse).ErrorCode))
	resps, err = adm.DeleteGroups(testCtx(t), "g")
	require.NoError(t, err)
	require.NoError(t, resps["g"].Err)

	described, err := adm.DescribeShareGroups(testCtx(t), "g")
	require.NoError(t, err)
	require.ErrorIs(t, described["g"].Err, kerr.GroupIDNotFound)
	// The state is gone, also for a coordinator that replays the log.
	state := shareStatePartition(t, c, "g", "in", 0)
	leader, err := c.Leader(wire.ShareGroupStateTopic, state)
	require.NoError(t, err)
	require.NoError(t, c.MoveLeader(wire.ShareGroupStateTopic, state, txnOtherNode(c, leader)))
	m2 := shareJoin(t, c, "g", "m2", "in")
	require.Equal(t, offsetsFrom(0, 9, 1), m2.fetch("in", 0), "a new group starts over (share.auto.offset.reset=earliest)")
}

// TestShareStateReplayMatchesLive drives enough changes to write
// snapshots, then checks that replaying every __share_group_state
// partition rebuilds exactly the state the coordinators hold, and that a
// coordinator move changes nothing.
func TestShareStateReplayMatchesLive(t *testing.T) {
	c := newTestCluster(t, Nodes(2), ShareStatePartitions(2))
	createTopic(t, c, "in", 2)
	for _, g := range []string{"g1", "g2"} {
		shareSetGroupConfigs(t, newTestClient(t, c), g, "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "600000")
	}
	shareProduce(t, shareProducer(t, c), "in", 2, shareValues("v", 400)...)
	for _, g := range []string{"g1", "g2"} {
		m := shareJoin(t, c, g, "m", "in")
		for p := int32(0); p < 2; p++ {
			require.Len(t, m.fetch("in", p), 200)
			for o := int64(0); o < 200; o += 2 {
				typ := wire.AckReject
				if o%4 == 0 {
					typ = wire.AckAccept
				}
				require.NoError(t, m.acknowledge("in", p, o, o, typ))
			}
		}
	}
	check := func() {
		type pair struct {
			live, replayed               map[shareKey]*sharePersisted
			livePending, replayedPending int
		}
		var got []pair
		require.NoError(t, c.do(func() {
			sc := c.coordinators.share
			for _, p := range c.topics[wire.ShareGroupStateTopic].partitions {
				sh, err := sc.states.lookup(p.leader, p.index)
				if err != nil {
					got = append(got, pair{})
					continue
				}
				replayed := sc.loadShareState(p, p.leader)
				got = append(got, pair{sh.state.parts, replayed.parts, len(sh.state.pending), len(replayed.pending)})
			}
		}))
		for i, p := range got {
			require.NotNil(t, p.live, "partition %d has a coordinator", i)
			require.Equal(t, p.live, p.replayed, "partition %d", i)
			require.Equal(t, p.livePending, p.replayedPending)
		}
	}
	check()
	var snapshots int
	require.NoError(t, c.do(func() {
		for _, p := range c.topics[wire.ShareGroupStateTopic].partitions {
			for _, b := range p.batches {
				recs, _ := decodeRecords(b.raw)
				for _, r := range recs {
					if v, err := decodeShareStateValue(r.value); err == nil && v != nil && v.Kind == shareKindSnapshot && len(v.Batches) > 0 {
						snapshots++
					}
				}
			}
		}
	}))
	require.Positive(t, snapshots, "updates were folded into snapshots")
	for p := int32(0); p < 2; p++ {
		leader, err := c.Leader(wire.ShareGroupStateTopic, p)
		require.NoError(t, err)
		require.NoError(t, c.MoveLeader(wire.ShareGroupStateTopic, p, 1-leader))
	}
	check()
}

func TestShareFetchWaitsThenAnswersEmpty(t *testing.T) {
	c := shareTopicSetup(t)
	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Len(t, m1.fetch("in", 0), 10)
	leader, err := c.Leader("in", 0)
	require.NoError(t, err)
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 2
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &m1.group, &m1.id, m1.sessions[leader]
	req.MaxWaitMillis, req.MaxRecords, req.MaxBytes = 100, 10, 1<<20
	resp := txnWire(t, c, leader, req).(*kmsg.ShareFetchResponse)
	require.NoError(t, txnErr(resp.ErrorCode))
	require.Empty(t, resp.Topics, "nothing to acquire: the long poll ends empty")
}

// TestShareFetchAcquireModes: in batch-optimized mode (ShareAcquireMode 0,
// and v1, which has no mode) MaxRecords is soft, as in Kafka: the batch
// being acquired is acquired to its end, and no further batch; in
// record-limit mode (1) acquisition stops at MaxRecords.
func TestShareFetchAcquireModes(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	createTopic(t, c, "in", 1)
	admin := newTestClient(t, c)
	prod := shareProducer(t, c)
	for range 2 { // two batches of ten records
		shareProduce(t, prod, "in", 1, shareValues("v", 10)...)
	}
	for _, tc := range []struct {
		name    string
		version int16
		mode    int8
		want    []int // offsets acquired by three fetches of MaxRecords 3
	}{
		{"v2 batch-optimized", 2, 0, []int{10, 10, 0}},
		{"v1 (batch-optimized)", 1, 0, []int{10, 10, 0}},
		{"v2 record-limit", 2, 1, []int{3, 3, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group := "g-" + tc.name
			shareSetGroupConfigs(t, admin, group, "share.auto.offset.reset", "earliest")
			m := shareJoin(t, c, group, "m", "in")
			var got []int
			for range 3 {
				req := kmsg.NewPtrShareFetchRequest()
				req.Version = tc.version
				req.GroupID, req.MemberID = &m.group, &m.id
				req.ShareSessionEpoch = m.sessions[0]
				req.MaxRecords, req.BatchSize, req.MaxBytes = 3, 3, 1<<20
				req.ShareAcquireMode = tc.mode
				rt := kmsg.NewShareFetchRequestTopic()
				rt.TopicID = m.topicID("in")
				rt.Partitions = append(rt.Partitions, kmsg.NewShareFetchRequestTopicPartition())
				req.Topics = append(req.Topics, rt)
				resp := m.wire(0, req).(*kmsg.ShareFetchResponse)
				require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
				m.sessions[0]++
				n := 0
				for _, rt := range resp.Topics {
					for _, rp := range rt.Partitions {
						for _, ar := range rp.AcquiredRecords {
							n += int(ar.LastOffset - ar.FirstOffset + 1)
						}
					}
				}
				got = append(got, n)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestShareStateLogNamesHowEveryRecordEnded: an update written when the
// start offset passes records names their final state (ACKNOWLEDGED or
// ARCHIVED), so that a reader of __share_group_state learns how each
// record ended, not only that it is done: offsets 0-4 accepted, 5-6
// rejected, 7-9 released until the delivery limit archived them.
func TestShareStateLogNamesHowEveryRecordEnded(t *testing.T) {
	c := shareTopicSetup(t, "share.delivery.count.limit", "2")
	m1 := shareJoin(t, c, "g", "m1", "in")
	require.Len(t, m1.fetch("in", 0), 10)
	require.NoError(t, m1.acknowledge("in", 0, 7, 9, wire.AckRelease))
	require.NoError(t, m1.acknowledge("in", 0, 5, 6, wire.AckReject))
	require.Len(t, m1.fetch("in", 0), 3) // 7-9, second delivery
	require.NoError(t, m1.acknowledge("in", 0, 7, 9, wire.AckRelease))
	require.NoError(t, m1.acknowledge("in", 0, 0, 4, wire.AckAccept))

	final := map[int64]int8{}
	var starts []int64
	require.NoError(t, c.do(func() {
		for _, p := range c.topics[wire.ShareGroupStateTopic].partitions {
			for _, b := range p.batches {
				recs, _ := decodeRecords(b.raw)
				for _, r := range recs {
					v, err := decodeShareStateValue(r.value)
					if err != nil || v == nil || v.Kind != shareKindUpdate {
						continue
					}
					starts = append(starts, v.StartOffset)
					for _, sb := range v.Batches {
						for o := sb.First; o <= sb.Last; o++ {
							if sb.State == persistAcknowledged || sb.State == persistArchived {
								final[o] = sb.State
							}
						}
					}
				}
			}
		}
	}))
	require.Equal(t, int64(10), starts[len(starts)-1], "every record is done")
	for o := int64(0); o < 10; o++ {
		want := persistArchived
		if o < 5 {
			want = persistAcknowledged
		}
		require.Equal(t, want, final[o], "offset %d", o)
	}
}
