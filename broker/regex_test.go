package broker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// costlyRegex is a valid expression of about size bytes whose NFA keeps
// one thread per alternative alive on every character of a name: the
// alternatives start with different negated classes, so the parser
// cannot factor them. It matches names that end in Z.
func costlyRegex(size int) string {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, `[^\x{%x}]*Z`, 0x100+i)
	}
	return b.String()
}

// regexStats reads the loop's regex counters.
func regexStats(t testing.TB, c *Cluster) (loopSteps int64, background int) {
	t.Helper()
	require.NoError(t, c.do(func() { loopSteps, background = c.stats.regexLoopSteps, c.stats.regexBackground }))
	return loopSteps, background
}

// TestBoundedRegexRefuses: expressions past the length or program bounds
// are refused before any matching; one within them compiles.
func TestBoundedRegexRefuses(t *testing.T) {
	_, _, err := boundedRegex(costlyRegex(maxRegexLen + 1))
	require.ErrorContains(t, err, "longer than the broker's limit")
	// 210 bytes, over 21,000 instructions.
	_, _, err = boundedRegex(strings.Repeat("[a-z]{1000}", 21))
	require.ErrorContains(t, err, "instructions, more than the broker's limit")
	_, _, err = boundedRegex("v(")
	require.ErrorContains(t, err, "invalid regular expression")
	re, insts, err := boundedRegex(costlyRegex(maxRegexLen - 16))
	require.NoError(t, err)
	require.True(t, re.MatchString("aZ"))
	require.False(t, re.MatchString("aZb"), "anchored")
	require.Greater(t, insts, 1000)
}

// TestConsumerGroupRegexBoundedOnTheLoop: a heartbeat whose regex is past
// the bounds is INVALID_REGULAR_EXPRESSION (it once froze the broker for
// 14 s compiling and matching a 900 KiB expression); one within them whose
// matching is costly is resolved in the background (the loop does none of
// it), and the member gets the matching topics at a later heartbeat.
func TestConsumerGroupRegexBoundedOnTheLoop(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	long := strings.Repeat("t", 240)
	for i := 0; i < 8; i++ {
		createTopic(t, c, fmt.Sprintf("%d%sZ", i, long), 1)
	}
	createTopic(t, c, "other", 1)

	m := newCGMember(t, c, "rx-bound", "m")
	req := m.joinReq()
	req.SubscribedTopicNames = nil
	huge := costlyRegex(900 << 10)
	req.SubscribedTopicRegex = &huge
	resp := m.expect(req, kerr.InvalidRegularExpression)
	require.Contains(t, cgMessage(resp), "longer than the broker's limit")
	steps, background := regexStats(t, c)
	require.Zero(t, steps)
	require.Zero(t, background)

	costly := costlyRegex(8 << 10)
	req = m.joinReq()
	req.SubscribedTopicNames = nil
	req.SubscribedTopicRegex = &costly
	m.do(req)
	steps, background = regexStats(t, c)
	require.Zero(t, steps, "the costly match ran on the loop")
	require.Equal(t, 1, background)

	// The resolution arrives; a later heartbeat moves the epoch and
	// assigns the topics. The deadline is only a hang guard.
	deadline := time.Now().Add(time.Minute)
	for len(m.partitionsOf(fmt.Sprintf("0%sZ", long))) == 0 {
		require.True(t, time.Now().Before(deadline), "the background resolution never landed")
		time.Sleep(10 * time.Millisecond)
		m.heartbeat()
	}
	for i := 0; i < 8; i++ {
		require.Equal(t, []int32{0}, m.partitionsOf(fmt.Sprintf("%d%sZ", i, long)))
	}
	require.Empty(t, m.partitionsOf("other"))
	_, background = regexStats(t, c)
	require.Equal(t, 1, background, "resolved once while the topics did not change")

	// A cheap regex is resolved on the loop, within the bound.
	m2 := newCGMember(t, c, "rx-cheap", "m2")
	cheap := "oth.*"
	req = m2.joinReq()
	req.SubscribedTopicNames = nil
	req.SubscribedTopicRegex = &cheap
	m2.do(req)
	require.Equal(t, []int32{0}, m2.partitionsOf("other"))
	steps, _ = regexStats(t, c)
	require.Positive(t, steps)
	require.LessOrEqual(t, steps, int64(regexSyncSteps))
	require.Equal(t, 0, c.handlerPanics)
}

// TestListTransactionsPatternOffTheLoop: a pattern past the bounds is
// INVALID_REGULAR_EXPRESSION; one within them is matched in the
// background (a 900 KiB pattern once froze the broker for 10 s matching
// one long transactional id), with the right answer.
func TestListTransactionsPatternOffTheLoop(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	txnInitOK(t, c, strings.Repeat("x", 2000)+"Z")
	txnInitOK(t, c, "plain")
	list := func(pattern string) *kmsg.ListTransactionsResponse {
		req := kmsg.NewPtrListTransactionsRequest()
		req.Version = 2
		req.TransactionalIDPattern = &pattern
		return txnWire(t, c, 0, req).(*kmsg.ListTransactionsResponse)
	}
	resp := list(costlyRegex(900 << 10))
	require.Equal(t, kerr.InvalidRegularExpression.Code, resp.ErrorCode)
	require.Empty(t, resp.TransactionStates)

	resp = list(costlyRegex(4 << 10))
	require.Zero(t, resp.ErrorCode)
	require.Len(t, resp.TransactionStates, 1)
	require.Equal(t, strings.Repeat("x", 2000)+"Z", resp.TransactionStates[0].TransactionalID)
	steps, background := regexStats(t, c)
	require.Zero(t, steps)
	require.Equal(t, 2, background)

	resp = list("pla.*")
	require.Zero(t, resp.ErrorCode)
	require.Len(t, resp.TransactionStates, 1)
	require.Equal(t, "plain", resp.TransactionStates[0].TransactionalID)
	require.Equal(t, 0, c.handlerPanics)
}

// TestListTransactionsPatternWorkIsBounded: a pattern within the size
// bounds whose matching against the listed ids would cost too much (here
// 66 ids of 2,000 bytes, about 0.8 billion steps, which kept a background
// job busy for 20 s and Close waiting for it) is INVALID_REGULAR_EXPRESSION
// before any matching; a cheap pattern over the same ids is answered.
func TestListTransactionsPatternWorkIsBounded(t *testing.T) {
	c := newTestCluster(t, Nodes(1))
	const ids, idLen = 66, 2000
	for i := range ids {
		txnInitOK(t, c, strings.Repeat("a", idLen-4)+fmt.Sprintf("%04d", i))
	}
	list := func(pattern string) *kmsg.ListTransactionsResponse {
		req := kmsg.NewPtrListTransactionsRequest()
		req.Version = 2
		req.TransactionalIDPattern = &pattern
		return txnWire(t, c, 0, req).(*kmsg.ListTransactionsResponse)
	}
	pattern := "(?:" + strings.Repeat("a?", 3000) + ")*c"
	_, insts, err := boundedRegex(pattern)
	require.NoError(t, err, "the pattern is within the size bounds")
	require.Greater(t, int64(insts)*ids*(idLen+1), int64(regexJobSteps))
	require.LessOrEqual(t, int64(insts)*(idLen+1), int64(regexNameSteps))
	resp := list(pattern)
	require.Equal(t, kerr.InvalidRegularExpression.Code, resp.ErrorCode)
	require.Empty(t, resp.TransactionStates)

	resp = list("a*00[0-9]7")
	require.Zero(t, resp.ErrorCode)
	require.Len(t, resp.TransactionStates, 6, "ids ending in 0007, 0017, ..., 0057")
	require.Equal(t, 0, c.handlerPanics)
}
