package javahash

import (
	"math"
	"unicode"
	"unicode/utf16"
)

// HashCode returns Java's String.hashCode of key: s[0]*31^(n-1) + ... +
// s[n-1] over the string's UTF-16 code units, in 32-bit wrapping
// arithmetic. Characters outside the Basic Multilingual Plane count as
// their two surrogates, as in Java.
//
// It allocates nothing: brokers hash a coordinator key for every request
// that names one.
func HashCode(key string) int32 {
	var h int32
	for _, r := range key { // invalid UTF-8 reads as U+FFFD, as []rune does
		switch r1, r2 := utf16.EncodeRune(r); {
		case r1 != unicode.ReplacementChar || r2 != unicode.ReplacementChar:
			h = 31*(31*h+r1) + r2 // a surrogate pair
		case r >= 0xd800 && r < 0xe000, r > unicode.MaxRune:
			h = 31*h + unicode.ReplacementChar // not encodable: U+FFFD, as utf16.Encode writes
		default:
			h = 31*h + r
		}
	}
	return h
}

// Partition returns the partition of an internal topic with the given
// number of partitions that holds key: Kafka's partitionFor,
// Utils.abs(key.hashCode()) % partitions. Utils.abs maps MinInt32 to 0
// (a mask of the sign bit would place every negative hash elsewhere).
// partitions must be positive; Partition panics on zero, as a division
// by zero.
func Partition(key string, partitions int32) int32 {
	h := HashCode(key)
	switch {
	case h == math.MinInt32:
		h = 0
	case h < 0:
		h = -h
	}
	return h % partitions
}
