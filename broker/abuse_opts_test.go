package broker

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// abuseOpts are the options every abuse benchmark's cluster starts with.
// It is its own file so that the benchmarks also build against versions
// of the broker without the newer options (to measure "before").
func abuseOpts() []Opt { return nil }

// abuseConnOpts bounds how long a request may take to arrive and how
// long a connection may stay idle.
func abuseConnOpts(read, idle time.Duration) []Opt {
	return []Opt{ReadTimeout(read), ConnectionsMaxIdle(idle)}
}

// abuseTxnExpiryOpts makes transactional ids expire after d.
func abuseTxnExpiryOpts(d time.Duration) []Opt { return []Opt{TransactionalIDExpiration(d)} }

// abuseRetentionOpts checks retention every d and budgets stored bytes.
func abuseRetentionOpts(d time.Duration, maxBytes int64) []Opt {
	return []Opt{RetentionCheckInterval(d), MaxBytes(maxBytes)}
}

// shareFetchError is the top-level error of a ShareFetch answer.
func shareFetchError(resp kmsg.Response) int16 { return resp.(*shareFetchAnswer).ErrorCode }

// storedBytesOf is what the cluster's logs hold (on the loop).
func storedBytesOf(c *Cluster) int64 { return c.storedBytes }

// armedTimers is how many timers wait on the loop (on the loop).
func armedTimers(c *Cluster) int { return len(c.timers) }

// resetLongestTurn forgets the loop's longest turn so far (on the loop).
func resetLongestTurn(c *Cluster) { c.stats.longestTurn = 0 }

// longestTurn is the loop's longest turn since the reset (on the loop).
func longestTurn(c *Cluster) time.Duration { return c.stats.longestTurn }
