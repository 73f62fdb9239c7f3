package eos

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A zombie fault targets only a slot whose instances are all past
// InitTransactions: with one still starting (retrying its init while its
// coordinator is away), the fault waits, since that instance could finish
// its init after the newer one and fence it.
func TestZombieTargetWaitsForSettledSlots(t *testing.T) {
	p := newWorkerPool(Config{Workers: 2, Group: "g"}, nil, &runStats{}, nil, nil)
	require.Nil(t, p.zombieTarget(), "no instance runs yet")

	starting, polled := &instance{}, &instance{}
	polled.polledOnce.Store(true)
	p.slots[0].running[starting] = struct{}{}
	p.slots[1].running[starting] = struct{}{}
	require.Nil(t, p.zombieTarget(), "every slot has an instance still in InitTransactions")

	delete(p.slots[1].running, starting)
	p.slots[1].running[polled] = struct{}{}
	for range 20 {
		require.Same(t, p.slots[1], p.zombieTarget(), "the only settled slot")
	}
	p.slots[1].stalling.Add(1)
	require.Nil(t, p.zombieTarget(), "a slot stalled by a slow-worker fault is left alone")
}
