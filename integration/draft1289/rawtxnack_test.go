package draft1289_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
)

// The draft's API key and version, and its acknowledgement types.
const (
	keyTxnShareAcknowledge = 95
	ackGap, ackAccept      = 0, 1
	ackRelease, ackReject  = 2, 3
)

// draftBatch is one TxnShareAcknowledgeBatch: FirstOffset, LastOffset,
// AcknowledgeTypes (one for the range, or one per offset).
type draftBatch struct {
	first, last int64
	types       []int8
}

// draftRequest holds the draft's request fields in the draft's order.
type draftRequest struct {
	transactionalID string
	groupID         string
	producerID      int64
	producerEpoch   int16
	memberID        string
	memberEpoch     int32
	topicID         [16]byte
	partition       int32
	batches         []draftBatch
}

// The flexible-version primitives, from the Kafka protocol guide: an
// unsigned varint, a compact string (uvarint length+1, then the bytes), a
// compact array length (uvarint count+1) and an empty tagged-field section.
func uvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
func compactString(b []byte, s string) []byte {
	return append(uvarint(b, uint64(len(s))+1), s...)
}
func compactLen(b []byte, n int) []byte { return uvarint(b, uint64(n)+1) }
func noTags(b []byte) []byte            { return append(b, 0) }

// body encodes TxnShareAcknowledgeRequest v0 field by field, as the
// draft's JSON lists them.
func (r draftRequest) body() []byte {
	var b []byte
	b = compactString(b, r.transactionalID) // TransactionalId (nullable; not null here)
	b = compactString(b, r.groupID)         // GroupId
	b = binary.BigEndian.AppendUint64(b, uint64(r.producerID))
	b = binary.BigEndian.AppendUint16(b, uint16(r.producerEpoch))
	b = compactString(b, r.memberID) // MemberId
	b = binary.BigEndian.AppendUint32(b, uint32(r.memberEpoch))
	b = compactLen(b, 1) // Topics
	b = append(b, r.topicID[:]...)
	b = compactLen(b, 1) // Partitions
	b = binary.BigEndian.AppendUint32(b, uint32(r.partition))
	b = compactLen(b, len(r.batches)) // AcknowledgementBatches
	for _, x := range r.batches {
		b = binary.BigEndian.AppendUint64(b, uint64(x.first))
		b = binary.BigEndian.AppendUint64(b, uint64(x.last))
		b = compactLen(b, len(x.types)) // AcknowledgeTypes []int8
		for _, t := range x.types {
			b = append(b, byte(t))
		}
		b = noTags(b) // batch
	}
	b = noTags(b) // partition
	b = noTags(b) // topic
	return noTags(b)
}

// draftResponse is what the client reads of TxnShareAcknowledgeResponse
// v0: the top-level error and the one partition's error.
type draftResponse struct {
	topError, partError int16
	message             *string
}

// rawConn is one TCP connection speaking request header v2 (flexible).
type rawConn struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
	corr int32
}

func dial(t *testing.T, addr string) *rawConn {
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &rawConn{t: t, conn: conn, r: bufio.NewReader(conn)}
}

// stage sends req and decodes the answer by hand.
func (c *rawConn) stage(req draftRequest) draftResponse {
	c.t.Helper()
	c.corr++
	var hdr []byte
	hdr = binary.BigEndian.AppendUint16(hdr, keyTxnShareAcknowledge)
	hdr = binary.BigEndian.AppendUint16(hdr, 0) // version 0
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(c.corr))
	hdr = binary.BigEndian.AppendUint16(hdr, 3) // client id: a non-compact nullable string
	hdr = append(hdr, "raw"...)
	hdr = noTags(hdr)
	msg := append(hdr, req.body()...)
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(msg)))
	require.NoError(c.t, c.conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err := c.conn.Write(append(frame, msg...))
	require.NoError(c.t, err)

	var size [4]byte
	_, err = io.ReadFull(c.r, size[:])
	require.NoError(c.t, err)
	resp := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err = io.ReadFull(c.r, resp)
	require.NoError(c.t, err)
	d := decoder{t: c.t, b: resp}
	require.Equal(c.t, c.corr, d.int32(), "correlation id")
	d.tags()  // response header v1
	d.int32() // ThrottleTimeMs
	out := draftResponse{topError: d.int16()}
	require.Equal(c.t, 1, d.compactLen(), "Responses")
	d.take(16) // TopicId
	require.Equal(c.t, 1, d.compactLen(), "Partitions")
	require.Equal(c.t, req.partition, d.int32(), "PartitionIndex")
	out.partError = d.int16()
	out.message = d.compactNullableString()
	d.tags()
	d.tags()
	d.tags()
	require.Empty(c.t, d.b, "bytes after the response")
	return out
}

// decoder reads the response's primitives.
type decoder struct {
	t *testing.T
	b []byte
}

func (d *decoder) take(n int) []byte {
	require.GreaterOrEqual(d.t, len(d.b), n, "response too short")
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}
func (d *decoder) int16() int16 { return int16(binary.BigEndian.Uint16(d.take(2))) }
func (d *decoder) int32() int32 { return int32(binary.BigEndian.Uint32(d.take(4))) }
func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	require.Positive(d.t, n, "bad uvarint")
	d.b = d.b[n:]
	return v
}
func (d *decoder) compactLen() int { return int(d.uvarint()) - 1 }
func (d *decoder) compactNullableString() *string {
	n := d.compactLen()
	if n < 0 {
		return nil
	}
	s := string(d.take(n))
	return &s
}
func (d *decoder) tags() {
	for range d.uvarint() {
		d.uvarint()
		d.take(int(d.uvarint()))
	}
}

func codeName(code int16) string {
	if err := kerr.ErrorForCode(code); err != nil {
		return err.Error()
	}
	return "NONE"
}

// TestDraftClientCommitsAbortsAndIsRefused: a client that knows only the
// draft's field list stages acknowledgements in a transaction at the
// bundled broker and commits them, stages again and aborts (the records
// are available again at once), and is refused with nothing staged for
// RELEASE, a stale member epoch and a wrong producer epoch.
func TestDraftClientCommitsAbortsAndIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c := bundled.Cluster(t, broker.Nodes(1), broker.ShareLockDuration(10*time.Minute))
	seeds := c.Bootstrap()
	admin := testkit.Client(t, seeds)
	testkit.CreateTopic(ctx, t, admin, "in", 1)
	testkit.SetGroupConfigs(ctx, t, admin, "g", "share.auto.offset.reset", "earliest")
	var values []string
	for i := range 10 {
		values = append(values, fmt.Sprintf("v%d", i))
	}
	testkit.ProduceRoundRobin(ctx, t, testkit.Client(t, seeds, kgo.RecordPartitioner(kgo.ManualPartitioner())), "in", 1, values...)

	m := testkit.JoinShare(ctx, t, seeds, "g", "in", 0)
	held := map[int64]int16{}
	for len(held) < 10 {
		for o, n := range m.Acquire(ctx) {
			held[o] = n
		}
	}

	init := kmsg.NewPtrInitProducerIDRequest()
	txnID := "draft-client"
	init.TransactionalID = &txnID
	init.TransactionTimeoutMillis = 60_000
	initResp, err := init.RequestWith(ctx, admin)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(initResp.ErrorCode))
	pid, epoch := initResp.ProducerID, initResp.ProducerEpoch

	conn := dial(t, seeds[0])
	req := func(pe int16, me int32, batches ...draftBatch) draftRequest {
		return draftRequest{transactionalID: txnID, groupID: "g", producerID: pid, producerEpoch: pe,
			memberID: m.ID, memberEpoch: me, topicID: m.TopicID, partition: 0, batches: batches}
	}
	start := func() int64 { return testkit.StartOffsets(ctx, t, admin, "g", "in")[0] }
	endTxn := func(e int16, commit bool) int16 {
		end := kmsg.NewPtrEndTxnRequest()
		end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = txnID, pid, e, commit
		resp, err := end.RequestWith(ctx, admin)
		require.NoError(t, err)
		require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
		require.GreaterOrEqual(t, resp.Version, int16(5), "EndTxn v5 returns the bumped epoch")
		return resp.ProducerEpoch
	}

	// Refused, nothing staged: RELEASE in a transaction...
	got := conn.stage(req(epoch, m.MemberEpoch, draftBatch{0, 1, []int8{ackRelease}}))
	require.Zero(t, got.topError, codeName(got.topError))
	require.Equal(t, kerr.InvalidRequest.Code, got.partError, "RELEASE: %s", codeName(got.partError))
	// ... a member epoch older than the member's current one...
	got = conn.stage(req(epoch, m.MemberEpoch-1, draftBatch{0, 1, []int8{ackAccept}}))
	require.Equal(t, kerr.StaleMemberEpoch.Code, got.topError, "stale member epoch: %s", codeName(got.topError))
	require.Equal(t, kerr.StaleMemberEpoch.Code, got.partError)
	// ... and a producer epoch the coordinator did not give.
	got = conn.stage(req(epoch+1, m.MemberEpoch, draftBatch{0, 1, []int8{ackAccept}}))
	require.Zero(t, got.topError, codeName(got.topError))
	require.Contains(t, []int16{kerr.InvalidProducerEpoch.Code, kerr.ProducerFenced.Code}, got.partError,
		"wrong producer epoch: %s", codeName(got.partError))

	// Commit: a per-offset batch (ACCEPT, REJECT, gap, ACCEPT) and a
	// single-type one.
	got = conn.stage(req(epoch, m.MemberEpoch,
		draftBatch{0, 3, []int8{ackAccept, ackReject, ackGap, ackAccept}},
		draftBatch{4, 6, []int8{ackAccept}}))
	require.Zero(t, got.topError, codeName(got.topError))
	require.Zero(t, got.partError, "%s %v", codeName(got.partError), got.message)
	require.Zero(t, start(), "staged, not committed")
	epoch = endTxn(epoch, true)
	require.EqualValues(t, 7, start(), "the commit marker reached the share state partition")

	// Abort: the staged records are available again at once (the lock is
	// ten minutes).
	got = conn.stage(req(epoch, m.MemberEpoch, draftBatch{7, 9, []int8{ackAccept}}))
	require.Zero(t, got.partError, "%s %v", codeName(got.partError), got.message)
	endTxn(epoch, false)
	require.EqualValues(t, 7, start())
	again := m.Acquire(ctx)
	require.Equal(t, map[int64]int16{7: 2, 8: 2, 9: 2}, again, "aborted: delivered again")
}
