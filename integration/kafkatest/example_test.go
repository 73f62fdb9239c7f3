package kafkatest_test

import (
	"errors"
	"fmt"

	"github.com/kshare-go/kshare/integration/kafkatest"
)

// A program outside a test (a benchmark driver, say) reads the same
// environment with LookupBootstrap and decides for itself what "not
// configured" means. In a test, call kafkatest.Bootstrap(t) instead.
func ExampleLookupBootstrap() {
	seeds, err := kafkatest.LookupBootstrap()
	if errors.Is(err, kafkatest.ErrNotConfigured) {
		fmt.Println("skipping the real-Kafka run:", err)
		return
	}
	if err != nil {
		fmt.Println("bad configuration:", err)
		return
	}
	fmt.Println("real Kafka at", seeds)
}
