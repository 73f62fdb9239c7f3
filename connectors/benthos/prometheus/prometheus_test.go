package prometheus

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
)

func newTestExporter(t *testing.T, yaml string) *exporter {
	t.Helper()
	conf, err := spec().ParseYAML(yaml, service.NewEnvironment())
	require.NoError(t, err)
	e, err := newExporter(conf, nil)
	require.NoError(t, err)
	return e
}

func page(t *testing.T, e *exporter) string {
	t.Helper()
	rec := httptest.NewRecorder()
	e.HandlerFunc()(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

// TestExporterNamesAndKinds exports a counter, a gauge and a timer the
// way Benthos asks for them, with a prefix, and reads the page: names are
// sanitized and prefixed, a timer is a histogram in seconds named
// _seconds, a second request for the same metric adds to the same
// series, and a request for the same name in another shape is served by
// a metric that exports nothing, leaving the first one alone.
func TestExporterNamesAndKinds(t *testing.T) {
	e := newTestExporter(t, "prefix: kb\n")
	c1 := e.NewCounterCtor("input.received", "label", "path")("", "root.input")
	c2 := e.NewCounterCtor("input.received", "label", "path")("", "root.input")
	c1.Incr(2)
	c2.Incr(3)
	c1.Incr(-7) // a counter never decreases
	e.NewCounterCtor("input.received", "other")("x").Incr(100)
	e.NewGaugeCtor("input.received")().Set(100)
	g := e.NewGaugeCtor("in_flight", "path")("root.output")
	g.Set(4)
	e.NewTimerCtor("output_latency_ns", "path")("root.output").Timing(1_500_000_000)
	e.NewCounterCtor("9lives")().Incr(1)

	p := page(t, e)
	require.Contains(t, p, "\nkb_input_received{label=\"\",path=\"root.input\"} 5\n")
	require.NotContains(t, p, "x\"} 100")
	require.Contains(t, p, "\nkb_in_flight{path=\"root.output\"} 4\n")
	require.Contains(t, p, "# TYPE kb_output_latency_seconds histogram\n")
	require.Contains(t, p, "\nkb_output_latency_seconds_sum{path=\"root.output\"} 1.5\n")
	require.Contains(t, p, "\nkb_output_latency_seconds_count{path=\"root.output\"} 1\n")
	require.Contains(t, p, "kb_output_latency_seconds_bucket{path=\"root.output\",le=\"1.6384\"} 1\n")
	require.Contains(t, p, "kb_output_latency_seconds_bucket{path=\"root.output\",le=\"0.4096\"} 0\n")
	require.Contains(t, p, "\nkb__9lives 1\n")
	require.Equal(t, 1, strings.Count(p, "# TYPE kb_input_received "), "one family of that name")
}

// TestExporterOptions turns on the Go and process collectors and
// refuses buckets that do not increase.
func TestExporterOptions(t *testing.T) {
	e := newTestExporter(t, "add_go_metrics: true\nadd_process_metrics: true\n")
	p := page(t, e)
	require.Contains(t, p, "\ngo_goroutines ")
	require.Contains(t, p, "\nprocess_start_time_seconds ")

	conf, err := spec().ParseYAML("histogram_buckets: [ 1, 0.5 ]\n", service.NewEnvironment())
	require.NoError(t, err)
	_, err = newExporter(conf, nil)
	require.ErrorContains(t, err, "histogram_buckets: the bounds must increase")
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"input_received": "input_received",
		"a.b-c d":        "a_b_c_d",
		"9x":             "_9x",
		"ns:sub":         "ns:sub",
		"":               "_",
	} {
		require.Equal(t, want, sanitize(in, true), in)
	}
	require.Equal(t, "ns_sub", sanitize("ns:sub", false), "no colon in a label name")
}
