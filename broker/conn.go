package broker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// request is one decoded request on its way to the run loop.
type request struct {
	node     *node
	cc       *clientConn // nil for requests one node sends another
	kreq     kmsg.Request
	clientID string
	reply    chan kmsg.Response // buffered; nil for internal requests
}

// respond delivers a deferred response; handlers that returned nil call it
// later, from the loop.
func (r *request) respond(resp kmsg.Response) {
	if r.reply != nil {
		r.reply <- resp
	}
}

// clientConn is one accepted connection. Kafka answers a connection's
// requests in order, one at a time, and so does this broker: the connection
// goroutine reads a request, waits for its answer, writes it, and only then
// reads the next. Between requests a connection holds no buffer: a frame's
// buffer is allocated as its bytes arrive and dropped once it is answered
// (decoded requests may alias it, so it is never reused; produced batches
// are stored in it, without a copy).
type clientConn struct {
	conn net.Conn
	node *node
	// shareSessions is set by the loop once a share session was opened on
	// the connection: its close must then reach the loop, which releases
	// that session's records (share_session.go). Other closes cost the
	// loop nothing.
	shareSessions atomic.Bool
}

func (c *Cluster) accept(n *node) {
	defer c.wg.Done()
	for {
		conn, err := n.ln.Accept()
		if err != nil {
			select {
			case <-c.dying:
			default:
				c.logger.Error("accept failed; node stops listening", "node", n.id, "err", err)
			}
			return
		}
		cc := &clientConn{conn: conn, node: n}
		c.connsMu.Lock()
		select {
		case <-c.dying:
			c.connsMu.Unlock()
			conn.Close()
			return
		default:
		}
		if max := c.cfg.maxConnections; max > 0 && len(c.conns) >= max {
			c.connsRefused++
			logIt := time.Since(c.lastRefusalLog) >= time.Second
			if logIt {
				c.lastRefusalLog = time.Now()
			}
			refused := c.connsRefused
			c.connsMu.Unlock()
			conn.Close()
			if logIt {
				c.logger.Warn("connection refused: MaxConnections reached", "node", n.id,
					"remote", conn.RemoteAddr().String(), "max_connections", max, "refused_so_far", refused)
			}
			continue
		}
		c.conns[cc] = struct{}{}
		c.wg.Add(1)
		c.connsMu.Unlock()
		go c.serve(cc)
	}
}

func (c *Cluster) serve(cc *clientConn) {
	defer c.wg.Done()
	defer func() {
		cc.conn.Close()
		c.connsMu.Lock()
		delete(c.conns, cc)
		c.connsMu.Unlock()
		if cc.shareSessions.Load() {
			c.shareConnClosed(cc)
		}
	}()
	for {
		frame, err := c.readRequest(cc.conn)
		if err != nil {
			c.logClose(cc, err)
			return
		}
		out, keep, err := c.handleFrame(cc, frame)
		if err != nil {
			c.logger.Warn("closing connection", "node", cc.node.id, "remote", cc.conn.RemoteAddr().String(), "err", err)
			return
		}
		if !keep {
			return
		}
		if out == nil {
			continue // acks=0 produce: no response
		}
		// A client that stops reading its answers is cut off like one that
		// stops sending.
		if err := cc.conn.SetWriteDeadline(time.Now().Add(c.cfg.readTimeout)); err != nil {
			return
		}
		if _, err := out.WriteTo(cc.conn); err != nil {
			return
		}
	}
}

// shareConnClosed tells the loop that a connection on which share sessions
// were opened has closed, whoever closed it (the client, an idle timeout,
// a fault), and waits until the loop takes it, unless the cluster stops
// first. It runs on the connection's goroutine, as its last act.
func (c *Cluster) shareConnClosed(cc *clientConn) {
	select {
	case c.adminCh <- func() { c.coordinators.share.connectionClosed(cc, time.Now()) }:
	case <-c.dying:
	}
}

// The reasons a connection is closed.
var (
	errFrameTooLarge = errors.New("frame larger than the maximum")
	errMalformed     = errors.New("malformed request")
	errIdle          = errors.New("connection idle longer than ConnectionsMaxIdle")
	errSlowRequest   = errors.New("request not received within ReadTimeout")
)

// logClose logs why a connection ends; a client hanging up is not news.
func (c *Cluster) logClose(cc *clientConn, err error) {
	log := c.logger.With("node", cc.node.id, "remote", cc.conn.RemoteAddr().String())
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
	case errors.Is(err, errIdle):
		log.Info("closing idle connection", "idle_timeout", c.cfg.connectionsMaxIdle)
	default:
		log.Warn("closing connection", "err", err)
	}
}

// readRequest reads one frame from conn. The first byte may take up to
// ConnectionsMaxIdle to come; from then on the whole frame must arrive
// within ReadTimeout.
func (c *Cluster) readRequest(conn net.Conn) ([]byte, error) {
	var size [4]byte
	if err := conn.SetReadDeadline(time.Now().Add(c.cfg.connectionsMaxIdle)); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(conn, size[:1]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, errIdle
		}
		return nil, err
	}
	if err := conn.SetReadDeadline(time.Now().Add(c.cfg.readTimeout)); err != nil {
		return nil, err
	}
	frame, err := readFrame(io.MultiReader(bytes.NewReader(size[:1]), conn), c.cfg.maxFrame)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, fmt.Errorf("%w (%v): %w", errSlowRequest, c.cfg.readTimeout, err)
	}
	return frame, err
}

// frameChunk is the first piece a frame is read into.
const frameChunk = 4 << 10

// maxFrameChunk is the largest piece.
const maxFrameChunk = 64 << 10

// frameChunks pools the pieces frames are read into, by size: 4, 8, 16,
// 32 and 64 KiB.
var frameChunks [5]sync.Pool

func getFrameChunk(class int) *[]byte {
	if p, ok := frameChunks[class].Get().(*[]byte); ok {
		return p
	}
	b := make([]byte, frameChunk<<class)
	return &b
}

// readFrame reads a size-prefixed frame. A frame larger than frameChunk is
// read in pooled pieces as its bytes arrive, each no larger than what has
// arrived before it (4 KiB first, doubling up to 64 KiB), and copied into
// one buffer of exactly the frame's size once complete. So a declared size
// costs nothing until the bytes are there (memory follows what the client
// sent, at most twice over, never what it claimed), and every byte is
// copied once into memory allocated once: growing one buffer by doubling
// copied and allocated the frame about twice, which showed in produce
// profiles (memmove, memclr, fresh pages).
func readFrame(rd io.Reader, max int32) ([]byte, error) {
	var sizeBuf [4]byte
	if _, err := io.ReadFull(rd, sizeBuf[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
	if size < 0 || size > max {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", errFrameTooLarge, size, max)
	}
	short := func(got int, err error) error {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("reading %d-byte frame after %d bytes: %w", size, got, err)
	}
	if size <= frameChunk {
		buf := make([]byte, size)
		if n, err := io.ReadFull(rd, buf); err != nil {
			return nil, short(n, err)
		}
		return buf, nil
	}
	type piece struct {
		class int
		buf   *[]byte
		n     int
	}
	var pieces []piece
	defer func() {
		for _, p := range pieces {
			frameChunks[p.class].Put(p.buf)
		}
	}()
	got := 0
	for got < int(size) {
		class := 0
		for class < len(frameChunks)-1 && frameChunk<<(class+1) <= got {
			class++
		}
		buf := getFrameChunk(class)
		want := min(len(*buf), int(size)-got)
		n, err := io.ReadFull(rd, (*buf)[:want])
		pieces = append(pieces, piece{class, buf, n})
		got += n
		if err != nil {
			return nil, short(got, err)
		}
	}
	frame := make([]byte, 0, size)
	for _, p := range pieces {
		frame = append(frame, (*p.buf)[:p.n]...)
	}
	return frame, nil
}

// requestHeader is the decoded request header.
type requestHeader struct {
	key      int16
	version  int16
	corr     int32
	clientID string
}

// handleFrame decodes one frame, has the loop answer it and returns the
// encoded response (nil for none), in pieces for one writev (splice.go). keep is false when the cluster is
// stopping or an injected fault (faults.go) drops the connection. A
// malformed frame returns an error: the caller closes the connection, and
// nothing else changes.
func (c *Cluster) handleFrame(cc *clientConn, frame []byte) (out net.Buffers, keep bool, err error) {
	if len(frame) < 8 {
		return nil, false, fmt.Errorf("%w: %d-byte frame has no header", errMalformed, len(frame))
	}
	hdr := requestHeader{
		key:     int16(binary.BigEndian.Uint16(frame[0:])),
		version: int16(binary.BigEndian.Uint16(frame[2:])),
		corr:    int32(binary.BigEndian.Uint32(frame[4:])),
	}
	api, known := c.api(cc.node, hdr.key)
	if !known || hdr.version < api.min || hdr.version > api.max {
		if hdr.key == 18 { // ApiVersions: the protocol's answer is a v0 response listing what is supported
			return net.Buffers{c.encodeResponse(hdr, c.unsupportedApiVersions(cc.node))}, true, nil
		}
		c.logger.Warn("unsupported request", "node", cc.node.id, "key", hdr.key, "version", hdr.version)
		return net.Buffers{unsupportedVersionFrame(hdr.corr)}, true, nil
	}
	kreq := wire.RequestForKey(hdr.key)
	kreq.SetVersion(hdr.version)
	r := kbin.Reader{Src: frame[8:]}
	if id := r.NullableString(); id != nil {
		hdr.clientID = *id
	}
	if kreq.IsFlexible() {
		skipTags(&r)
	}
	if !r.Ok() {
		return nil, false, fmt.Errorf("%w: %s v%d: truncated header", errMalformed, wire.NameForKey(hdr.key), hdr.version)
	}
	if err := kreq.ReadFrom(r.Src); err != nil {
		return nil, false, fmt.Errorf("%w: %s v%d: %v", errMalformed, wire.NameForKey(hdr.key), hdr.version, err)
	}
	fault := c.faultFor(cc.node.id, hdr.clientID, kreq)
	if fault.Fault == DropRequest {
		return nil, false, nil
	}
	req := &request{node: cc.node, cc: cc, kreq: kreq, clientID: hdr.clientID, reply: make(chan kmsg.Response, 1)}
	select {
	case c.reqCh <- req:
	case <-c.dying:
		return nil, false, nil
	}
	var resp kmsg.Response
	select {
	case resp = <-req.reply:
	case <-c.dying:
		return nil, false, nil
	}
	if lazy, ok := resp.(lazyAnswer); ok {
		// Record bytes are written from the stored batches, unless a
		// fault hook wants to see (or drop) the plain response.
		if sp, ok := lazy.(splicedAnswer); ok && fault.AfterHandling == nil && fault.Fault != DropAnswer {
			if out, ok := c.encodeSpliced(hdr, sp); ok {
				return out, true, nil
			}
		}
		resp = lazy.prepare() // copy record bytes here, off the loop
	}
	if fault.afterHandling(resp) {
		return nil, false, nil
	}
	if resp == nil {
		return nil, true, nil
	}
	if pr, ok := kreq.(*kmsg.ProduceRequest); ok && pr.Acks == 0 {
		return nil, true, nil // acks=0: Kafka sends no response
	}
	return net.Buffers{c.encodeResponse(hdr, resp)}, true, nil
}

// lazyAnswer is an answer whose bulk (record bytes) the loop leaves to the
// connection's goroutine: prepare fills it in and returns the response to
// encode.
type lazyAnswer interface {
	prepare() kmsg.Response
}

func skipTags(r *kbin.Reader) {
	n := r.Uvarint()
	for i := uint32(0); i < n && r.Ok(); i++ {
		r.Uvarint()
		r.Span(int(r.Uvarint()))
	}
}

// encodeResponse frames a response: size, correlation id, the tag section of
// a flexible response header (never for ApiVersions), body.
func (c *Cluster) encodeResponse(hdr requestHeader, resp kmsg.Response) []byte {
	resp.SetVersion(hdr.version)
	if av, ok := resp.(*kmsg.ApiVersionsResponse); ok && av.ErrorCode == kerr.UnsupportedVersion.Code {
		resp.SetVersion(0)
	}
	out := make([]byte, 8, 64)
	binary.BigEndian.PutUint32(out[4:], uint32(hdr.corr))
	if resp.IsFlexible() && hdr.key != 18 {
		out = append(out, 0)
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

// unsupportedVersionFrame answers a request of an unknown key or version:
// the correlation id and the UNSUPPORTED_VERSION code, which every response
// that starts with an error code decodes as that error. The connection stays
// usable because frames are length-delimited.
func unsupportedVersionFrame(corr int32) []byte {
	out := make([]byte, 10)
	binary.BigEndian.PutUint32(out, 6)
	binary.BigEndian.PutUint32(out[4:], uint32(corr))
	binary.BigEndian.PutUint16(out[8:], uint16(kerr.UnsupportedVersion.Code))
	return out
}
