// Package testkit holds the test helpers that kshare's packages share:
// kgo clients that a test closes, topic and share-group set-up over the
// wire, polling a share consumer until records arrive or must not, a
// share-group member driven by raw requests whose connections a test can
// drop (ShareMember), and waiting for a condition. They work against any
// cluster.
//
// Only _test.go files import it. It imports no kshare package, so that
// every package's own in-package tests can use it without an import
// cycle, the broker's included; helpers that need a share consumer take
// the small Poller interface instead. The bundled cluster and its request
// log are in the subpackage bundled, which imports package broker.
//
// Every helper fails the test (t.Fatal, through testify's require) when
// the cluster refuses what it asks; none of them returns an error.
package testkit
