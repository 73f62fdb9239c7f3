package broker

// Fetch and ShareFetch answers carry stored record batches. Copying them
// into the encoded response costs a large allocation per answer (fresh
// pages, memclr, garbage) and two copies of every byte; CPU profiles of
// consuming workloads showed memmove at half of the broker's time. So the
// connection goroutine encodes the answer with a small marker where each
// partition's records go, finds the markers in the (small) encoding, and
// writes the pieces and the stored batches with one writev: record bytes
// are copied once, by the kernel. Stored batches are immutable, so reading
// them off the loop is safe.

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"net"
	"slices"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// splicedAnswer is a lazy answer whose record bytes can be spliced in.
type splicedAnswer interface {
	lazyAnswer
	// splice sets the records field of every partition with batches to
	// mark(i), i counting those partitions, and returns the response and
	// each partition's batches by i.
	splice(mark func(i int) []byte) (kmsg.Response, [][]*storedBatch)
}

// spliceMarkerLen is the length of a marker: 8 random bytes drawn once per
// process and 8 bytes of index. Nothing else in an answer without records
// (names, error messages, numbers) can hold the random part by chance in
// any realistic run; a marker that is not found where expected makes the
// answer fall back to copying.
const spliceMarkerLen = 16

var spliceNonce = func() [8]byte {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand panics on failure)
	return b
}()

func spliceMarker(i int) []byte {
	m := make([]byte, spliceMarkerLen)
	copy(m, spliceNonce[:])
	binary.BigEndian.PutUint64(m[8:], uint64(i))
	return m
}

// encodeSpliced encodes a spliced answer to hdr as the buffers of one
// frame. ok is false when the markers are not where the encoding should
// have put them; the caller then encodes the answer the plain way (prepare
// overwrites the markers).
func (c *Cluster) encodeSpliced(hdr requestHeader, ans splicedAnswer) (out net.Buffers, ok bool) {
	resp, fills := ans.splice(spliceMarker)
	enc := c.encodeResponse(hdr, resp)
	// Records are nullable bytes: an int32 length below flexible
	// versions, a uvarint of length+1 from them.
	flexible := resp.IsFlexible()
	lenField := func(n int) []byte {
		if flexible {
			return kbin.AppendUvarint(nil, uint32(n+1))
		}
		return kbin.AppendInt32(nil, int32(n))
	}
	markLen := lenField(spliceMarkerLen)
	type hole struct {
		at      int // index of the length field in enc
		batches []*storedBatch
	}
	holes := make([]hole, 0, len(fills))
	for i, batches := range fills {
		m := spliceMarker(i)
		at := bytes.Index(enc, m)
		if at < len(markLen) || !bytes.Equal(enc[at-len(markLen):at], markLen) || bytes.Contains(enc[at+1:], m) {
			return nil, false
		}
		holes = append(holes, hole{at: at - len(markLen), batches: batches})
	}
	slices.SortFunc(holes, func(a, b hole) int { return a.at - b.at })
	size := len(enc) - 4
	prev := 0
	for _, h := range holes {
		n := 0
		for _, b := range h.batches {
			n += len(b.raw)
		}
		field := lenField(n)
		out = append(out, enc[prev:h.at], field)
		for _, b := range h.batches {
			out = append(out, b.raw)
		}
		size += len(field) + n - len(markLen) - spliceMarkerLen
		prev = h.at + len(markLen) + spliceMarkerLen
	}
	out = append(out, enc[prev:])
	binary.BigEndian.PutUint32(enc, uint32(size))
	return out, true
}
