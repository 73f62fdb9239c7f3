package eos

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"time"
)

// faultHandler is the root log handler of a run: a record at WARN or
// above that an injected fault explains is written at INFO instead, with
// the fault's name, so that WARN and ERROR are left for the unexpected.
// Two kinds of records are explained:
//
//   - everything the SDK clients of a worker instance log once a fault has
//     killed or superseded that instance (a fenced zombie's "producer is
//     now unusable ... PRODUCER_FENCED", say);
//   - the bundled broker's "closing connection" for a connection that a
//     client reset, soon after a fault killed a worker: a killed worker
//     drops its connections without closing them cleanly.
type faultHandler struct {
	base   slog.Handler
	shared *faultState
	// fault, if not nil, holds the name of the fault that explains
	// whatever this handler's component logs (nil until one does).
	fault *atomic.Pointer[string]
	// broker is set on the bundled broker's handler (component=broker).
	broker bool
}

// faultState is what every handler derived from one root shares.
type faultState struct {
	lastKill atomic.Int64 // unix nanoseconds of the last worker killed on purpose
}

// killWindow is how long after a worker is killed on purpose a connection
// reset at the broker is put down to it.
const killWindow = 10 * time.Second

func newFaultHandler(base slog.Handler) *faultHandler {
	return &faultHandler{base: base, shared: &faultState{}}
}

// faultLogger returns the fault-aware handler under logger, wrapping it
// in a new one if it has none.
func faultLogger(logger *slog.Logger) (*slog.Logger, *faultHandler) {
	if h, ok := logger.Handler().(*faultHandler); ok {
		return logger, h
	}
	h := newFaultHandler(logger.Handler())
	return slog.New(h), h
}

// component returns a handler for one component (a worker instance) whose
// records are all explained by the fault named in fault once it is set.
func (h *faultHandler) component(fault *atomic.Pointer[string]) *faultHandler {
	return &faultHandler{base: h.base, shared: h.shared, fault: fault}
}

// killed notes that a fault killed a worker now.
func (h *faultHandler) killed() { h.shared.lastKill.Store(time.Now().UnixNano()) }

// Enabled implements slog.Handler. A record that may be written at INFO
// after all must reach Handle, which asks the base handler again.
func (h *faultHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.base.Enabled(ctx, level)
}

// Handle implements slog.Handler.
func (h *faultHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		if name := h.explain(r); name != "" {
			r = r.Clone()
			r.Level = slog.LevelInfo
			r.AddAttrs(slog.String("fault", name), slog.Bool("expected", true))
			if !h.base.Enabled(ctx, r.Level) {
				return nil
			}
		}
	}
	return h.base.Handle(ctx, r)
}

// explain returns the name of the fault that explains r, or "".
func (h *faultHandler) explain(r slog.Record) string {
	if h.fault != nil {
		if name := h.fault.Load(); name != nil {
			return *name
		}
	}
	if !h.broker || r.Message != "closing connection" {
		return ""
	}
	last := h.shared.lastKill.Load()
	if last == 0 || time.Since(time.Unix(0, last)) > killWindow {
		return ""
	}
	reset := false
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
			reset = true
		}
		return !reset
	})
	if reset {
		return faultKill
	}
	return ""
}

// WithAttrs implements slog.Handler.
func (h *faultHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.base = h.base.WithAttrs(attrs)
	for _, a := range attrs {
		if a.Key == "component" && a.Value.String() == "broker" {
			c.broker = true
		}
	}
	return &c
}

// WithGroup implements slog.Handler.
func (h *faultHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.base = h.base.WithGroup(name)
	return &c
}

// NewLogger returns the logger the examples use: text on w from level up, where level is the value of a -log-level flag ("debug",
// "info", "warn" or "error", as slog.Level.UnmarshalText reads it). Records
// that an injected fault explains are written at INFO with the fault's
// name. An unknown level is an error that names the flag and wraps slog's.
func NewLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, flagError("log-level", level, err.Error())
	}
	return slog.New(newFaultHandler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))), nil
}
