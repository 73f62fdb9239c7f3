// Package prometheus is a Benthos metrics exporter named "prometheus": it
// keeps every metric of a Benthos process (its components' own and those
// of plugins, such as kshare's kshare_share and kshare_txn counters) in a
// Prometheus registry, and serves the registry in Prometheus' text format
// on the /metrics (and /stats) endpoint of Benthos' HTTP server.
//
// Benthos' open core (v4.60) ships no Prometheus exporter; kshare-benthos
// imports this package, which makes it the default metrics exporter
// (Benthos picks "prometheus" as the default when one is registered).
// Importing it registers the exporter in Benthos' global environment;
// Register is for programs that build their own environment.
//
// Counters and gauges keep their Benthos names. Timers, which Benthos
// measures in nanoseconds and names with the suffix _ns, are histograms
// in seconds named with _seconds in place of _ns (output_latency_ns
// becomes output_latency_seconds). Characters that Prometheus does not
// allow in a name become underscores.
package prometheus

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// Name is the name the exporter registers under.
const Name = "prometheus"

// The exporter's fields.
const (
	fPrefix         = "prefix"
	fBuckets        = "histogram_buckets"
	fProcessMetrics = "add_process_metrics"
	fGoMetrics      = "add_go_metrics"
)

func init() {
	if err := Register(service.GlobalEnvironment()); err != nil {
		panic(err)
	}
}

// Register registers the exporter in env. It fails if env has a metrics
// exporter of this name.
func Register(env *service.Environment) error {
	return env.RegisterMetricsExporter(Name, spec(), func(conf *service.ParsedConfig, log *service.Logger) (service.MetricsExporter, error) {
		return newExporter(conf, log)
	})
}

func spec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Stable().
		Summary("Serves every metric of the process in Prometheus' text format on the `/metrics` endpoint of the HTTP server (`http.address`).").
		Description(`
Counters and gauges keep their names. Timers (measured in nanoseconds, named
with the suffix `+"`_ns`"+`) are histograms in seconds, named with `+"`_seconds`"+` in place
of `+"`_ns`"+`: `+"`output_latency_ns`"+` is served as `+"`output_latency_seconds`"+`. Characters that
Prometheus does not allow in a metric name become underscores.

Scrape it with a Prometheus job whose target is the HTTP server's address, for
example `+"`127.0.0.1:4195`"+` (path `+"`/metrics`"+`).`).
		Fields(
			service.NewStringField(fPrefix).
				Description("Prepended to the name of every metric, followed by an underscore. Empty: no prefix.").
				Default(""),
			service.NewFloatListField(fBuckets).
				Description("The upper bounds, in seconds, of the buckets of the timers' histograms.").
				Default(defaultBuckets()).Advanced(),
			service.NewBoolField(fProcessMetrics).
				Description("Also serve the process's own metrics (CPU, memory, file descriptors: `process_*`).").
				Default(false).Advanced(),
			service.NewBoolField(fGoMetrics).
				Description("Also serve the Go runtime's metrics (`go_*`).").
				Default(false).Advanced(),
		)
}

// defaultBuckets spans 100µs to about 100s, in seconds: the latency of
// a message through a pipeline, and of a transaction's commit.
func defaultBuckets() []any {
	var out []any
	for _, b := range prometheus.ExponentialBuckets(0.0001, 4, 11) {
		out = append(out, b)
	}
	return out
}

// exporter is a Benthos MetricsExporter backed by a Prometheus registry.
type exporter struct {
	reg     *prometheus.Registry
	handler http.Handler
	prefix  string
	buckets []float64
	log     *service.Logger

	mu     sync.Mutex
	vecs   map[string]*family // by exported name
	warned map[string]bool
}

// family is one registered metric: its kind and label keys, which every
// later request for the same name must match.
type family struct {
	kind   string
	labels []string
	vec    any // *prometheus.CounterVec, *prometheus.GaugeVec or *prometheus.HistogramVec
}

func newExporter(conf *service.ParsedConfig, log *service.Logger) (*exporter, error) {
	e := &exporter{
		reg:    prometheus.NewRegistry(),
		log:    log,
		vecs:   make(map[string]*family),
		warned: make(map[string]bool),
	}
	var err error
	if e.prefix, err = conf.FieldString(fPrefix); err != nil {
		return nil, err
	}
	if e.prefix != "" {
		e.prefix = sanitize(e.prefix, true) + "_"
	}
	if e.buckets, err = conf.FieldFloatList(fBuckets); err != nil {
		return nil, err
	}
	for i, b := range e.buckets {
		if i > 0 && b <= e.buckets[i-1] {
			return nil, fmt.Errorf("%s: the bounds must increase, got %v after %v", fBuckets, b, e.buckets[i-1])
		}
	}
	process, err := conf.FieldBool(fProcessMetrics)
	if err != nil {
		return nil, err
	}
	if process {
		e.reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	goMetrics, err := conf.FieldBool(fGoMetrics)
	if err != nil {
		return nil, err
	}
	if goMetrics {
		e.reg.MustRegister(collectors.NewGoCollector())
	}
	e.handler = promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{})
	return e, nil
}

// HandlerFunc is what Benthos' HTTP server serves on /metrics and /stats.
func (e *exporter) HandlerFunc() http.HandlerFunc {
	return e.handler.ServeHTTP
}

// Close implements service.MetricsExporter; the registry holds nothing to
// release.
func (e *exporter) Close(context.Context) error { return nil }

func (e *exporter) NewCounterCtor(name string, labelKeys ...string) service.MetricsExporterCounterCtor {
	v, ok := e.family(e.prefix+sanitize(name, true), "counter", labelKeys, func(n string, ls []string) (prometheus.Collector, any) {
		cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: n, Help: "Benthos counter " + name + "."}, ls)
		return cv, cv
	})
	if !ok {
		return func(...string) service.MetricsExporterCounter { return nop{} }
	}
	cv := v.(*prometheus.CounterVec)
	return func(labelValues ...string) service.MetricsExporterCounter {
		return counter{cv.WithLabelValues(labelValues...)}
	}
}

func (e *exporter) NewGaugeCtor(name string, labelKeys ...string) service.MetricsExporterGaugeCtor {
	v, ok := e.family(e.prefix+sanitize(name, true), "gauge", labelKeys, func(n string, ls []string) (prometheus.Collector, any) {
		gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: n, Help: "Benthos gauge " + name + "."}, ls)
		return gv, gv
	})
	if !ok {
		return func(...string) service.MetricsExporterGauge { return nop{} }
	}
	gv := v.(*prometheus.GaugeVec)
	return func(labelValues ...string) service.MetricsExporterGauge {
		return gauge{gv.WithLabelValues(labelValues...)}
	}
}

func (e *exporter) NewTimerCtor(name string, labelKeys ...string) service.MetricsExporterTimerCtor {
	exported := e.prefix + sanitize(strings.TrimSuffix(name, "_ns"), true) + "_seconds"
	v, ok := e.family(exported, "histogram", labelKeys, func(n string, ls []string) (prometheus.Collector, any) {
		hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: n, Help: "Benthos timer " + name + ", in seconds.", Buckets: e.buckets}, ls)
		return hv, hv
	})
	if !ok {
		return func(...string) service.MetricsExporterTimer { return nop{} }
	}
	hv := v.(*prometheus.HistogramVec)
	return func(labelValues ...string) service.MetricsExporterTimer {
		return timer{hv.WithLabelValues(labelValues...)}
	}
}

// family returns the vector registered as name, registering the one that
// build makes the first time. A later request for the name with another
// kind or other label keys cannot be served (Prometheus refuses two
// shapes for one name), nor can a name the registry refuses (one of the
// Go or process collectors'): it gets false, and a warning says so once
// per name.
func (e *exporter) family(name, kind string, labelKeys []string, build func(name string, labels []string) (prometheus.Collector, any)) (any, bool) {
	labels := make([]string, len(labelKeys))
	for i, k := range labelKeys {
		labels[i] = sanitize(k, false)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if f, ok := e.vecs[name]; ok {
		if f.kind == kind && slices.Equal(f.labels, labels) {
			return f.vec, true
		}
		e.warnLocked(name, fmt.Errorf("already a %s with labels %v, now asked for a %s with labels %v", f.kind, f.labels, kind, labels))
		return nil, false
	}
	c, vec := build(name, labels)
	if err := e.reg.Register(c); err != nil {
		e.warnLocked(name, err)
		return nil, false
	}
	e.vecs[name] = &family{kind: kind, labels: labels, vec: vec}
	return vec, true
}

func (e *exporter) warnLocked(name string, err error) {
	if e.warned[name] {
		return
	}
	e.warned[name] = true
	if e.log != nil {
		e.log.Warnf("prometheus: metric %s is not exported: %v", name, err)
	}
}

// sanitize makes s a valid Prometheus metric name (colons allowed) or
// label name: every other character becomes an underscore, and a leading
// digit gets an underscore before it.
func sanitize(s string, metric bool) string {
	var b strings.Builder
	for i, r := range s {
		ok := r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || (i > 0 && r >= '0' && r <= '9') || (metric && r == ':')
		switch {
		case ok:
			b.WriteRune(r)
		case i == 0 && r >= '0' && r <= '9':
			b.WriteByte('_')
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

type counter struct{ c prometheus.Counter }

// Incr adds n; a counter never decreases, and Prometheus panics on a
// negative n, so that is ignored.
func (c counter) Incr(n int64) {
	if n >= 0 {
		c.c.Add(float64(n))
	}
}

func (c counter) IncrFloat64(n float64) {
	if n >= 0 {
		c.c.Add(n)
	}
}

type gauge struct{ g prometheus.Gauge }

func (g gauge) Set(v int64) { g.g.Set(float64(v)) }

func (g gauge) SetFloat64(v float64) { g.g.Set(v) }

type timer struct{ h prometheus.Observer }

func (t timer) Timing(ns int64) { t.h.Observe(float64(ns) / 1e9) }

// nop serves a metric that cannot be exported.
type nop struct{}

func (nop) Incr(int64)   {}
func (nop) Set(int64)    {}
func (nop) Timing(int64) {}
