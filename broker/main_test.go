package broker

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// Cluster must stop all of its goroutines on Close, and so must the clients
// the tests start.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
