//go:build review

package user

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBrokerNegativeNodesIsRefused: `kshare-broker -nodes -1` panics
// (makeslice: len out of range) instead of refusing the value; -nodes 0
// is refused properly.
//
// Finding: crash.
func TestBrokerNegativeNodesIsRefused(t *testing.T) {
	r := run(t, 30*time.Second, bin(t, "kshare-broker"), "-nodes", "-1")
	require.NotContains(t, r.stderr, "panic:")
	require.NotZero(t, r.code)
	require.Contains(t, r.stderr, "-nodes")
}

// TestBrokerFlagErrorsExit2: the examples exit 2 for bad flags (Go's
// flag package convention); kshare-broker exits 1 for them, and 1 for
// -h too, printing "kshare-broker: flag: help requested" as an error.
//
// Finding: wrong exit code (minor: docs/broker.md says nothing either way).
func TestBrokerFlagErrorsExit2(t *testing.T) {
	r := run(t, 30*time.Second, bin(t, "kshare-broker"), "-h")
	assert.Equal(t, 0, r.code, "-h is not an error")
	assert.NotContains(t, r.stderr, "help requested")
	for _, args := range [][]string{
		{"-bogus"},
		{"-port", "abc"},
		{"-nodes", "0"},
		{"-log-level", "loud"},
		{"-read-timeout", "0"},
	} {
		r := run(t, 30*time.Second, bin(t, "kshare-broker"), args...)
		assert.Equal(t, 2, r.code, "%v", args)
	}
}

// TestBrokerRefusesWhatItIgnores: a positional argument is silently
// ignored (the broker starts), and a partition count past int32 is
// silently truncated (-share-state-partitions 4294967297 runs with 1
// partition). Both should be refused with exit 2 and the flag's name.
//
// Finding: minor.
func TestBrokerRefusesWhatItIgnores(t *testing.T) {
	for _, args := range [][]string{
		{"-port", "0", "stray-argument"},
		{"-port", "0", "-share-state-partitions", "4294967297"},
		{"-port", "0", "-txn-state-partitions", "4294967297"},
	} {
		p := start(t, "", bin(t, "kshare-broker"), args...)
		ready := p.waitFor("kshare-broker ready", 10*time.Second)
		r := p.wait(time.Second)
		t.Logf("%v: ready=%v exit %d\nstderr:\n%s", args, ready, r.code, tail(r.stderr, 1000))
		assert.False(t, ready, "%v: the broker started", args)
	}
}

// TestBrokerFlagsAreDocumented: docs/broker.md is the broker's reference
// ("Details: docs/broker.md" in README.md). Every flag `kshare-broker -h`
// lists must appear there as `-name`; -host, -offsets-partitions and
// -share-state-partitions do not (the last two hide behind "...").
//
// Finding: doc mismatch.
func TestBrokerFlagsAreDocumented(t *testing.T) {
	r := run(t, 30*time.Second, bin(t, "kshare-broker"), "-h")
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "broker.md"))
	require.NoError(t, err)
	flags := regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(r.stderr, -1)
	require.NotEmpty(t, flags)
	var missing []string
	for _, f := range flags {
		if !strings.Contains(string(doc), "`-"+f[1]) {
			missing = append(missing, "-"+f[1])
		}
	}
	require.Empty(t, missing, "flags of kshare-broker -h that docs/broker.md does not list")
}
