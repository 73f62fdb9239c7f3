package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/retry"
	"github.com/kshare-go/kshare/internal/txn"
)

// metadataRetry is how soon the dispatcher looks again at a partition that
// has no known leader.
const metadataRetry = 50 * time.Millisecond

// topic returns the named topic, loading its metadata on first use for a
// record of transaction txnNum. It retries while the topic does not exist
// yet or a partition has no leader, until ctx or the transaction deadline
// ends, or the transaction is abandoned (errAbandoned: Abort or Close).
func (p *Producer) topic(ctx context.Context, name string, txnNum uint64) (*topic, error) {
	p.topicsMu.RLock()
	t := p.topics[name]
	p.topicsMu.RUnlock()
	if t != nil {
		return t, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(p.waits.of(txnNum), func() { cancel(errAbandoned) })
	defer stop()
	if dl := p.txn.Deadline(); !dl.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, dl, txn.ErrTransactionTimeout)
		defer cancel()
	}
	t, err := p.loadTopic(ctx, name)
	if err != nil && errors.Is(context.Cause(ctx), errAbandoned) {
		return nil, errAbandoned
	}
	return t, err
}

// loadTopic returns topic name, loading its metadata unless another Produce
// is loading it already, in which case it waits for that load, within
// ctx. Loads of different topics run at once: a topic that does not exist
// does not hold up the records of one that does.
func (p *Producer) loadTopic(ctx context.Context, name string) (*topic, error) {
	for {
		p.topicsMu.Lock()
		if t := p.topics[name]; t != nil {
			p.topicsMu.Unlock()
			return t, nil
		}
		loading, ok := p.loading[name]
		if !ok {
			loading = make(chan struct{})
			p.loading[name] = loading
		}
		p.topicsMu.Unlock()
		if !ok {
			t, err := p.fetchTopic(ctx, name)
			p.topicsMu.Lock()
			delete(p.loading, name)
			if err == nil {
				p.topics[name] = t
			}
			p.topicsMu.Unlock()
			close(loading)
			return t, err
		}
		select {
		case <-loading: // loaded, or that load gave up: look again
		case <-ctx.Done():
			return nil, fmt.Errorf("metadata of topic %q: %w", name, retry.CtxErr(ctx))
		}
	}
}

// fetchTopic asks for the metadata of topic name until it names a leader
// for every partition, within ctx, and returns the topic built from it.
func (p *Producer) fetchTopic(ctx context.Context, name string) (*topic, error) {
	fresh := false
	tm, err := retry.Do(ctx, func(ctx context.Context) (kmsg.MetadataResponseTopic, error) {
		m, err := p.metadata(ctx, []string{name}, fresh)
		fresh = true
		if err != nil {
			return kmsg.MetadataResponseTopic{}, err
		}
		mt := m[name]
		if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
			err = fmt.Errorf("metadata of topic %q: %w", name, err)
			if mt.ErrorCode == kerr.TopicAuthorizationFailed.Code || mt.ErrorCode == kerr.InvalidTopicException.Code {
				return mt, retry.Permanent(err)
			}
			return mt, err
		}
		if len(mt.Partitions) == 0 {
			return mt, fmt.Errorf("metadata of topic %q: no partitions: %w", name, kerr.LeaderNotAvailable)
		}
		for _, mp := range mt.Partitions {
			if mp.Leader < 0 {
				return mt, fmt.Errorf("metadata of %s/%d: %w", name, mp.Partition, kerr.LeaderNotAvailable)
			}
		}
		return mt, nil
	})
	if err != nil {
		return nil, err
	}
	part := p.cfg.partitioner
	if name == p.cfg.ledger {
		// Claims name their partition: all claims of one input
		// partition go to the ledger partition its key hashes to.
		part = kgo.ManualPartitioner()
	}
	t := &topic{name: name, id: tm.TopicID, tp: part.ForTopic(name)}
	t.mu.Lock()
	t.applyMetadataLocked(tm)
	t.mu.Unlock()
	return t, nil
}

// metadata asks for topics, from kgo's cache unless fresh.
func (p *Producer) metadata(ctx context.Context, topics []string, fresh bool) (map[string]kmsg.MetadataResponseTopic, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = p.cfg.autoCreateTopics
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	limit := time.Duration(0)
	if fresh {
		limit = time.Nanosecond
	}
	resp, err := p.cl.RequestCachedMetadata(ctx, req, limit)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	out := make(map[string]kmsg.MetadataResponseTopic, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic != nil {
			out[*t.Topic] = t
		}
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok {
			return nil, fmt.Errorf("metadata of topic %q: %w", t, kerr.UnknownTopicOrPartition)
		}
	}
	return out, nil
}

// refreshTopics reloads the leaders of topics after a leadership error,
// best effort: on failure the old leaders stay and the next retry tries
// again. New partitions of a topic become usable.
func (p *Producer) refreshTopics(names []string) {
	if len(names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.produceTimeout)
	defer cancel()
	m, err := p.metadata(ctx, names, true)
	if err != nil {
		p.cfg.conn.Logger.Debug("metadata refresh failed", "topics", names, "err", err)
		return
	}
	p.topicsMu.RLock()
	defer p.topicsMu.RUnlock()
	for _, name := range names {
		t, mt := p.topics[name], m[name]
		if t == nil || mt.ErrorCode != 0 {
			continue
		}
		t.mu.Lock()
		t.applyMetadataLocked(mt)
		t.mu.Unlock()
	}
}

// applyMetadataLocked adds the partitions that metadata counts beyond the
// known ones (Kafka never removes partitions; a new one has no leader
// until metadata names it) and stores the leader of every partition that
// metadata lists. Called with t.mu held.
func (t *topic) applyMetadataLocked(mt kmsg.MetadataResponseTopic) {
	for len(t.parts) < len(mt.Partitions) {
		part := &partition{topic: t, id: int32(len(t.parts)), seqPID: -1, seqEpoch: -1}
		part.leader.Store(-1)
		t.parts = append(t.parts, part)
	}
	for _, mp := range mt.Partitions {
		if mp.Partition >= 0 && int(mp.Partition) < len(t.parts) {
			t.parts[mp.Partition].leader.Store(mp.Leader)
		}
	}
}

// topicNames returns the names of the topics the producer has loaded.
func (p *Producer) topicNames() []string {
	p.topicsMu.RLock()
	defer p.topicsMu.RUnlock()
	names := make([]string, 0, len(p.topics))
	for n := range p.topics {
		names = append(names, n)
	}
	return names
}
