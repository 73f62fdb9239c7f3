package testkit

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Acknowledgement types of KIP-932 and KIP-1222, as ShareFetch and
// ShareAcknowledge carry them.
const (
	AckGap     int8 = 0
	AckAccept  int8 = 1
	AckRelease int8 = 2
	AckReject  int8 = 3
	AckRenew   int8 = 4
)

// ShareMember is a share-group member driven by raw requests: it joins
// and leaves with ShareGroupHeartbeat (on one kgo client) and keeps one
// share session at the leader of one partition, whose requests travel on
// a kgo client of their own. So a test can drop the session's connection
// without closing the session (Disconnect), as a process that dies does,
// or carry the session's next requests on a new connection
// (SwitchConnection).
type ShareMember struct {
	t         testing.TB
	seeds     []string
	opts      []kgo.Opt
	Group, ID string
	Topic     string
	TopicID   [16]byte
	Partition int32
	// Leader is the node the session is at: the partition's leader when
	// the member joined, or as Relocate found it.
	Leader int32
	// MemberEpoch is the member's epoch in the group; SessionEpoch the
	// epoch the session's next request carries.
	MemberEpoch  int32
	SessionEpoch int32

	group *kgo.Client // heartbeats and metadata
	conn  *kgo.Client // the share session's requests
	// fetchWritten hears of every ShareFetch the session's clients have
	// written (ParkFetch).
	fetchWritten chan struct{}
}

// fetchWriteHook tells a member that one of its ShareFetch requests is on
// the wire.
type fetchWriteHook struct{ written chan struct{} }

func (h fetchWriteHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != kmsg.ShareFetch.Int16() || err != nil {
		return
	}
	select {
	case h.written <- struct{}{}:
	default:
	}
}

// NewMemberID returns a member id the way KIP-932 clients make one: a
// random UUID in Kafka's base64 form.
func NewMemberID() string {
	var id [16]byte
	_, _ = rand.Read(id[:])
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// JoinShare joins a new member to group, subscribed to topic, heartbeats
// until the group has assigned it a partition of topic (Kafka initializes
// a share-partition only once it is assigned), and finds the leader of
// the topic's partition. opts are added to the member's kgo clients. The
// test closes the clients, without leaving the group or closing the
// session.
func JoinShare(ctx context.Context, t testing.TB, seeds []string, group, topic string, partition int32, opts ...kgo.Opt) *ShareMember {
	t.Helper()
	m := &ShareMember{t: t, seeds: seeds, opts: opts, Group: group, ID: NewMemberID(), Topic: topic, Partition: partition,
		fetchWritten: make(chan struct{}, 1)}
	m.group = m.client()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID, req.MemberEpoch = group, m.ID, 0
	req.SubscribedTopicNames = []string{topic}
	for {
		resp, err := req.RequestWith(ctx, m.group)
		require.NoError(t, err, "share group heartbeat of %s", m.ID)
		// A coordinator that is loading or moving is asked again.
		if herr := kerr.ErrorForCode(resp.ErrorCode); !kerr.IsRetriable(herr) {
			require.NoError(t, herr, "share group heartbeat of %s", m.ID)
			m.MemberEpoch = resp.MemberEpoch
			if resp.Assignment != nil && len(resp.Assignment.TopicPartitions) > 0 {
				break
			}
			req = kmsg.NewPtrShareGroupHeartbeatRequest()
			req.GroupID, req.MemberID, req.MemberEpoch = group, m.ID, m.MemberEpoch
		}
		select {
		case <-ctx.Done():
			t.Fatalf("member %s of %s was not assigned a partition of %s before the deadline", m.ID, group, topic)
		case <-time.After(100 * time.Millisecond):
		}
	}
	m.Relocate(ctx)
	m.conn = m.sessionClient()
	return m
}

func (m *ShareMember) client() *kgo.Client {
	m.t.Helper()
	return Client(m.t, m.seeds, m.opts...)
}

// sessionClient is a client for the session's requests, whose ShareFetch
// writes ParkFetch hears of.
func (m *ShareMember) sessionClient() *kgo.Client {
	m.t.Helper()
	return Client(m.t, m.seeds, append(append([]kgo.Opt(nil), m.opts...), kgo.WithHooks(fetchWriteHook{m.fetchWritten}))...)
}

// Relocate looks the partition's leader up again (after a leader move)
// and makes it the node of the member's next requests. It does not touch
// the session.
func (m *ShareMember) Relocate(ctx context.Context) {
	m.t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(m.Topic)
	req.Topics = append(req.Topics, rt)
	for {
		resp, err := req.RequestWith(ctx, m.group)
		require.NoError(m.t, err, "metadata of %s", m.Topic)
		require.Len(m.t, resp.Topics, 1, "metadata of %s", m.Topic)
		st := resp.Topics[0]
		if st.ErrorCode == 0 && int(m.Partition) < len(st.Partitions) && st.Partitions[m.Partition].Leader >= 0 {
			m.TopicID = st.TopicID
			m.Leader = st.Partitions[m.Partition].Leader
			return
		}
		select {
		case <-ctx.Done():
			m.t.Fatalf("%s/%d has no leader before the deadline", m.Topic, m.Partition)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Heartbeat sends a ShareGroupHeartbeat at the member's epoch and returns
// its error code (it keeps the member in the group).
func (m *ShareMember) Heartbeat(ctx context.Context) int16 {
	m.t.Helper()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID, req.MemberEpoch = m.Group, m.ID, m.MemberEpoch
	resp, err := req.RequestWith(ctx, m.group)
	require.NoError(m.t, err, "share group heartbeat of %s", m.ID)
	if resp.ErrorCode == 0 {
		m.MemberEpoch = resp.MemberEpoch
	}
	return resp.ErrorCode
}

// Leave sends ShareGroupHeartbeat with member epoch -1 and returns its
// error code. It does not touch the share session.
func (m *ShareMember) Leave(ctx context.Context) int16 {
	m.t.Helper()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID, req.MemberEpoch = m.Group, m.ID, -1
	resp, err := req.RequestWith(ctx, m.group)
	require.NoError(m.t, err, "leave %s", m.Group)
	return resp.ErrorCode
}

// AckRange is one acknowledged range with one type per offset, or one
// type for the whole range.
type AckRange struct {
	First, Last int64
	Types       []int8
}

// Ack returns the range first..last acknowledged with typ.
func Ack(first, last int64, typ int8) AckRange {
	return AckRange{First: first, Last: last, Types: []int8{typ}}
}

// Fetch sends one ShareFetch for the member's partition at the session's
// epoch, carrying acks, and waiting up to maxWait for records. The epoch
// moves on when the broker took the request (no top-level error); epoch
// -1 (CloseSessionByFetch) is sent with CloseSession.
func (m *ShareMember) Fetch(ctx context.Context, maxWait time.Duration, acks ...AckRange) *kmsg.ShareFetchResponse {
	m.t.Helper()
	return m.fetch(ctx, m.SessionEpoch, maxWait, acks)
}

func (m *ShareMember) fetch(ctx context.Context, epoch int32, maxWait time.Duration, acks []AckRange) *kmsg.ShareFetchResponse {
	m.t.Helper()
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = &m.Group, &m.ID
	req.ShareSessionEpoch = epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = int32(maxWait.Milliseconds()), 1, 1<<20
	req.MaxRecords, req.BatchSize = 500, 500
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = m.TopicID
	rp := kmsg.NewShareFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes = m.Partition, 1<<20
	for _, a := range acks {
		b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
		b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = a.First, a.Last, a.Types
		rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, b)
	}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := m.conn.Broker(int(m.Leader)).Request(ctx, req)
	require.NoError(m.t, err, "share fetch of %s", m.ID)
	fr := resp.(*kmsg.ShareFetchResponse)
	if fr.ErrorCode == 0 && epoch >= 0 {
		m.SessionEpoch = nextShareEpoch(epoch)
	}
	return fr
}

func nextShareEpoch(e int32) int32 {
	if e == 1<<31-1 {
		return 1
	}
	return e + 1
}

// ParkFetch sends a ShareFetch that waits up to maxWait for records, and
// returns once the request is on the wire: with nothing to acquire, the
// broker parks it. The session's epoch moves on, as the broker moves it
// when it takes the request. done receives the request's error (nil when
// it was answered) when it ends; Disconnect ends it on the client's side.
func (m *ShareMember) ParkFetch(ctx context.Context, maxWait time.Duration) (done <-chan error) {
	m.t.Helper()
	select {
	case <-m.fetchWritten:
	default:
	}
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = &m.Group, &m.ID
	req.ShareSessionEpoch = m.SessionEpoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = int32(maxWait.Milliseconds()), 1, 1<<20
	req.MaxRecords, req.BatchSize = 500, 500
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = m.TopicID
	rp := kmsg.NewShareFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes = m.Partition, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	errc := make(chan error, 1)
	br := m.conn.Broker(int(m.Leader))
	go func() {
		_, err := br.Request(ctx, req)
		errc <- err
	}()
	select {
	case <-m.fetchWritten:
	case err := <-errc:
		m.t.Fatalf("the parked share fetch of %s ended before it was written: %v", m.ID, err)
	case <-ctx.Done():
		m.t.Fatalf("the parked share fetch of %s was not written before the deadline", m.ID)
	}
	m.SessionEpoch = nextShareEpoch(m.SessionEpoch)
	return errc
}

// Acquire fetches until records of the partition are acquired (a
// share-partition may still be initializing, or hold nothing yet) and
// returns the acquired offsets with their delivery counts. It fails the
// test on an error in an answer, or when ctx ends first.
func (m *ShareMember) Acquire(ctx context.Context) map[int64]int16 {
	m.t.Helper()
	for {
		resp := m.Fetch(ctx, 500*time.Millisecond)
		require.NoError(m.t, kerr.ErrorForCode(resp.ErrorCode), "share fetch of %s", m.ID)
		if !retriablePartitionError(resp) {
			if got := Acquired(m.t, resp); len(got) > 0 {
				return got
			}
		}
		if ctx.Err() != nil {
			m.t.Fatalf("member %s acquired nothing of %s/%d before the deadline", m.ID, m.Topic, m.Partition)
		}
	}
}

// retriablePartitionError reports whether a partition of a ShareFetch
// answer has a retriable error (a leader or share-partition that is still
// loading): Acquire asks again.
func retriablePartitionError(resp *kmsg.ShareFetchResponse) bool {
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil && kerr.IsRetriable(err) {
				return true
			}
		}
	}
	return false
}

// Acquired returns the offsets a ShareFetch answer acquired, with their
// delivery counts. It fails the test on a partition error (an
// acknowledgement error is the caller's to check).
func Acquired(t testing.TB, resp *kmsg.ShareFetchResponse) map[int64]int16 {
	t.Helper()
	out := map[int64]int16{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			require.NoError(t, kerr.ErrorForCode(rp.ErrorCode), "share fetch of partition %d", rp.Partition)
			for _, ar := range rp.AcquiredRecords {
				for o := ar.FirstOffset; o <= ar.LastOffset; o++ {
					out[o] = ar.DeliveryCount
				}
			}
		}
	}
	return out
}

// FormatDeliveries writes acquired offsets and delivery counts as
// "offset:count" in offset order, for messages.
func FormatDeliveries(got map[int64]int16) string {
	offs := make([]int64, 0, len(got))
	for o := range got {
		offs = append(offs, o)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	var b strings.Builder
	for i, o := range offs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%d", o, got[o])
	}
	return b.String()
}

// Acknowledge sends one ShareAcknowledge of the member's partition at the
// session's epoch (v2 with IsRenewAck when renew) and returns the
// top-level error code and the partition's. The epoch moves on when the
// broker took the request.
func (m *ShareMember) Acknowledge(ctx context.Context, renew bool, acks ...AckRange) (top, part int16) {
	m.t.Helper()
	return m.acknowledge(ctx, m.SessionEpoch, renew, acks)
}

func (m *ShareMember) acknowledge(ctx context.Context, epoch int32, renew bool, acks []AckRange) (top, part int16) {
	m.t.Helper()
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID = &m.Group, &m.ID
	req.ShareSessionEpoch = epoch
	req.IsRenewAck = renew
	if len(acks) > 0 {
		rt := kmsg.NewShareAcknowledgeRequestTopic()
		rt.TopicID = m.TopicID
		rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
		rp.Partition = m.Partition
		for _, a := range acks {
			b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
			b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = a.First, a.Last, a.Types
			rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, b)
		}
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := m.conn.Broker(int(m.Leader)).Request(ctx, req)
	require.NoError(m.t, err, "share acknowledge of %s", m.ID)
	ar := resp.(*kmsg.ShareAcknowledgeResponse)
	if ar.ErrorCode != 0 {
		return ar.ErrorCode, 0
	}
	if epoch >= 0 {
		m.SessionEpoch = nextShareEpoch(epoch)
	}
	for _, rt := range ar.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition == m.Partition {
				return 0, rp.ErrorCode
			}
		}
	}
	return 0, 0
}

// CloseSession closes the share session with the final epoch (-1),
// carrying acks: with a ShareFetch when byFetch, else with a
// ShareAcknowledge. It returns the top-level error code and the
// partition's acknowledgement error code. The next request opens a new
// session (epoch 0).
func (m *ShareMember) CloseSession(ctx context.Context, byFetch bool, acks ...AckRange) (top, part int16) {
	m.t.Helper()
	defer func() { m.SessionEpoch = 0 }()
	if !byFetch {
		return m.acknowledge(ctx, -1, false, acks)
	}
	resp := m.fetch(ctx, -1, 0, acks)
	if resp.ErrorCode != 0 {
		return resp.ErrorCode, 0
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition == m.Partition {
				return 0, rp.AcknowledgeErrorCode
			}
		}
	}
	return 0, 0
}

// Disconnect closes every connection of the session's client without
// closing the session or leaving the group, as the death of the member's
// process does; the member's next session requests go on a new
// connection.
func (m *ShareMember) Disconnect() {
	m.t.Helper()
	m.conn.Close()
	m.conn = m.sessionClient()
}

// SwitchConnection carries the session's next requests on a new
// connection, leaving the old one open, and returns what closes the old
// one.
func (m *ShareMember) SwitchConnection() (closeOld func()) {
	m.t.Helper()
	old := m.conn
	m.conn = m.sessionClient()
	return old.Close
}

// ShareConnectionOf carries the member's session requests on other's
// session connection (one client, as an application with two members on
// one kgo client has).
func (m *ShareMember) ShareConnectionOf(other *ShareMember) { m.conn = other.conn }

// Conn returns the client that carries the session's requests.
func (m *ShareMember) Conn() *kgo.Client { return m.conn }

// Forget makes the member's next session request open a new session
// (epoch 0), as a client that lost its session does; the broker is told
// nothing.
func (m *ShareMember) Forget() { m.SessionEpoch = 0 }

// ErrName names an error code as Kafka does ("OK" for none).
func ErrName(code int16) string {
	if code == 0 {
		return "OK"
	}
	if e, ok := kerr.ErrorForCode(code).(*kerr.Error); ok && e.Code == code {
		return e.Message
	}
	return fmt.Sprintf("ERROR_CODE_%d", code)
}
