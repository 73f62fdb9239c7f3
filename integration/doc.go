// Package integration holds kshare's end-to-end tests of independent
// clients (librdkafka's kcat, the Java reference clients) against the
// bundled broker. The exactly-once pipelines under faults are tested where
// their loops live, in examples/ctp (the fault matrix) and
// examples/checkpoint. Tests that need a tool
// the machine lacks skip with the reason, except under CI=true, where they
// fail: CI installs everything they need.
package integration
