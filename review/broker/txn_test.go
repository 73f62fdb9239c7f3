package brokerreview_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// initTxnID registers a transactional id and returns its producer id
// and epoch.
func initTxnID(t testing.TB, rc *rawConn, id string) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version = 5
	req.TransactionalID = kmsg.StringPtr(id)
	req.TransactionTimeoutMillis = 60000
	req.ProducerID, req.ProducerEpoch = -1, -1
	resp := rc.must(req).(*kmsg.InitProducerIDResponse)
	require.Zero(t, resp.ErrorCode)
	return resp.ProducerID, resp.ProducerEpoch
}

// TestListTransactionsPatternDoesNotFreezeTheBroker: one ListTransactions
// v2 (< 1 MiB) filtering by TransactionalIdPattern, with one transactional
// id of 2,000 characters registered.
//
// Today: the pattern is compiled on the loop (~0.5 s for this one) and
// matched against every transactional id of the node, also on the loop
// (66_list_transactions.go); Go's regexp costs input length x program
// size, ~10 s for this id. The whole broker waits. The pattern (and
// transactional ids) should be bounded, or the match moved off the loop
// with a budget.
func TestListTransactionsPatternDoesNotFreezeTheBroker(t *testing.T) {
	c, pl := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	initTxnID(t, rc, strings.Repeat("x", 2000))
	req := kmsg.NewPtrListTransactionsRequest()
	req.Version = 2
	req.TransactionalIDPattern = kmsg.StringPtr(heavyRegex())
	require.Less(t, len(frame(req, 1)), 1<<20)
	var resp *kmsg.ListTransactionsResponse
	worst := measure(t, p, "ListTransactions with a heavy pattern, one 2,000-char id", func() {
		resp = rc.must(req).(*kmsg.ListTransactionsResponse)
	})
	require.Zero(t, resp.ErrorCode)
	require.Empty(t, resp.TransactionStates) // the id ends without a Z
	require.Empty(t, pl.count())
	require.Less(t, worst, freezeBound, "one ListTransactions stalled every other client")
}
