package eos

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/kshare-go/kshare/broker"
)

// LoggerFromFlag returns a logger that writes text to stderr at the level
// named by level, the value of a -log-level flag: "debug", "info", "warn"
// or "error", as slog.Level.UnmarshalText reads it. An unknown level is an
// error that names the flag and wraps slog's.
func LoggerFromFlag(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// SplitBrokers returns the addresses in s, the comma-separated value of a
// -brokers flag, with blanks trimmed and empty entries dropped; it returns
// nil when s names none.
func SplitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// ClusterFromFlag returns the seed brokers for a run from brokers, the
// value of a -brokers flag. When brokers names an external cluster, seeds
// are its addresses and closeFn does nothing; when it names none,
// ClusterFromFlag starts a 3-node bundled cluster in this process, logging
// to logger, and closeFn stops it. The caller calls closeFn once, when the
// run is over. The error is the bundled cluster's failure to start; closeFn
// is nil then.
func ClusterFromFlag(brokers string, logger *slog.Logger) (seeds []string, closeFn func(), err error) {
	if seeds = SplitBrokers(brokers); len(seeds) > 0 {
		return seeds, func() {}, nil
	}
	c, err := broker.NewCluster(broker.Nodes(3), broker.Logger(logger.With("component", "broker")))
	if err != nil {
		return nil, nil, err
	}
	return c.Bootstrap(), func() { c.Close() }, nil
}

// Report is what Run and RunCheckpoint return: a summary that prints as a
// table and ends with a verdict line.
type Report interface {
	WriteTable(w io.Writer) error
	Verdict() string
}

// WriteReport writes sum to w: as indented JSON followed by the verdict
// line when asJSON is set, as sum.WriteTable's table otherwise. The error
// is the first failed encoding or write.
func WriteReport(w io.Writer, sum Report, asJSON bool) error {
	if !asJSON {
		return sum.WriteTable(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(sum); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, sum.Verdict())
	return err
}
