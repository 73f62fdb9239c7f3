package broker

// Producer state expiry (Kafka's producer.id.expiration.ms, the
// ProducerIDExpiration option): a partition forgets a producer that has
// written nothing for that long and has no open transaction there, so
// that producer ids that come and go do not accumulate. Producers without
// an open transaction sit in a list ordered by their last write (a write
// moves one to the back; opening a transaction takes it out until its
// marker), so expiry pops from the front and one timer per partition,
// armed at the front's expiry, is all it costs.

import "time"

// touchProducer records a write by ps at now.
func (p *partition) touchProducer(ps *producerState, now time.Time) {
	ps.lastWrite = now
	if ps.lru != nil {
		p.producerLRU.Remove(ps.lru)
		ps.lru = nil
	}
	if ps.txnFirst >= 0 {
		return // pinned until its transaction ends
	}
	ps.lru = p.producerLRU.PushBack(ps)
	if p.c != nil {
		p.c.armProducerExpiry(p)
	}
}

// armProducerExpiry arms p's expiry timer at the oldest producer's expiry.
func (c *Cluster) armProducerExpiry(p *partition) {
	front := p.producerLRU.Front()
	if front == nil {
		if p.producerExpiry != nil {
			c.disarm(p.producerExpiry)
		}
		return
	}
	if p.producerExpiry == nil {
		p.producerExpiry = newTimer(func(now time.Time) { c.expireProducers(p, now) })
	}
	c.armBy(p.producerExpiry, front.Value.(*producerState).lastWrite.Add(c.cfg.producerIDExpiry))
}

// expireProducers forgets the producers whose expiry has passed.
func (c *Cluster) expireProducers(p *partition, now time.Time) {
	if p.deleted {
		return
	}
	expired := 0
	for e := p.producerLRU.Front(); e != nil; e = p.producerLRU.Front() {
		ps := e.Value.(*producerState)
		if now.Sub(ps.lastWrite) < c.cfg.producerIDExpiry {
			break
		}
		p.producerLRU.Remove(e)
		ps.lru = nil
		delete(p.producers, ps.pid)
		expired++
	}
	if expired > 0 {
		c.logger.Debug("producer state expired", "topic", p.topic.name, "partition", p.index, "producers", expired)
	}
	c.armProducerExpiry(p)
}
