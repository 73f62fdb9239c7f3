package broker

import "testing"

// TestJavaHashPartition checks coordinator placement against answers the
// real Kafka 4.4 gave (DescribeTransactions after AddOffsetsToTxn names
// the group's __consumer_offsets partition), for keys whose Java hash is
// negative, and for the one key whose hash is MinInt32.
func TestJavaHashPartition(t *testing.T) {
	for _, tc := range []struct {
		key        string
		partitions int32
		want       int32
	}{
		{"grp-1795956179280451484-0", 5, 0},
		{"grp-1795956179280451484-2", 5, 3},
		{"grp-1795956179280451484-4", 5, 1},
		{"grp-1795956170074515643-0", 5, 4},
		{"polygenelubricants", 5, 0}, // hashCode is MinInt32; Utils.abs gives 0
		{"", 50, 0},
	} {
		if got := javaHashPartition(tc.key, tc.partitions); got != tc.want {
			t.Errorf("javaHashPartition(%q, %d) = %d, want %d (Kafka's Utils.abs(hashCode) %% n)", tc.key, tc.partitions, got, tc.want)
		}
	}
}
