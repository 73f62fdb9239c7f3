package eos

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ID returns the id of input record i.
func ID(i int) string { return fmt.Sprintf("id-%09d", i) }

// WriteInput produces n records with ids ID(0)..ID(n-1) to topic, keyed by
// id so that they spread over the partitions, and returns once all are
// acknowledged. It logs progress every second.
func WriteInput(ctx context.Context, seeds []string, topic string, n int, logger *slog.Logger) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	)
	if err != nil {
		return fmt.Errorf("input producer: %w", err)
	}
	defer cl.Close()

	var (
		mu       sync.Mutex
		firstErr error
		acked    int
	)
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for i := 0; i < n; i++ {
		select {
		case <-ticker.C:
			mu.Lock()
			logger.Info("writing input", "acked", acked, "of", n)
			mu.Unlock()
		default:
		}
		id := ID(i)
		cl.Produce(ctx, &kgo.Record{Key: []byte(id), Value: []byte(id)}, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			acked++
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("input producer: flush: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		return fmt.Errorf("input producer: %w", firstErr)
	}
	return nil
}
