package eos

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFaultHandlerDemotesOnlyWhatAFaultExplains(t *testing.T) {
	var buf bytes.Buffer
	root := newFaultHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var fault atomic.Pointer[string]
	worker := slog.New(root.component(&fault)).With("worker", 1)

	worker.Warn("producer is now unusable", "err", "PRODUCER_FENCED")
	require.Contains(t, buf.String(), "level=WARN", "nothing explains it yet")
	buf.Reset()

	name := faultZombie
	fault.Store(&name)
	worker.Warn("producer is now unusable", "err", "PRODUCER_FENCED")
	require.Contains(t, buf.String(), "level=INFO")
	require.Contains(t, buf.String(), "fault="+faultZombie)
	require.Contains(t, buf.String(), "worker=1")
	buf.Reset()

	other := slog.New(root).With("worker", 2)
	other.Warn("producer is now unusable")
	require.Contains(t, buf.String(), "level=WARN", "another worker's fault explains nothing here")
	buf.Reset()

	brokerLog := slog.New(root).With("component", "broker")
	reset := fmt.Errorf("read tcp: %w", &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET})
	brokerLog.Warn("closing connection", "err", reset)
	require.Contains(t, buf.String(), "level=WARN", "no worker was killed")
	buf.Reset()

	root.killed()
	brokerLog.Warn("closing connection", "err", reset)
	require.Contains(t, buf.String(), "level=INFO")
	require.Contains(t, buf.String(), "fault="+faultKill)
	buf.Reset()
	brokerLog.Warn("closing connection", "err", errors.New("frame too large"))
	require.Contains(t, buf.String(), "level=WARN", "only a reset connection is put down to a kill")
}

func TestFaultHandlerKeepsTheLevelFilter(t *testing.T) {
	var buf bytes.Buffer
	root := newFaultHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var fault atomic.Pointer[string]
	name := faultKill
	fault.Store(&name)
	slog.New(root.component(&fault)).Warn("closing")
	require.Empty(t, buf.String(), "an expected outcome is INFO, below the warn level")
	slog.New(root).Warn("unexpected")
	require.Contains(t, buf.String(), "level=WARN")
}
