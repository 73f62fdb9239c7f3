package differential_test

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The scenarios write record batches by hand: they need producer ids,
// epochs, sequences and broken checksums that no client would send.

// attribute bits of a v2 record batch.
const (
	attrTransactional = 1 << 4
	attrControl       = 1 << 5
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// batch describes one uncompressed v2 record batch to produce.
type batch struct {
	pid   int64
	epoch int16
	seq   int32
	txn   bool
	// control marks the batch as a control batch, which only brokers
	// may write.
	control bool
	// baseTs is the first timestamp; tsDeltas (if set) gives each record's
	// timestamp relative to it, otherwise every record has baseTs.
	baseTs   int64
	tsDeltas []int64
	values   []string
}

// plain is a batch without a producer id, for the given values.
func plain(baseTs int64, values ...string) batch {
	return batch{pid: -1, epoch: -1, seq: -1, baseTs: baseTs, values: values}
}

// encode returns the batch in wire form with a correct CRC.
func (b batch) encode() []byte {
	var records []byte
	maxTs := b.baseTs
	for i, v := range b.values {
		var delta int64
		if i < len(b.tsDeltas) {
			delta = b.tsDeltas[i]
		}
		maxTs = max(maxTs, b.baseTs+delta)
		var body []byte
		body = append(body, 0) // record attributes
		body = kbin.AppendVarlong(body, delta)
		body = kbin.AppendVarint(body, int32(i))
		body = kbin.AppendVarint(body, -1) // null key
		body = kbin.AppendVarint(body, int32(len(v)))
		body = append(body, v...)
		body = kbin.AppendVarint(body, 0) // no headers
		records = kbin.AppendVarint(records, int32(len(body)))
		records = append(records, body...)
	}
	var attrs int16
	if b.txn {
		attrs |= attrTransactional
	}
	if b.control {
		attrs |= attrControl
	}
	rb := kmsg.RecordBatch{
		FirstOffset:          0,
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           attrs,
		LastOffsetDelta:      int32(len(b.values) - 1),
		FirstTimestamp:       b.baseTs,
		MaxTimestamp:         maxTs,
		ProducerID:           b.pid,
		ProducerEpoch:        b.epoch,
		FirstSequence:        b.seq,
		NumRecords:           int32(len(b.values)),
		Records:              records,
	}
	rb.Length = int32(49 + len(records))
	raw := rb.AppendTo(nil)
	// The CRC covers everything from the attributes on.
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], castagnoli))
	return raw
}

// withBadCRC returns a copy of raw whose checksum no longer matches.
func withBadCRC(raw []byte) []byte {
	out := append([]byte(nil), raw...)
	out[17] ^= 0xff
	return out
}

// legacyMessage returns a magic-1 message set of one message, the format
// that produce v3+ no longer accepts.
func legacyMessage(value string) []byte {
	var msg []byte
	msg = append(msg, 1, 0)                              // magic 1, attributes
	msg = binary.BigEndian.AppendUint64(msg, 1)          // timestamp
	msg = binary.BigEndian.AppendUint32(msg, 0xffffffff) // null key
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(value)))
	msg = append(msg, value...)
	crc := crc32.ChecksumIEEE(msg)
	var out []byte
	out = binary.BigEndian.AppendUint64(out, 0) // offset
	out = binary.BigEndian.AppendUint32(out, uint32(4+len(msg)))
	out = binary.BigEndian.AppendUint32(out, crc)
	return append(out, msg...)
}

// fetched is what a scenario records of the batches a fetch returned.
type fetched struct {
	// values of the data records, in order, as "offset:value".
	values []string
	// controls lists control batches as "offset:COMMIT" / "offset:ABORT".
	controls []string
}

func (f fetched) String() string {
	return fmt.Sprintf("values=[%s] controls=[%s]", strings.Join(f.values, " "), strings.Join(f.controls, " "))
}

// readBatches decodes the uncompressed v2 batches of a fetch response (the
// scenarios only ever produce uncompressed ones). A partial batch at the
// end, which a broker may return at a byte limit, is ignored.
func readBatches(raw []byte) (fetched, error) {
	var out fetched
	for len(raw) >= 61 {
		length := int(int32(binary.BigEndian.Uint32(raw[8:])))
		if length+12 > len(raw) {
			break
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(raw[:length+12]); err != nil {
			return out, fmt.Errorf("batch header: %w", err)
		}
		raw = raw[length+12:]
		if rb.Magic != 2 {
			return out, fmt.Errorf("batch magic %d", rb.Magic)
		}
		if rb.Attributes&0x7 != 0 {
			return out, fmt.Errorf("compressed batch (codec %d)", rb.Attributes&0x7)
		}
		r := kbin.Reader{Src: rb.Records}
		for i := int32(0); i < rb.NumRecords; i++ {
			body := kbin.Reader{Src: r.Span(int(r.Varint()))}
			body.Int8()
			body.Varlong()
			delta := body.Varint()
			key := body.VarintBytes()
			value := body.VarintBytes()
			if !r.Ok() || !body.Ok() {
				return out, fmt.Errorf("record %d of the batch at %d does not decode", i, rb.FirstOffset)
			}
			offset := rb.FirstOffset + int64(delta)
			if rb.Attributes&attrControl != 0 {
				kind := "UNKNOWN"
				if len(key) >= 4 {
					switch binary.BigEndian.Uint16(key[2:]) {
					case 0:
						kind = "ABORT"
					case 1:
						kind = "COMMIT"
					}
				}
				out.controls = append(out.controls, fmt.Sprintf("%d:%s", offset, kind))
				continue
			}
			out.values = append(out.values, fmt.Sprintf("%d:%s", offset, value))
		}
	}
	return out, nil
}
