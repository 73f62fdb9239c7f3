// Package integration holds kshare's end-to-end tests: independent clients
// (librdkafka's kcat, the Java reference clients) against the bundled
// broker, and exactly-once pipelines under faults. Tests that need a tool
// the machine lacks skip with the reason, except under CI=true, where they
// fail: CI installs everything they need.
package integration
