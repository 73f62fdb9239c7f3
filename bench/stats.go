package main

import (
	"runtime"
	"slices"
	"time"
)

// median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile returns the p-th percentile (0 < p <= 100) of ds by the
// nearest-rank method, or 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// allocMeter counts what this process allocates between start and stop.
// The clients are the only thing running in this process while a run is
// measured (the brokers are children), so the counts are theirs.
type allocMeter struct {
	mallocs, bytes uint64
}

func startAllocs() allocMeter {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return allocMeter{mallocs: ms.Mallocs, bytes: ms.TotalAlloc}
}

// per returns the allocations and bytes allocated since start, per unit.
func (a allocMeter) per(units int) (allocs, bytes float64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if units <= 0 {
		return 0, 0
	}
	return float64(ms.Mallocs-a.mallocs) / float64(units), float64(ms.TotalAlloc-a.bytes) / float64(units)
}
