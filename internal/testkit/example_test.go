package testkit_test

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
)

// A test starts a bundled cluster, creates a topic through the wire and
// checks what the cluster received. Everything closes when the test ends.
func Example() {
	t := &fakeT{}
	defer t.finish()

	c := bundled.Cluster(t)
	log := bundled.ObserveRequests(t, c)
	admin := testkit.Client(t, c.Bootstrap())
	testkit.CreateTopic(testkit.Context(t), t, admin, "orders", 3)
	fmt.Println(len(log.Of(kmsg.CreateTopics.Int16())), "CreateTopics request")
	// Output: 1 CreateTopics request
}
