package broker

// share.auto.offset.reset: where a share group starts reading a partition
// it has no state for. latest is the high watermark, earliest the log
// start, and by_duration:<duration> (KIP-1106) the first record whose
// timestamp is at or after now minus the duration, found as ListOffsets
// finds a timestamp. When no record is that recent the share-partition
// stays uninitialized and its fetches answer OFFSET_NOT_AVAILABLE until
// one is, as Kafka answers.
//
// The duration is ISO-8601's PnDTnHnMn.nS as java.time.Duration.parse
// reads it, since that is what Kafka accepts: an optional sign, P, days,
// then T and hours, minutes and seconds (each optionally signed, seconds
// with up to nine fraction digits after '.' or ','), letters in either
// case, at least one part, and T never alone. Kafka refuses negative
// durations and values that overflow; so does this parser.

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// shareOffsetReset is a parsed share.auto.offset.reset; the zero value is
// latest.
type shareOffsetReset struct {
	earliest bool
	// byDuration is set for by_duration: look back by the duration.
	byDuration bool
	// back is the duration in nanoseconds; it may exceed what
	// time.Duration holds.
	back *big.Int
}

var isoDurationRE = regexp.MustCompile(`^(?i)([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?$`)

// javaDurationMaxSeconds bounds a duration's seconds as a Java long does.
var javaDurationMaxSeconds = big.NewInt(math.MaxInt64)

func parseShareOffsetReset(v string) (shareOffsetReset, error) {
	switch v {
	case shareResetLatest:
		return shareOffsetReset{}, nil
	case shareResetEarliest:
		return shareOffsetReset{earliest: true}, nil
	}
	iso, ok := strings.CutPrefix(v, shareResetByDuration)
	if !ok {
		return shareOffsetReset{}, fmt.Errorf("%q is not latest, earliest or by_duration:<PnDTnHnMn.nS>", v)
	}
	back, err := parseISODuration(iso)
	if err != nil {
		return shareOffsetReset{}, fmt.Errorf("%q: %w", v, err)
	}
	return shareOffsetReset{byDuration: true, back: back}, nil
}

// parseISODuration returns the duration in nanoseconds.
func parseISODuration(s string) (*big.Int, error) {
	m := isoDurationRE.FindStringSubmatch(s)
	if m == nil || m[3] != "" && len(m[3]) == 1 || m[2] == "" && m[3] == "" {
		return nil, fmt.Errorf("%q is not an ISO-8601 duration PnDTnHnMn.nS", s)
	}
	seconds := new(big.Int)
	for _, part := range []struct {
		digits string
		unit   int64
	}{{m[2], 86400}, {m[4], 3600}, {m[5], 60}, {m[6], 1}} {
		if part.digits == "" {
			continue
		}
		n, ok := new(big.Int).SetString(strings.TrimPrefix(part.digits, "+"), 10)
		if !ok {
			return nil, fmt.Errorf("%q: %q is not a number", s, part.digits)
		}
		n.Mul(n, big.NewInt(part.unit))
		if n.CmpAbs(javaDurationMaxSeconds) > 0 {
			return nil, fmt.Errorf("%q overflows", s)
		}
		seconds.Add(seconds, n)
	}
	if seconds.CmpAbs(javaDurationMaxSeconds) > 0 {
		return nil, fmt.Errorf("%q overflows", s)
	}
	nanos := seconds.Mul(seconds, big.NewInt(int64(time.Second)))
	if frac := m[7]; frac != "" {
		f, _ := new(big.Int).SetString(frac+strings.Repeat("0", 9-len(frac)), 10) // digits only, by the pattern
		if strings.HasPrefix(m[6], "-") {
			f.Neg(f)
		}
		nanos.Add(nanos, f)
	}
	if m[1] == "-" {
		nanos.Neg(nanos)
	}
	if nanos.Sign() < 0 {
		return nil, fmt.Errorf("%q is negative", s)
	}
	return nanos, nil
}

// startOffset returns where a share-partition of p starts under the
// strategy, at now: OFFSET_NOT_AVAILABLE when by_duration finds no record
// recent enough.
func (r shareOffsetReset) startOffset(p *partition, now time.Time) (int64, *kerr.Error) {
	switch {
	case r.earliest:
		return p.logStart, nil
	case !r.byDuration:
		return p.endOffset(), nil
	}
	target := new(big.Int).Sub(big.NewInt(now.UnixNano()), r.back)
	target.Div(target, big.NewInt(int64(time.Millisecond)))
	if target.Sign() < 0 {
		return p.logStart, nil // further back than any timestamp
	}
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = p.index, -1, target.Int64()
	found := kmsg.NewListOffsetsResponseTopicPartition()
	found.Offset = -1
	if err := listOffset(p.leader, p.topic, 0, rp, &found); err != nil {
		return 0, err
	}
	if found.Offset < 0 {
		return 0, kerr.OffsetNotAvailable
	}
	return found.Offset, nil
}
