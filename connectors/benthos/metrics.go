package benthos

import (
	"sync/atomic"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// counter is a count the plugins keep for themselves (tests read it) and
// export as a Benthos metric.
type counter struct {
	n atomic.Int64
	m *service.MetricCounter // nil without metrics
}

func newCounter(mgr *service.Resources, name string) *counter {
	c := &counter{}
	if mgr != nil {
		if ms := mgr.Metrics(); ms != nil {
			c.m = ms.NewCounter(name)
			// An exporter shows a counter once it has been touched:
			// show it at zero from the start, so that a scrape finds
			// every kshare counter (and a rate of 0 is a rate).
			c.m.Incr(0)
		}
	}
	return c
}

func (c *counter) add(n int) {
	if n == 0 {
		return
	}
	c.n.Add(int64(n))
	if c.m != nil {
		c.m.Incr(int64(n))
	}
}

func (c *counter) load() int64 { return c.n.Load() }

// inputMetrics count what the input's own acknowledgement-only
// transactions committed.
type inputMetrics struct {
	accepted *counter // records of dropped messages, accepted
	released *counter // records of nacked messages, released
	rejected *counter // records of nacked messages, rejected at the delivery limit
	failed   *counter // acknowledgement-only transactions that did not commit
}

func newInputMetrics(mgr *service.Resources) *inputMetrics {
	return &inputMetrics{
		accepted: newCounter(mgr, "kshare_share_dropped_accepted"),
		released: newCounter(mgr, "kshare_share_nacked_released"),
		rejected: newCounter(mgr, "kshare_share_nacked_rejected"),
		failed:   newCounter(mgr, "kshare_share_ack_transactions_failed"),
	}
}

// outputMetrics count the output's transactions and the messages it could
// not cover.
type outputMetrics struct {
	committed *counter // transactions committed
	aborted   *counter // transactions aborted
	inDoubt   *counter // commits whose answer was lost (their outcome is learned)
	acked     *counter // acknowledgements committed with outputs
	skipped   *counter // messages of a delivery that had ended: not written
	uncovered *counter // messages written after their record's acknowledgement committed elsewhere
	orphans   *counter // messages without an acknowledgement
}

func newOutputMetrics(mgr *service.Resources) *outputMetrics {
	return &outputMetrics{
		committed: newCounter(mgr, "kshare_txn_transactions_committed"),
		aborted:   newCounter(mgr, "kshare_txn_transactions_aborted"),
		inDoubt:   newCounter(mgr, "kshare_txn_commits_in_doubt"),
		acked:     newCounter(mgr, "kshare_txn_acknowledgements_committed"),
		skipped:   newCounter(mgr, "kshare_txn_messages_skipped"),
		uncovered: newCounter(mgr, "kshare_txn_messages_uncovered"),
		orphans:   newCounter(mgr, "kshare_txn_messages_unacknowledged"),
	}
}

// testCreated, when a test sets it, is told of every input and output the
// plugins create, so that the test can read their counters.
var testCreated atomic.Pointer[func(any)]

func created(v any) {
	if f := testCreated.Load(); f != nil {
		(*f)(v)
	}
}
