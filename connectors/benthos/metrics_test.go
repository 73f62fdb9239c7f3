package benthos

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	_ "github.com/kshare-go/kshare/connectors/benthos/prometheus"
)

// kshareCounters are the names of every counter metrics.go exports.
var kshareCounters = []string{
	"kshare_share_dropped_accepted",
	"kshare_share_nacked_released",
	"kshare_share_nacked_rejected",
	"kshare_share_ack_transactions_failed",
	"kshare_txn_transactions_committed",
	"kshare_txn_transactions_aborted",
	"kshare_txn_commits_in_doubt",
	"kshare_txn_acknowledgements_committed",
	"kshare_txn_messages_skipped",
	"kshare_txn_messages_uncovered",
	"kshare_txn_messages_unacknowledged",
}

// scrape is one Prometheus text page: the value of each series, by its
// name and labels as written ("name{label=\"\",path=\"root.output\"}").
type scrape map[string]float64

func parseScrape(t *testing.T, page string) scrape {
	t.Helper()
	s := scrape{}
	for _, line := range strings.Split(page, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "a series line: %q", line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, "the value of %q", line)
		s[line[:i]] = v
	}
	return s
}

// one returns the value of the only series of name, failing the test
// unless there is exactly one.
func (s scrape) one(t *testing.T, name string) float64 {
	t.Helper()
	var found []string
	for k := range s {
		if k == name || strings.HasPrefix(k, name+"{") {
			found = append(found, k)
		}
	}
	require.Len(t, found, 1, "series of %s", name)
	return s[found[0]]
}

// TestMetricsInPrometheusScrape runs the exactly-once pipeline with
// `metrics: prometheus: {}` and scrapes its /metrics: every kshare counter
// is there, with the input's and output's labels, those that counted
// nothing at 0, and the others at what the run did (the records the
// output committed with its transactions, the dropped ones the input
// accepted); Benthos' own metrics are there too, its timers as histograms
// in seconds.
func TestMetricsInPrometheusScrape(t *testing.T) {
	const n, every = 600, 10
	c := newCluster(t)
	r := c.newRun(t, "metrics", 2, n, every)
	is := trackInstances(t)
	yaml := strings.Replace(basicPipeline, "\n    - mapping: root = content()\n", dropPoison, 1) + "metrics:\n  prometheus: {}\n"
	b := testEnv(t, &observed{}, nil).NewStreamBuilder()
	b.SetLogger(testLogger())
	mux := http.NewServeMux()
	b.SetHTTPMux(mux)
	require.NoError(t, b.SetYAML(r.yaml(yaml)))
	s, err := b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	get := func() scrape {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Header().Get("Content-Type"), "text/plain")
		return parseScrape(t, rec.Body.String())
	}

	// Before anything was committed: every counter is there, at 0.
	waitFor(t, 30*time.Second, "the output created its counters", func() bool {
		_, ok := get()[`kshare_txn_transactions_committed{label="",path="root.output"}`]
		return ok
	})
	r.waitAcknowledged(t, 2*time.Minute)
	require.NoError(t, s.StopWithin(30*time.Second))
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("stream ended: %v", err)
	}

	got := get()
	for _, name := range kshareCounters {
		path := "root.input"
		if strings.HasPrefix(name, "kshare_txn_") {
			path = "root.output"
		}
		series := name + `{label="",path="` + path + `"}`
		_, ok := got[series]
		require.True(t, ok, "%s in the scrape", series)
	}
	require.EqualValues(t, n-n/every, got.one(t, "kshare_txn_acknowledgements_committed"), "acknowledgements committed with the outputs")
	require.EqualValues(t, n/every, got.one(t, "kshare_share_dropped_accepted"), "dropped records accepted by the input")
	require.EqualValues(t, is.out(func(m *outputMetrics) *counter { return m.committed }), got.one(t, "kshare_txn_transactions_committed"))
	require.Positive(t, got.one(t, "kshare_txn_transactions_committed"))
	require.Zero(t, got.one(t, "kshare_txn_transactions_aborted"))
	require.Zero(t, got.one(t, "kshare_share_nacked_rejected"))
	require.EqualValues(t, n, got.one(t, "input_received"), "Benthos' own counters")
	require.EqualValues(t, n-n/every, got.one(t, "output_sent"))
	require.EqualValues(t, got.one(t, "output_batch_sent"), got.one(t, "output_latency_seconds_count"), "a timer is a histogram in seconds")
}
