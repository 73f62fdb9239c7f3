package producer

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: the
// producer's dispatcher and request goroutines must all end at Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
