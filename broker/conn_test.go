package broker

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// rawConn is a bare TCP connection to a node, for sending frames that no
// client library would.
type rawConn struct {
	t    testing.TB
	conn net.Conn
}

func dialRaw(t testing.TB, c *Cluster) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", c.Bootstrap()[0], 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
	return &rawConn{t: t, conn: conn}
}

// requestFrame encodes a request with a v1 or v2 header (by flexibility).
func requestFrame(req kmsg.Request, corr int32) []byte {
	body := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	body = binary.BigEndian.AppendUint16(body, uint16(req.GetVersion()))
	body = binary.BigEndian.AppendUint32(body, uint32(corr))
	body = binary.BigEndian.AppendUint16(body, 4)
	body = append(body, "test"...)
	if req.IsFlexible() {
		body = append(body, 0)
	}
	body = req.AppendTo(body)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func (rc *rawConn) send(frame []byte) {
	_, err := rc.conn.Write(frame)
	require.NoError(rc.t, err)
}

// read returns the correlation id and the body after it.
func (rc *rawConn) read() (int32, []byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(rc.conn, size[:]); err != nil {
		return 0, nil, err
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(rc.conn, buf); err != nil {
		return 0, nil, err
	}
	return int32(binary.BigEndian.Uint32(buf)), buf[4:], nil
}

// roundTrip sends a request and decodes its response.
func (rc *rawConn) roundTrip(req kmsg.Request, corr int32) kmsg.Response {
	rc.send(requestFrame(req, corr))
	gotCorr, body, err := rc.read()
	require.NoError(rc.t, err)
	require.Equal(rc.t, corr, gotCorr)
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != 18 {
		body = body[1:]
	}
	require.NoError(rc.t, resp.ReadFrom(body))
	return resp
}

// requireClosed asserts the broker closed the connection.
func (rc *rawConn) requireClosed() {
	_, _, err := rc.read()
	require.Error(rc.t, err)
}

func metadataRequest() kmsg.Request {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	return req
}

func TestOversizedFrameClosesOnlyThatConnection(t *testing.T) {
	c := newTestCluster(t, MaxFrameBytes(4096))
	bad := dialRaw(t, c)
	good := dialRaw(t, c)
	bad.send(binary.BigEndian.AppendUint32(nil, 4097))
	bad.requireClosed()
	resp := good.roundTrip(metadataRequest(), 7).(*kmsg.MetadataResponse)
	require.Len(t, resp.Brokers, 1)
}

func TestNegativeFrameSizeClosesConnection(t *testing.T) {
	c := newTestCluster(t)
	rc := dialRaw(t, c)
	rc.send([]byte{0xff, 0xff, 0xff, 0xf0})
	rc.requireClosed()
}

func TestMalformedBodyClosesConnectionAndChangesNothing(t *testing.T) {
	c := newTestCluster(t)
	rc := dialRaw(t, c)
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	topic := kmsg.NewCreateTopicsRequestTopic()
	topic.Topic, topic.NumPartitions, topic.ReplicationFactor = "never-created", 3, 1
	req.Topics = append(req.Topics, topic)
	frame := requestFrame(req, 1)
	truncated := frame[:len(frame)-5]
	binary.BigEndian.PutUint32(truncated, uint32(len(truncated)-4))
	rc.send(truncated)
	rc.requireClosed()

	var exists bool
	require.NoError(t, c.do(func() { exists = c.topics["never-created"] != nil }))
	require.False(t, exists, "a malformed request must change nothing")
}

func TestUnknownKeyGetsUnsupportedVersionAndConnectionStaysUsable(t *testing.T) {
	c := newTestCluster(t)
	rc := dialRaw(t, c)
	frame := requestFrame(metadataRequest(), 3)
	binary.BigEndian.PutUint16(frame[4:], 9999) // key
	rc.send(frame)
	corr, body, err := rc.read()
	require.NoError(t, err)
	require.Equal(t, int32(3), corr)
	require.Equal(t, kerr.UnsupportedVersion.Code, int16(binary.BigEndian.Uint16(body)))

	resp := rc.roundTrip(metadataRequest(), 4).(*kmsg.MetadataResponse)
	require.Len(t, resp.Brokers, 1)
}

func TestUnsupportedVersionOfKnownKey(t *testing.T) {
	c := newTestCluster(t)
	rc := dialRaw(t, c)
	frame := requestFrame(metadataRequest(), 5)
	binary.BigEndian.PutUint16(frame[6:], 99) // version
	rc.send(frame)
	_, body, err := rc.read()
	require.NoError(t, err)
	require.Equal(t, kerr.UnsupportedVersion.Code, int16(binary.BigEndian.Uint16(body)))
}

func TestApiVersionsUnsupportedVersionAnswersV0WithTheList(t *testing.T) {
	c := newTestCluster(t)
	rc := dialRaw(t, c)
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 4
	frame := requestFrame(req, 9)
	binary.BigEndian.PutUint16(frame[6:], 77)
	rc.send(frame)
	corr, body, err := rc.read()
	require.NoError(t, err)
	require.Equal(t, int32(9), corr)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	require.NoError(t, resp.ReadFrom(body))
	require.Equal(t, kerr.UnsupportedVersion.Code, resp.ErrorCode)
	require.NotEmpty(t, resp.ApiKeys)
}

func TestApiVersionsAdvertisesShareTxnAPIsOnlyWhenEnabled(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		c := newTestCluster(t, ShareTxnAPIs(enabled))
		rc := dialRaw(t, c)
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = 4
		resp := rc.roundTrip(req, 1).(*kmsg.ApiVersionsResponse)
		keys := map[int16]bool{}
		for _, k := range resp.ApiKeys {
			keys[k.ApiKey] = true
		}
		require.Equal(t, enabled, keys[wire.TxnShareAcknowledgeKey], "TxnShareAcknowledge advertised")
		require.False(t, keys[96], "key 96 (kshare's former AddShareAcksToTxn) is never advertised: upstream may assign it")
		levels := map[string]int16{}
		for _, f := range resp.FinalizedFeatures {
			levels[f.Name] = f.MaxVersionLevel
		}
		require.Equal(t, int16(2), levels[wire.TransactionVersionFeature])
		if enabled {
			require.Equal(t, int16(wire.MinShareVersionForTxnAcks), levels[wire.ShareVersionFeature])
		} else {
			require.Less(t, levels[wire.ShareVersionFeature], int16(wire.MinShareVersionForTxnAcks))
		}
	}
}

// FuzzFrames feeds arbitrary frames to the decoder and the handlers: no
// panic, no hang, and the cluster keeps answering.
func FuzzFrames(f *testing.F) {
	seeds := []kmsg.Request{metadataRequest()}
	for key := int16(0); key <= 100; key++ {
		req := wire.RequestForKey(key)
		if req == nil {
			continue
		}
		if spec, ok := apis[key]; ok {
			req.SetVersion(spec.max)
			seeds = append(seeds, req)
		}
	}
	for i, req := range seeds {
		f.Add(requestFrame(req, int32(i))[4:])
	}
	f.Add([]byte{0, 0, 0, 0})
	f.Add(bytes.Repeat([]byte{0xff}, 64))

	// A fresh cluster every few hundred inputs: fuzzed CreateTopics and
	// auto-creating Metadata requests pile up topics, and a cluster that
	// holds thousands of them answers every later input slowly.
	const inputsPerCluster = 500
	var (
		c      *Cluster
		cc     *clientConn
		inputs int
	)
	reset := func(t testing.TB) {
		if c != nil {
			c.Close()
		}
		var err error
		c, err = NewCluster(Nodes(2))
		require.NoError(t, err)
		require.NoError(t, c.do(func() {
			c.cfg.maxFetchWait = 0
			c.createTopic("fuzz", 2, nil, false)
		}))
		server, _ := net.Pipe()
		cc = &clientConn{conn: server, node: c.nodes[0]}
	}
	reset(f)
	defer func() { c.Close() }()

	f.Fuzz(func(t *testing.T, frame []byte) {
		if inputs++; inputs%inputsPerCluster == 0 {
			reset(t)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _, _ = c.handleFrame(cc, frame)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("frame % x hung", frame)
		}
		panics := make(chan int, 1)
		go func() { _ = c.do(func() { panics <- c.handlerPanics }) }()
		select {
		case n := <-panics:
			require.Zero(t, n, "a handler panicked; see the log")
		case <-time.After(10 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("the run loop is stuck after frame % x:\n%s", frame, buf[:runtime.Stack(buf, true)])
		}
	})
}
