// Package testkit holds the test helpers that the kshare client packages
// share: a bundled cluster and kgo clients that a test closes, topic and
// share-group set-up over the wire, polling a share consumer until records
// arrive or must not, waiting for a condition, and a log of the requests
// the bundled cluster receives.
//
// Only _test.go files import it. It imports no kshare client package
// (txnclient, producer, shareconsumer, acknowledger), so that their own
// in-package tests can use it without an import cycle; helpers that need a
// share consumer take the small Poller interface instead.
//
// Every helper fails the test (t.Fatal, through testify's require) when
// the cluster refuses what it asks; none of them returns an error.
package testkit
