package javahash

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf16"
)

// TestHashCode checks the hash against Java's own (jshell:
// "hello".hashCode()), including characters past ASCII and a surrogate
// pair.
func TestHashCode(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want int32
	}{
		{"", 0},
		{"hello", 99162322},
		{"polygenelubricants", -2147483648},
		{"kshare-txn-\u00e9", -96422515},
		{"kshare-\U0001F600", -866137220},
	} {
		if got := HashCode(tc.key); got != tc.want {
			t.Errorf("HashCode(%q) = %d, want %d (Java's String.hashCode)", tc.key, got, tc.want)
		}
	}
}

// TestPartition checks placement against answers a real Kafka 4.4 gave
// (DescribeTransactions after AddOffsetsToTxn names the group's
// __consumer_offsets partition) for keys whose hash is negative, and the
// one key whose hash is MinInt32.
func TestPartition(t *testing.T) {
	for _, tc := range []struct {
		key        string
		partitions int32
		want       int32
	}{
		{"grp-1795956179280451484-0", 5, 0},
		{"grp-1795956179280451484-2", 5, 3},
		{"grp-1795956179280451484-4", 5, 1},
		{"grp-1795956170074515643-0", 5, 4},
		{"hello", 5, 99162322 % 5},
		{"polygenelubricants", 5, 0}, // MinInt32: Utils.abs gives 0
		{"kshare-txn-\u00e9", 50, 15},
		{"kshare-\U0001F600", 7, 4},
		{"", 50, 0},
	} {
		if got := Partition(tc.key, tc.partitions); got != tc.want {
			t.Errorf("Partition(%q, %d) = %d, want %d (Kafka's Utils.abs(hashCode) %% n)", tc.key, tc.partitions, got, tc.want)
		}
	}
}

// hashCodeByEncoding is HashCode written the obvious way (it allocates
// two slices per call).
func hashCodeByEncoding(key string) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(key)) {
		h = 31*h + int32(u)
	}
	return h
}

// TestHashCodeMatchesUTF16Encoding compares HashCode with the obvious
// form on random strings: ASCII, two- and three-byte characters, astral
// ones (surrogate pairs) and invalid UTF-8.
func TestHashCodeMatchesUTF16Encoding(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	pieces := []string{"a", "Z", "-", "\u00e9", "\u20ac", "\U0001F600", "\U0010FFFF", "\xff", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x00"}
	for range 5000 {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		if got, want := HashCode(b.String()), hashCodeByEncoding(b.String()); got != want {
			t.Fatalf("HashCode(%q) = %d, want %d", b.String(), got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { HashCode("group:topic-id:\U0001F600:12") }); n != 0 {
		t.Errorf("HashCode allocates %v times per call", n)
	}
}
