package broker

// Parked requests (Fetch and ShareFetch long polls) watch the partitions
// they read. Whatever changes a partition (an append, a marker, a moved log
// start, a leadership move, a deletion, a share-partition state change)
// marks it changed; after the loop finishes the event at hand, each watcher
// of a changed partition re-evaluates that one partition. A parked request
// therefore costs nothing while nothing it reads changes, and a change
// costs work proportional to the requests watching that partition, never a
// re-run of every parked request.

import "time"

// partitionWatcher is a parked request waiting on partitions.
type partitionWatcher interface {
	// partitionChanged re-evaluates the request after p changed. It may
	// answer the request (and unwatch everything) or keep waiting.
	partitionChanged(p *partition, now time.Time)
}

// watch registers w to hear of p's changes.
func (c *Cluster) watch(p *partition, w partitionWatcher) {
	if p.watchers == nil {
		p.watchers = make(map[partitionWatcher]struct{})
	}
	p.watchers[w] = struct{}{}
}

// unwatch stops w hearing of p's changes.
func (c *Cluster) unwatch(p *partition, w partitionWatcher) {
	delete(p.watchers, w)
	if len(p.watchers) == 0 {
		p.watchers = nil
	}
}

// changed marks p for its watchers; an unwatched partition costs nothing.
func (c *Cluster) changed(p *partition) {
	if len(p.watchers) == 0 || p.changedMark {
		return
	}
	p.changedMark = true
	c.changedParts = append(c.changedParts, p)
}

// settle tells the watchers of every changed partition, until no watcher
// changes anything more. It runs after every event of the loop.
func (c *Cluster) settle() {
	if len(c.changedParts) == 0 {
		return
	}
	now := time.Now()
	for len(c.changedParts) > 0 {
		p := c.changedParts[0]
		c.changedParts[0] = nil
		c.changedParts = c.changedParts[1:]
		p.changedMark = false
		for w := range p.watchers {
			c.stats.watchChecks++
			w.partitionChanged(p, now)
		}
	}
	c.changedParts = nil
}
