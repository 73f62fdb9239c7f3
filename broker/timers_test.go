package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTimersFireInDeadlineOrderAndOnlyWhenDue(t *testing.T) {
	c := &Cluster{}
	base := time.Unix(1000, 0)
	var fired []string
	mk := func(name string) *timer { return newTimer(func(time.Time) { fired = append(fired, name) }) }
	a, b, d := mk("a"), mk("b"), mk("d")
	c.arm(a, base.Add(3*time.Second))
	c.arm(b, base.Add(1*time.Second))
	c.arm(d, base.Add(2*time.Second))
	c.arm(a, base.Add(500*time.Millisecond)) // moved earlier
	c.disarm(d)
	require.False(t, d.armed())
	c.disarm(d) // twice is harmless

	c.armBy(b, base.Add(5*time.Second)) // later: stays at 1s
	require.Equal(t, base.Add(time.Second), b.at)
	c.armBy(b, base.Add(800*time.Millisecond)) // earlier: moves
	require.Equal(t, base.Add(800*time.Millisecond), b.at)

	next, ok := c.nextTimer()
	require.True(t, ok)
	require.Equal(t, base.Add(500*time.Millisecond), next)

	c.runTimers(base.Add(700 * time.Millisecond))
	require.Equal(t, []string{"a"}, fired)
	c.runTimers(base.Add(10 * time.Second))
	require.Equal(t, []string{"a", "b"}, fired, "a disarmed timer never fires")
	_, ok = c.nextTimer()
	require.False(t, ok)
	require.Equal(t, 2, c.stats.timersFired)
}

func TestTimerArmedFromItsOwnCallbackRunsAgainWhenDue(t *testing.T) {
	c := &Cluster{}
	base := time.Unix(1000, 0)
	runs := 0
	var tm *timer
	tm = newTimer(func(now time.Time) {
		runs++
		if runs < 3 {
			c.arm(tm, now.Add(time.Second))
		}
	})
	c.arm(tm, base)
	c.runTimers(base)
	require.Equal(t, 1, runs, "re-armed in the future: not run again in this call")
	c.runTimers(base.Add(time.Hour))
	require.Equal(t, 2, runs)
	c.runTimers(base.Add(2 * time.Hour))
	require.Equal(t, 3, runs)
	require.False(t, tm.armed())
}

func TestTimerDisarmedByAnEarlierCallbackOfTheSameRunDoesNotFire(t *testing.T) {
	c := &Cluster{}
	base := time.Unix(1000, 0)
	var ran []string
	var second *timer
	first := newTimer(func(time.Time) { ran = append(ran, "first"); c.disarm(second) })
	second = newTimer(func(time.Time) { ran = append(ran, "second") })
	c.arm(first, base)
	c.arm(second, base.Add(time.Millisecond))
	c.runTimers(base.Add(time.Second))
	require.Equal(t, []string{"first"}, ran)
	require.False(t, second.armed())
}

// TestRunTimersSharesTheLoop: a crowd of due timers is fired in slices,
// and a timer re-armed for the past in its own callback waits for the next
// call instead of spinning.
func TestRunTimersSharesTheLoop(t *testing.T) {
	c := &Cluster{}
	base := time.Unix(1000, 0)
	const crowd = 500
	fired := 0
	for i := 0; i < crowd; i++ {
		c.arm(newTimer(func(time.Time) { fired++; time.Sleep(100 * time.Microsecond) }), base)
	}
	c.runTimers(base)
	require.Equal(t, 63, fired, "63 callbacks of 100µs pass the 2ms slice; the rest wait")
	for calls := 0; fired < crowd; calls++ {
		require.Less(t, calls, crowd, "every due timer fires in the end")
		c.runTimers(base)
	}

	again := 0
	var tm *timer
	tm = newTimer(func(now time.Time) { again++; c.arm(tm, now.Add(-time.Hour)) })
	c.arm(tm, base)
	c.runTimers(base)
	require.Equal(t, 1, again)
	c.runTimers(base)
	require.Equal(t, 2, again)
}

// TestTimerDueAtOnceWakesTheLoop: a timer armed for the zero time (as
// compaction arms itself, to run right after the event at hand) wakes a
// loop that has no other timer.
func TestTimerDueAtOnceWakesTheLoop(t *testing.T) {
	c := newTestCluster(t)
	fired := make(chan struct{})
	require.NoError(t, c.do(func() {
		c.arm(newTimer(func(time.Time) { close(fired) }), time.Time{})
	}))
	select {
	case <-fired:
	case <-time.After(30 * time.Second):
		t.Fatal("a timer due at once never fired")
	}
}
