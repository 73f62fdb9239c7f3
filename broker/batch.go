package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
)

// A v2 record batch header, as laid out on the wire.
const (
	batchHeaderLen   = 61
	offBaseOffset    = 0
	offBatchLength   = 8
	offLeaderEpoch   = 12
	offMagic         = 16
	offCRC           = 17
	offAttributes    = 21
	offLastDelta     = 23
	offFirstTs       = 27
	offMaxTs         = 35
	offProducerID    = 43
	offProducerEpoch = 51
	offBaseSequence  = 53
	offNumRecords    = 57

	attrTransactional = 1 << 4
	attrControl       = 1 << 5
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// batchInfo is what the broker needs from a batch header.
type batchInfo struct {
	raw         []byte
	lastDelta   int32
	numRecords  int32
	pid         int64
	epoch       int16
	firstSeq    int32
	maxTs       int64
	txn         bool
	control     bool
	compression int16
}

func (b *batchInfo) lastSeq() int32 {
	if b.firstSeq < 0 {
		return -1
	}
	return int32((int64(b.firstSeq) + int64(b.lastDelta)) % (1 << 31))
}

// errBatch carries the Kafka error a malformed batch is answered with.
type errBatch struct {
	code *kerr.Error
	msg  string
}

func (e *errBatch) Error() string { return e.msg }
func (e *errBatch) Unwrap() error { return e.code }

func badBatch(code *kerr.Error, format string, args ...any) error {
	return &errBatch{code: code, msg: fmt.Sprintf(format, args...)}
}

// splitBatches validates the records of one produced partition the way
// Kafka does: the set must hold exactly one complete v2 batch (a partial
// batch at the end is not counted, as Kafka's reader stops there), no
// larger than maxBatch bytes (MESSAGE_TOO_LARGE, checked before the CRC as
// Kafka checks it), with a valid CRC, at least one record, a codec the produce version allows, no
// control flag, a producer id when transactional, and a non-negative
// sequence when it has a producer id. The returned slices alias records.
func splitBatches(records []byte, produceVersion int16, maxBatch int) ([]batchInfo, error) {
	var raws [][]byte
	for rest := records; len(rest) >= offMagic+1; {
		length := int32(binary.BigEndian.Uint32(rest[offBatchLength:]))
		if length < 14 {
			return nil, badBatch(kerr.CorruptMessage, "record size %d is below the smallest record overhead", length)
		}
		if int64(length)+12 > int64(len(rest)) {
			break
		}
		raw := rest[:length+12]
		rest = rest[length+12:]
		if magic := int8(raw[offMagic]); magic != 2 {
			return nil, badBatch(kerr.InvalidRecord, "produce v%d allows only record batches of magic 2, not %d", produceVersion, magic)
		}
		raws = append(raws, raw)
	}
	switch len(raws) {
	case 0:
		return nil, badBatch(kerr.InvalidRecord, "produce v%d needs one record batch per partition; none is complete", produceVersion)
	case 1:
	default:
		return nil, badBatch(kerr.InvalidRecord, "produce v%d allows exactly one record batch per partition, not %d", produceVersion, len(raws))
	}
	raw := raws[0]
	if len(raw) > maxBatch {
		return nil, badBatch(kerr.MessageTooLarge, "the record batch size is %d bytes, which exceeds the maximum configured value of %d", len(raw), maxBatch)
	}
	if len(raw) < batchHeaderLen {
		return nil, badBatch(kerr.CorruptMessage, "record batch of %d bytes is shorter than its header", len(raw))
	}
	if crc := binary.BigEndian.Uint32(raw[offCRC:]); crc != crc32.Checksum(raw[offAttributes:], crc32c) {
		return nil, badBatch(kerr.CorruptMessage, "record batch CRC mismatch")
	}
	attrs := int16(binary.BigEndian.Uint16(raw[offAttributes:]))
	b := batchInfo{
		raw:         raw,
		lastDelta:   int32(binary.BigEndian.Uint32(raw[offLastDelta:])),
		numRecords:  int32(binary.BigEndian.Uint32(raw[offNumRecords:])),
		pid:         int64(binary.BigEndian.Uint64(raw[offProducerID:])),
		epoch:       int16(binary.BigEndian.Uint16(raw[offProducerEpoch:])),
		firstSeq:    int32(binary.BigEndian.Uint32(raw[offBaseSequence:])),
		maxTs:       int64(binary.BigEndian.Uint64(raw[offMaxTs:])),
		txn:         attrs&attrTransactional != 0,
		control:     attrs&attrControl != 0,
		compression: attrs & 0x7,
	}
	switch {
	case b.numRecords < 1:
		return nil, badBatch(kerr.InvalidRecord, "record batch has no records")
	case b.lastDelta != b.numRecords-1:
		return nil, badBatch(kerr.CorruptMessage, "batch of %d records has last offset delta %d", b.numRecords, b.lastDelta)
	case b.control:
		return nil, badBatch(kerr.InvalidRecord, "clients may not produce control batches")
	case b.compression > 4:
		return nil, badBatch(kerr.UnsupportedCompressionType, "compression codec %d", b.compression)
	case b.compression == 4 && produceVersion < 7:
		return nil, badBatch(kerr.UnsupportedCompressionType, "zstd needs produce v7 or later, not v%d", produceVersion)
	case b.txn && b.pid < 0:
		return nil, badBatch(kerr.InvalidRecord, "transactional batch without a producer id")
	case b.pid >= 0 && b.firstSeq < 0:
		return nil, badBatch(kerr.InvalidRecord, "invalid sequence number %d in a batch of producer id %d", b.firstSeq, b.pid)
	}
	if b.compression == 0 {
		if n, ok := countRecords(raw[batchHeaderLen:], b.numRecords); !ok || n != b.numRecords {
			return nil, badBatch(kerr.InvalidRecord, "the record batch says it holds %d records but its bytes frame %d", b.numRecords, n)
		}
	}
	return []batchInfo{b}, nil
}

// countRecords counts the length-prefixed records of an uncompressed
// batch's body, stopping past limit. ok is false when the body is not a
// whole number of records. The header's record count moves the log's end
// offset, so a count the bytes do not back (one record claiming 2^31-1)
// would make offsets without records; Kafka's log validator refuses it
// with INVALID_RECORD, as this does.
func countRecords(body []byte, limit int32) (int32, bool) {
	var n int32
	for len(body) > 0 {
		if n > limit {
			return n, true
		}
		length, used := binary.Varint(body)
		if used <= 0 || length < 0 || length > int64(len(body)-used) {
			return n, false
		}
		body = body[used+int(length):]
		n++
	}
	return n, true
}

// firstBatchTransactional reports whether the first batch of a produced
// record set has the transactional flag; Kafka decides from it whether a
// produce request needs a transactional id.
func firstBatchTransactional(records []byte) bool {
	if len(records) < offAttributes+2 || int8(records[offMagic]) != 2 {
		return false
	}
	return int16(binary.BigEndian.Uint16(records[offAttributes:]))&attrTransactional != 0
}

// kv is one record the broker writes itself (coordinator state, markers,
// dead-letter records); headers are only written by buildBatch, each one
// a key and a value.
type kv struct {
	key, value []byte
	headers    []kv
}

// buildBatch encodes uncompressed records as a v2 batch at base offset 0.
func buildBatch(recs []kv, pid int64, epoch int16, firstSeq int32, txn, control bool, now time.Time) []byte {
	ts := now.UnixMilli()
	out := make([]byte, batchHeaderLen, batchHeaderLen+64*len(recs))
	var attrs int16
	if txn {
		attrs |= attrTransactional
	}
	if control {
		attrs |= attrControl
	}
	binary.BigEndian.PutUint32(out[offLeaderEpoch:], uint32(0xffffffff))
	out[offMagic] = 2
	binary.BigEndian.PutUint16(out[offAttributes:], uint16(attrs))
	binary.BigEndian.PutUint32(out[offLastDelta:], uint32(len(recs)-1))
	binary.BigEndian.PutUint64(out[offFirstTs:], uint64(ts))
	binary.BigEndian.PutUint64(out[offMaxTs:], uint64(ts))
	binary.BigEndian.PutUint64(out[offProducerID:], uint64(pid))
	binary.BigEndian.PutUint16(out[offProducerEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(out[offBaseSequence:], uint32(firstSeq))
	binary.BigEndian.PutUint32(out[offNumRecords:], uint32(len(recs)))
	var rec []byte
	for i, r := range recs {
		rec = rec[:0]
		rec = append(rec, 0)                   // attributes
		rec = kbin.AppendVarlong(rec, 0)       // timestamp delta
		rec = kbin.AppendVarint(rec, int32(i)) // offset delta
		rec = appendVarintBytes(rec, r.key)
		rec = appendVarintBytes(rec, r.value)
		rec = kbin.AppendVarint(rec, int32(len(r.headers)))
		for _, h := range r.headers {
			rec = appendVarintBytes(rec, h.key)
			rec = appendVarintBytes(rec, h.value)
		}
		out = kbin.AppendVarint(out, int32(len(rec)))
		out = append(out, rec...)
	}
	binary.BigEndian.PutUint32(out[offBatchLength:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[offCRC:], crc32.Checksum(out[offAttributes:], crc32c))
	return out
}

// recordsSize bounds the size of the batch buildBatch makes of recs: its
// header, and per record the key, the value and at most 5 bytes for each
// of its six varints and its attributes.
func recordsSize(recs []kv) int64 {
	n := int64(batchHeaderLen)
	for _, r := range recs {
		n += int64(len(r.key)+len(r.value)) + 31
		for _, h := range r.headers {
			n += int64(len(h.key)+len(h.value)) + 10
		}
	}
	return n
}

func appendVarintBytes(dst, b []byte) []byte {
	if b == nil {
		return kbin.AppendVarint(dst, -1)
	}
	dst = kbin.AppendVarint(dst, int32(len(b)))
	return append(dst, b...)
}

// errCompressedInternal is returned when a broker-written batch cannot be
// read back; the broker never compresses its own batches.
var errCompressedInternal = errors.New("broker: compressed internal batch")

// decodeRecords returns the key and value of every record of an
// uncompressed batch the broker wrote itself.
func decodeRecords(raw []byte) ([]kv, error) {
	if int16(binary.BigEndian.Uint16(raw[offAttributes:]))&0x7 != 0 {
		return nil, errCompressedInternal
	}
	n := int32(binary.BigEndian.Uint32(raw[offNumRecords:]))
	r := kbin.Reader{Src: raw[batchHeaderLen:]}
	out := make([]kv, 0, n)
	for i := int32(0); i < n; i++ {
		length := r.Varint()
		body := kbin.Reader{Src: r.Span(int(length))}
		body.Int8()
		body.Varlong()
		body.Varint()
		key := body.VarintBytes()
		value := body.VarintBytes()
		if !r.Ok() || !body.Ok() {
			return nil, fmt.Errorf("broker: corrupt internal record %d", i)
		}
		out = append(out, kv{key: key, value: value})
	}
	return out, nil
}

// Control record keys: version 0, then the marker type.
const (
	controlAbort  int16 = 0
	controlCommit int16 = 1
)

func buildMarkerBatch(pid int64, epoch int16, commit bool, coordinatorEpoch int32, now time.Time) []byte {
	typ := controlAbort
	if commit {
		typ = controlCommit
	}
	key := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 0), uint16(typ))
	value := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, 0), uint32(coordinatorEpoch))
	return buildBatch([]kv{{key: key, value: value}}, pid, epoch, -1, true, true, now)
}

// attrLogAppendTime marks a batch whose records all carry the batch's max
// timestamp (message.timestamp.type=LogAppendTime).
const attrLogAppendTime = 1 << 3

// recordTime is one record's offset delta and timestamp.
type recordTime struct {
	delta int32
	ts    int64
}

// recordTimes returns the offset delta and timestamp of every record of an
// uncompressed v2 batch, in order; ok is false for a compressed batch (the
// broker does not decompress) or one that does not decode.
func recordTimes(raw []byte) (out []recordTime, ok bool) {
	attrs := int16(binary.BigEndian.Uint16(raw[offAttributes:]))
	if attrs&0x7 != 0 {
		return nil, false
	}
	firstTs := int64(binary.BigEndian.Uint64(raw[offFirstTs:]))
	maxTs := int64(binary.BigEndian.Uint64(raw[offMaxTs:]))
	n := int32(binary.BigEndian.Uint32(raw[offNumRecords:]))
	r := kbin.Reader{Src: raw[batchHeaderLen:]}
	for i := int32(0); i < n; i++ {
		body := kbin.Reader{Src: r.Span(int(r.Varint()))}
		body.Int8()
		tsDelta := body.Varlong()
		delta := body.Varint()
		if !r.Ok() || !body.Ok() {
			return nil, false
		}
		ts := firstTs + tsDelta
		if attrs&attrLogAppendTime != 0 {
			ts = maxTs
		}
		out = append(out, recordTime{delta: delta, ts: ts})
	}
	return out, true
}
