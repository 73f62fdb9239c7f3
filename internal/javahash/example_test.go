package javahash_test

import (
	"fmt"

	"github.com/kshare-go/kshare/internal/javahash"
)

// A group's offsets live in the __consumer_offsets partition its name
// hashes to. With Kafka's default of 50 partitions, "orders-pipeline"
// (Java's hashCode: -1009042294) lands on partition 44:
func ExamplePartition() {
	fmt.Println(javahash.Partition("orders-pipeline", 50))
	// Output: 44
}
