package broker

// Deadlines of the run loop: one min-heap of timers for everything that
// happens at a time rather than on a request (transaction timeouts and
// expirations, group and share sessions, acquisition locks, long polls,
// retention, producer state expiry, coordinator log compaction). The loop
// sleeps until the earliest timer is due, so an idle cluster does no work
// at all, and a due sweep costs O(log n) per timer that fires: never a
// walk over all state.

import (
	"container/heap"
	"time"
)

// timer is one deadline on the loop. A timer is armed at most once: arming
// it again moves it. Only the loop touches it.
type timer struct {
	at    time.Time
	fn    func(now time.Time)
	index int    // position in the heap; -1 while disarmed
	run   uint64 // the runTimers call during which it was last armed
}

// newTimer returns a disarmed timer that runs fn on the loop when due.
func newTimer(fn func(now time.Time)) *timer { return &timer{fn: fn, index: -1} }

// armed reports whether the timer is waiting to fire.
func (t *timer) armed() bool { return t != nil && t.index >= 0 }

// timerHeap orders timers by deadline; it implements heap.Interface.
type timerHeap []*timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// arm (re)schedules t at at.
func (c *Cluster) arm(t *timer, at time.Time) {
	t.run = c.timerRun
	if t.index >= 0 {
		t.at = at
		heap.Fix(&c.timers, t.index)
		return
	}
	t.at = at
	heap.Push(&c.timers, t)
}

// armBy schedules t at at unless it is already armed no later than that:
// deadlines that only move later need no re-arming, because a timer that
// fires early finds nothing due and arms itself again.
func (c *Cluster) armBy(t *timer, at time.Time) {
	if t.armed() && !t.at.After(at) {
		return
	}
	c.arm(t, at)
}

// disarm cancels t if it is armed.
func (c *Cluster) disarm(t *timer) {
	if t.armed() {
		heap.Remove(&c.timers, t.index)
	}
}

// timerSlice bounds one runTimers call, so that a crowd of timers due at
// once (say, a hundred thousand transactional ids expiring) shares the
// loop with requests instead of holding it.
const timerSlice = 2 * time.Millisecond

// runTimers fires the timers due at now, earliest first, for at most
// timerSlice; what is left stays due and runs at the loop's next turn.
// A callback may arm timers again, itself included; one armed during this
// call waits for the next call even when already due, so a callback that
// finds its work not done yet cannot spin inside one call.
func (c *Cluster) runTimers(now time.Time) {
	c.timerRun++
	stop := time.Now().Add(timerSlice)
	for n := 1; len(c.timers) > 0; n++ {
		t := c.timers[0]
		if t.at.After(now) || t.run == c.timerRun {
			return
		}
		if n%64 == 0 && time.Now().After(stop) {
			return
		}
		heap.Pop(&c.timers)
		c.stats.timersFired++
		t.fn(now)
	}
}

// nextTimer returns the earliest deadline, if any.
func (c *Cluster) nextTimer() (time.Time, bool) {
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].at, true
}
