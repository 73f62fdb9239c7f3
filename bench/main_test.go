package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary be a broker child too (serve.go).
func TestMain(m *testing.M) {
	if serveIfChild() {
		return
	}
	os.Exit(m.Run())
}
