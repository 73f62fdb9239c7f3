package javahash

import "testing"

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
