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
	index int // position in the heap; notArmed or firing otherwise
}

// Timer positions outside the heap.
const (
	notArmed = -1
	firing   = -2 // due in the runTimers call at hand; disarm cancels it
)

// newTimer returns a disarmed timer that runs fn on the loop when due.
func newTimer(fn func(now time.Time)) *timer { return &timer{fn: fn, index: notArmed} }

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
	t.index = notArmed
	return t
}

// arm (re)schedules t at at.
func (c *Cluster) arm(t *timer, at time.Time) {
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

// disarm cancels t if it is armed, or due in the runTimers call at hand.
func (c *Cluster) disarm(t *timer) {
	switch {
	case t == nil:
	case t.index >= 0:
		heap.Remove(&c.timers, t.index)
	case t.index == firing:
		t.index = notArmed
	}
}

// runTimers fires every timer that is due at now, earliest first. A
// callback may arm timers again, itself included; those wait for the
// loop's next turn even when already due, so a callback that finds its
// work not done yet cannot spin inside one call.
func (c *Cluster) runTimers(now time.Time) {
	var due []*timer
	for len(c.timers) > 0 && !c.timers[0].at.After(now) {
		t := heap.Pop(&c.timers).(*timer)
		t.index = firing
		due = append(due, t)
	}
	for _, t := range due {
		if t.index != firing {
			continue // disarmed or re-armed by an earlier callback of this call
		}
		t.index = notArmed
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
