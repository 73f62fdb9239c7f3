package wire

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kbin"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
)

// ErrMalformed is wrapped by every decoding error of this package. It
// matches kshare.ErrUnsupported: bytes that do not decode as these
// messages come from a broker that speaks another form of KIP-1289 (the
// key numbers are provisional), and retrying cannot help.
var ErrMalformed = errs.Sentinel(kshare.ErrUnsupported, "malformed KIP-1289 message")

// reader adds the flexible-version helpers to kbin.Reader.
type reader struct{ kbin.Reader }

func newReader(src []byte) *reader { return &reader{kbin.Reader{Src: src}} }

// arrayLen reads a compact array length; a null array reads as empty.
// kbin already refuses a length larger than the bytes that remain.
func (r *reader) arrayLen() int {
	if n := r.CompactArrayLen(); n > 0 {
		return int(n)
	}
	return 0
}

// skipTags skips a tagged-field section; kshare defines no tags.
func (r *reader) skipTags() {
	n := r.Uvarint()
	for i := uint32(0); i < n && r.Ok(); i++ {
		r.Uvarint() // tag
		size := r.Uvarint()
		r.Span(int(size)) // marks the reader bad if size overruns

	}
}

func (r *reader) complete(what string, version int16) error {
	if err := r.Complete(); err != nil {
		return fmt.Errorf("%w: %s v%d: %w", ErrMalformed, what, version, err)
	}
	return nil
}

func checkVersion(what string, version, max int16) error {
	if version < 0 || version > max {
		return fmt.Errorf("%w: %s has no version %d", ErrMalformed, what, version)
	}
	return nil
}

func appendTags(dst []byte) []byte { return kbin.AppendUvarint(dst, 0) }
