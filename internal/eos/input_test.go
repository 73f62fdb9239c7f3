package eos

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// bufferedHook counts the records WriteInput hands to its producer and
// runs onRecord on each.
type bufferedHook struct {
	n        atomic.Int64
	onRecord func(n int64)
}

func (h *bufferedHook) OnProduceRecordBuffered(*kgo.Record) { h.onRecord(h.n.Add(1)) }

// TestWriteInputStopsWhenCtxEnds: once ctx ends (Ctrl-C, -max-duration)
// WriteInput produces no further record and returns ctx's error; before,
// it went on through every remaining record (each failing at once), which
// took seconds per million records. The count of records handed to the
// producer (kgo calls the hook synchronously in Produce) shows it without
// timing anything; the seed broker is never reached.
func TestWriteInputStopsWhenCtxEnds(t *testing.T) {
	const n, stopAt = 100000, 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hook := &bufferedHook{onRecord: func(n int64) {
		if n == stopAt {
			cancel()
		}
	}}
	in, err := WriteInput(ctx, []string{"127.0.0.1:1"}, "input", n, 0, slog.New(slog.DiscardHandler), kgo.WithHooks(hook))
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, in)
	require.EqualValues(t, stopAt, hook.n.Load(), "records produced after ctx ended")
}
