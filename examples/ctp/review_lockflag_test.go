package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kshare-go/kshare/internal/eos"
)

// Review finding (regression, fixed): -lock-duration below 1s no longer works on
// the cluster the command bundles. The flag accepts any positive duration
// ("the group's share.record.lock.duration.ms, positive"), and before
// this change the bundled broker took down to 100ms ("ctp -records 100
// -lock-duration 500ms -faults=false" at 0574b1f: exactly-once: OK); now
// the broker's new default ShareLockDurationBounds (1s..1h) refuse it and
// the run exits 2 with INVALID_CONFIG pointing at kshare-broker flags and
// ShareLockDurationBounds, neither of which a user of this command can
// set (internal/eos/cli.go starts broker.NewCluster without bounds).
// examples/checkpoint is the same.
//
// Expected: the bundled cluster accepts every lock the flag accepts (or the
// flag refuses what the bundled cluster would).
func TestReviewShortLockDurationOnTheBundledCluster(t *testing.T) {
	code, stdout, stderr := runCtp(t, "-records", "100", "-lock-duration", "500ms", "-faults=false", "-max-duration", "1m")
	assert.Equal(t, eos.ExitOK, code, "%s", stderr)
	assert.Contains(t, stdout, "exactly-once: OK")
}
