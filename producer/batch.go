package producer

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cenkalti/backoff/v4"

	"github.com/kshare-go/kshare/internal/retry"
	"github.com/kshare-go/kshare/internal/txn"
)

// promisedRecord is a buffered record and the promise to call with its fate.
type promisedRecord struct {
	r       *kgo.Record
	promise func(*kgo.Record, error)
	size    int // key + value + header bytes, for metrics
}

// batch is one RecordBatch v2 being filled or in flight. Records are
// encoded as they are appended; the header, compression and CRC are added
// once, when the batch is first sent, and the bytes are reused on retries
// so that the broker can de-duplicate them by sequence number.
type batch struct {
	recs    []promisedRecord
	body    []byte // encoded records, uncompressed
	firstTS int64  // milliseconds
	maxTS   int64
	created time.Time
	closed  bool // no more appends; set when it is cut for sending

	pid   int64 // of the transaction the records were produced in
	epoch int16
	txn   uint64 // number of that transaction (the manager's TxnState)

	// Set when first cut for sending, kept across retries.
	hasSeq   bool
	seq      int32
	wire     []byte
	attempts int
	retryAt  time.Time
	backoff  backoff.BackOff
	answers  txn.AnswerCheck // stale-answer defense across attempts
}

// nextBackoff returns how long to wait before the next attempt: the same
// jittered exponential backoff as every kshare retry loop.
func (b *batch) nextBackoff(ctx context.Context) time.Duration {
	if b.backoff == nil {
		b.backoff = retry.WithContext(ctx)
	}
	d := b.backoff.NextBackOff()
	if d == backoff.Stop {
		return 0
	}
	return d
}

// recordBatchOverhead is the size of a RecordBatch v2 header.
const recordBatchOverhead = 61

// encodedSize returns the length of r's record body in the v2 format (the
// part after its varint length prefix), and its payload size for metrics.
func encodedSize(r *kgo.Record, tsDelta int64, offDelta int32) (body, payload int) {
	body = 1 + kbin.VarlongLen(tsDelta) + kbin.VarintLen(offDelta) +
		bytesLen(r.Key) + bytesLen(r.Value) + kbin.VarintLen(int32(len(r.Headers)))
	payload = len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		body += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
		payload += len(h.Key) + len(h.Value)
	}
	return body, payload
}

// recordSize is the bytes a record with the given body length takes in a
// batch, prefix included.
func recordSize(body int) int { return kbin.VarintLen(int32(body)) + body }

func bytesLen(b []byte) int {
	if b == nil {
		return 1
	}
	return kbin.VarintLen(int32(len(b))) + len(b)
}

// appendRecord appends r in the v2 record format.
func appendRecord(dst []byte, r *kgo.Record, tsDelta int64, offDelta int32, body int) []byte {
	dst = kbin.AppendVarint(dst, int32(body))
	dst = append(dst, 0) // record attributes: unused
	dst = kbin.AppendVarlong(dst, tsDelta)
	dst = kbin.AppendVarint(dst, offDelta)
	dst = kbin.AppendVarintBytes(dst, r.Key)
	dst = kbin.AppendVarintBytes(dst, r.Value)
	dst = kbin.AppendVarint(dst, int32(len(r.Headers)))
	for _, h := range r.Headers {
		dst = kbin.AppendVarintString(dst, h.Key)
		dst = kbin.AppendVarintBytes(dst, h.Value)
	}
	return dst
}

// wouldFit reports whether a record of size n fits in b under max bytes.
func (b *batch) wouldFit(n int, max int32) bool {
	return recordBatchOverhead+len(b.body)+n <= int(max)
}

// appendLocked appends r to the partition's open batch, opening a new one
// when there is none or r does not fit. It reports whether a new batch was
// opened and fails (false, false) only when r alone exceeds max. Called
// with p.mu held.
//
// A new batch takes the producer id, epoch and transaction number given:
// the caller reads them while its record is counted as outstanding, so
// they belong to the transaction the record is produced in (a commit
// cannot end it before the record is resolved). An open batch of another
// transaction is closed rather than joined.
func (p *partition) appendLocked(r *kgo.Record, promise func(*kgo.Record, error), max int32, now time.Time, pid int64, epoch int16, txn uint64) (ok, full bool) {
	ts := r.Timestamp.UnixMilli()
	var b *batch
	if n := len(p.batches); n > 0 && !p.batches[n-1].closed {
		b = p.batches[n-1]
		if b.txn != txn {
			b.closed = true
			b = nil
		}
	}
	var body, payload int
	if b != nil {
		body, payload = encodedSize(r, ts-b.firstTS, int32(len(b.recs)))
		if !b.wouldFit(recordSize(body), max) {
			b.closed = true
			b = nil
		}
	}
	if b == nil {
		body, payload = encodedSize(r, 0, 0)
		if recordBatchOverhead+recordSize(body) > int(max) {
			return false, false
		}
		b = &batch{firstTS: ts, maxTS: ts, created: now, pid: pid, epoch: epoch, txn: txn, body: getBytes(), recs: getRecs()}
		p.batches = append(p.batches, b)
	}
	b.body = appendRecord(b.body, r, ts-b.firstTS, int32(len(b.recs)), body)
	if ts > b.maxTS {
		b.maxTS = ts
	}
	b.recs = append(b.recs, promisedRecord{r: r, promise: promise, size: payload})
	p.buffered.Add(1)
	return true, len(p.batches) > 1
}

// opensBatchLocked reports whether appending a record to p would open a new
// batch (there is no open one), for TopicPartitionerOnNewBatch.
func (p *partition) opensBatchLocked() bool {
	n := len(p.batches)
	return n == 0 || p.batches[n-1].closed
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

var compressBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Batches reuse their buffers: record bodies, encoded batches and promise
// lists go back to these pools once a batch is sent or resolved, so that a
// steady stream of transactions allocates little. Buffers that grew past
// maxPooledBytes are left to the collector.
var (
	bytesPool = sync.Pool{New: func() any { return new([]byte) }}
	recsPool  = sync.Pool{New: func() any { return new([]promisedRecord) }}
)

const maxPooledBytes = 4 << 20

func getBytes() []byte { return (*bytesPool.Get().(*[]byte))[:0] }

func putBytes(b []byte) {
	if b != nil && cap(b) <= maxPooledBytes {
		bytesPool.Put(&b)
	}
}

func getRecs() []promisedRecord { return (*recsPool.Get().(*[]promisedRecord))[:0] }

func putRecs(recs []promisedRecord) {
	clear(recs) // drop the records for the collector
	recsPool.Put(&recs)
}

// release returns the batch's buffers to the pools once it is resolved.
func (b *batch) release() {
	putBytes(b.body)
	putBytes(b.wire)
	putRecs(b.recs)
	b.body, b.wire, b.recs = nil, nil, nil
}

// transactionalBit is the RecordBatch attribute that marks a transactional
// batch.
const transactionalBit = 0x10

// build encodes the batch header around its (possibly compressed) body:
// kmsg.RecordBatch does the layout, and the length and CRC are patched in
// afterwards because they cover the encoded bytes.
func (b *batch) build(compressor kgo.Compressor) {
	records := b.body
	var attrs int16 = transactionalBit
	var buf *bytes.Buffer
	if compressor != nil {
		buf = compressBufs.Get().(*bytes.Buffer)
		buf.Reset()
		out, codec := compressor.Compress(buf, b.body)
		if codec > 0 && len(out) < len(b.body) {
			records = out
			attrs |= int16(codec)
		}
	}
	rb := kmsg.RecordBatch{
		FirstOffset:          0,
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           attrs,
		LastOffsetDelta:      int32(len(b.recs) - 1),
		FirstTimestamp:       b.firstTS,
		MaxTimestamp:         b.maxTS,
		ProducerID:           b.pid,
		ProducerEpoch:        b.epoch,
		FirstSequence:        b.seq,
		NumRecords:           int32(len(b.recs)),
		Records:              records,
	}
	wire := rb.AppendTo(getBytes())
	if buf != nil {
		compressBufs.Put(buf)
	}
	// Length counts the bytes after itself (offset 8..12); the CRC
	// (offset 17..21) covers everything from the attributes on.
	binary.BigEndian.PutUint32(wire[8:], uint32(len(wire)-12))
	binary.BigEndian.PutUint32(wire[17:], crc32.Checksum(wire[21:], crcTable))
	b.wire = wire
	putBytes(b.body)
	b.body = nil
}

// nextSequence adds n to a sequence number, wrapping past MaxInt32 to 0 as
// Kafka does.
func nextSequence(seq int32, n int) int32 {
	next := int64(seq) + int64(n)
	if next > 1<<31-1 {
		next -= 1 << 31
	}
	return int32(next)
}

// partition buffers the records of one topic partition.
type partition struct {
	topic  *topic
	id     int32
	leader atomic.Int32

	buffered atomic.Int64 // records buffered, for backup partitioners

	mu       sync.Mutex
	batches  []*batch // oldest first; the last one may be open
	inflight bool     // batches[0] is in a request
	seq      int32    // next sequence number
	seqPID   int64    // producer id and epoch seq belongs to
	seqEpoch int16
}

// topic holds a topic's partitions and its partitioner, which is used by
// one record at a time (kgo's contract) under mu.
type topic struct {
	name string
	id   [16]byte

	mu    sync.Mutex
	parts []*partition
	tp    kgo.TopicPartitioner
	iter  backupIter // reused under mu
}

// backupIter walks a topic's partitions with their buffered record counts,
// for kgo.TopicBackupPartitioner.
type backupIter struct {
	parts []*partition
	i     int
}

// Next returns the next partition index and its buffered record count.
func (it *backupIter) Next() (int, int64) {
	i := it.i
	it.i++
	return i, it.parts[i].buffered.Load()
}

// Rem returns how many partitions Next has left.
func (it *backupIter) Rem() int { return len(it.parts) - it.i }

// pick chooses the partition of r, with t.mu held.
func (t *topic) pick(r *kgo.Record) int {
	n := len(t.parts)
	if bp, ok := t.tp.(kgo.TopicBackupPartitioner); ok {
		t.iter = backupIter{parts: t.parts}
		return bp.PartitionByBackup(r, n, &t.iter)
	}
	return t.tp.Partition(r, n)
}
