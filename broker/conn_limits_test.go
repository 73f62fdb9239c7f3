package broker

// Connections cost what their clients send, not what they claim: frames
// grow as bytes arrive, a stalled request or an idle connection is closed,
// and MaxConnections refuses connections past the limit.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// tricklingReader serves src a few bytes per Read, records the largest
// buffer it was asked to fill, and then fails with err.
type tricklingReader struct {
	src     []byte
	err     error
	largest int
}

func (r *tricklingReader) Read(p []byte) (int, error) {
	r.largest = max(r.largest, len(p))
	if len(r.src) == 0 {
		return 0, r.err
	}
	n := copy(p, r.src[:min(len(r.src), 1+rand.Intn(700))])
	r.src = r.src[n:]
	return n, nil
}

func TestDeclaredFrameSizeAllocatesNothingUntilBytesArrive(t *testing.T) {
	claim := binary.BigEndian.AppendUint32(nil, 100<<20)
	stalled := &tricklingReader{src: append(claim, "ten bytes."...), err: errors.New("stalled")}
	_, err := readFrame(stalled, 100<<20)
	require.ErrorContains(t, err, "stalled")
	require.LessOrEqual(t, stalled.largest, frameChunk, "a 100 MiB claim with ten bytes behind it must not allocate more than the first chunk")

	// A frame that does arrive, in pieces, arrives whole, and the buffer
	// never exceeds the frame.
	body := make([]byte, 300<<10)
	rand.New(rand.NewSource(1)).Read(body)
	whole := &tricklingReader{src: append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...), err: io.EOF}
	frame, err := readFrame(whole, 100<<20)
	require.NoError(t, err)
	require.True(t, bytes.Equal(body, frame))
	require.LessOrEqual(t, cap(frame), len(body))

	short := &tricklingReader{src: append(binary.BigEndian.AppendUint32(nil, 50), "abc"...), err: io.EOF}
	_, err = readFrame(short, 100<<20)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

// boundedReader fails the test if a Read asks for more than the bytes it
// has already served (or frameChunk, at first): a frame's buffers must
// follow what arrived.
type boundedReader struct {
	t      *testing.T
	src    []byte
	served int
}

func (r *boundedReader) Read(p []byte) (int, error) {
	if len(p) > max(frameChunk, r.served) {
		r.t.Errorf("asked for %d bytes after %d arrived", len(p), r.served)
	}
	if len(r.src) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.src[:min(len(r.src), 1+rand.Intn(9000))])
	r.src, r.served = r.src[n:], r.served+n
	return n, nil
}

func TestFramePiecesFollowWhatArrived(t *testing.T) {
	for _, n := range []int{0, 1, frameChunk, frameChunk + 1, 3*maxFrameChunk + 17, 1 << 20} {
		body := make([]byte, n)
		rand.New(rand.NewSource(int64(n))).Read(body)
		r := &boundedReader{t: t, src: append(binary.BigEndian.AppendUint32(nil, uint32(n)), body...)}
		frame, err := readFrame(r, 100<<20)
		require.NoError(t, err)
		require.True(t, bytes.Equal(body, frame), "a %d-byte frame", n)
		require.Equal(t, n, cap(frame), "the frame's buffer is exactly its size")
	}
}

func TestStalledRequestIsClosedByTheReadTimeout(t *testing.T) {
	c := newTestCluster(t, ReadTimeout(100*time.Millisecond))
	claimed := dialRaw(t, c)
	claimed.send(binary.BigEndian.AppendUint32(nil, 100<<20))
	claimed.requireClosed()

	// A client trickling a small request slower than the timeout allows
	// is cut off too.
	slow := dialRaw(t, c)
	frame := requestFrame(metadataRequest(), 1)
	go func() {
		for _, b := range frame {
			if _, err := slow.conn.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(30 * time.Millisecond)
		}
	}()
	slow.requireClosed()

	// A prompt client is unaffected.
	ok := dialRaw(t, c)
	require.Len(t, ok.roundTrip(metadataRequest(), 2).(*kmsg.MetadataResponse).Brokers, 1)
}

func TestIdleConnectionIsClosedButALongPollIsNotIdle(t *testing.T) {
	c := newTestCluster(t, ConnectionsMaxIdle(150*time.Millisecond))
	createTopic(t, c, "idle", 1)
	polling := dialRaw(t, c)
	// The poll waits longer than the idle timeout: a connection waiting for
	// its answer is not idle.
	resp := polling.roundTrip(fetchReq("idle", 1<<20, 1, 400, fetchPart(0, 0, 1<<20)), 1).(*kmsg.FetchResponse)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
	// Then it sends nothing, and is closed.
	polling.requireClosed()
}

func TestMaxConnectionsRefusesConnectionsPastTheLimit(t *testing.T) {
	c := newTestCluster(t, MaxConnections(2))
	a, b := dialRaw(t, c), dialRaw(t, c)
	a.roundTrip(metadataRequest(), 1)
	b.roundTrip(metadataRequest(), 1)
	extra := dialRaw(t, c)
	extra.requireClosed()

	a.conn.Close()
	require.Eventually(t, func() bool {
		c.connsMu.Lock()
		defer c.connsMu.Unlock()
		return len(c.conns) == 1
	}, 10*time.Second, time.Millisecond)
	again := dialRaw(t, c)
	require.Len(t, again.roundTrip(metadataRequest(), 2).(*kmsg.MetadataResponse).Brokers, 1)
	c.connsMu.Lock()
	refused := c.connsRefused
	c.connsMu.Unlock()
	require.Equal(t, 1, refused)
}

// TestDecodedRequestsDoNotShareTheirConnectionsBuffer: decoded requests
// alias their frame (the assignments of a leader's SyncGroup stay in the
// group for members that sync later), so a connection must never read its
// next frame into the same buffer.
func TestDecodedRequestsDoNotShareTheirConnectionsBuffer(t *testing.T) {
	c := newTestCluster(t)
	const group = "g-alias"
	node := groupCoordinatorNode(t, c, group)
	leaderConn, followerConn := dialNode(t, c, node), dialNode(t, c, node)
	join := func(rc *rawConn, memberID string, corr int32) *kmsg.JoinGroupResponse {
		req := groupJoinReq(5, group, memberID, groupTestSession, groupTestRebalance)
		resp := rc.roundTrip(req, corr).(*kmsg.JoinGroupResponse)
		if kerr.ErrorForCode(resp.ErrorCode) == kerr.MemberIDRequired {
			return rc.roundTrip(groupJoinReq(5, group, resp.MemberID, groupTestSession, groupTestRebalance), corr+1).(*kmsg.JoinGroupResponse)
		}
		return resp
	}
	leader := join(leaderConn, "", 1)
	require.NoError(t, kerr.ErrorForCode(leader.ErrorCode))
	alone := groupSyncReq(group, leader.MemberID, leader.Generation, map[string]string{leader.MemberID: "all"})
	require.NoError(t, kerr.ErrorForCode(leaderConn.roundTrip(alone, 3).(*kmsg.SyncGroupResponse).ErrorCode))
	// The follower's join waits for the leader to rejoin, in whichever
	// order the two arrive.
	first := followerConn.roundTrip(groupJoinReq(5, group, "", groupTestSession, groupTestRebalance), 1).(*kmsg.JoinGroupResponse)
	followerConn.send(requestFrame(groupJoinReq(5, group, first.MemberID, groupTestSession, groupTestRebalance), 2))
	rejoined := join(leaderConn, leader.MemberID, 4)
	require.NoError(t, kerr.ErrorForCode(rejoined.ErrorCode))
	_, body, err := followerConn.read()
	require.NoError(t, err)
	follower := kmsg.NewPtrJoinGroupResponse()
	follower.Version = 5
	require.NoError(t, follower.ReadFrom(body))

	assignment := bytes.Repeat([]byte("follower-assignment-"), 20)
	sync := groupSyncReq(group, rejoined.MemberID, rejoined.Generation, map[string]string{
		rejoined.MemberID: "leader", follower.MemberID: string(assignment),
	})
	require.NoError(t, kerr.ErrorForCode(leaderConn.roundTrip(sync, 5).(*kmsg.SyncGroupResponse).ErrorCode))
	// The leader's next request, of the same size, on the same connection.
	leaderConn.roundTrip(groupSyncReq(group, rejoined.MemberID, rejoined.Generation, map[string]string{
		rejoined.MemberID: "leader", follower.MemberID: string(bytes.Repeat([]byte("X"), len(assignment))),
	}), 6)
	got := followerConn.roundTrip(groupSyncReq(group, follower.MemberID, follower.Generation, nil), 3).(*kmsg.SyncGroupResponse)
	require.NoError(t, kerr.ErrorForCode(got.ErrorCode))
	require.Equal(t, string(assignment), string(got.MemberAssignment))
}
