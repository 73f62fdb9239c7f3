package kgoclient

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a kgo client built here is left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
