package producer

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/ledger"
)

// ShareLedger names the claim ledger topic through which the producer
// makes share acknowledgements exactly-once on clusters without KIP-1289
// (Apache Kafka 4.2 and later serve what it needs: RENEW, KIP-1222).
// With it, SendShareAcksToTransaction always uses the ledger, whatever
// the cluster supports: it writes, inside the transaction, a claim for
// every accepted or rejected record, and CommitTransaction renews every
// record's lock after the claims are durable and before EndTxn (a failed
// renewal dooms the transaction: ErrAbortable), then, once committed, the
// share consumer acknowledges the records with plain ShareAcknowledge.
// Every share consumer of the group must name the same topic
// (shareconsumer.ShareLedger), or a record whose acknowledgement was lost
// after the commit is processed again. The topic is created on first use
// if missing (ledger.DefaultPartitions partitions, the cluster's default
// replication factor); a topic that cannot be created or written dooms
// the transaction. See docs/design.md, "Exactly-once without KIP-1289".
func ShareLedger(topic string) Opt { return optFunc(func(c *config) { c.ledger = topic }) }

// ledgerState is the producer's claim ledger: created or checked once.
type ledgerState struct {
	mu    sync.Mutex
	ready bool
}

// ensureLedger creates the ledger topic if it is missing, once per
// producer.
func (p *Producer) ensureLedger(ctx context.Context) error {
	p.ledger.mu.Lock()
	defer p.ledger.mu.Unlock()
	if p.ledger.ready {
		return nil
	}
	r := ledger.NewResolver(p.cl, p.cfg.ledger, "", p.cfg.conn.Logger)
	if _, err := r.Ensure(ctx, true, 0); err != nil {
		return err
	}
	p.ledger.ready = true
	return nil
}

// writeClaims produces, in the current transaction, one claim of group
// per input partition of acks (its accepted and rejected records) to the
// ledger partition that input partition's claims go to, and waits until
// each is buffered. A record that fails dooms the transaction as any
// record does, and the commit's flush reports it; a ledger that cannot be
// created or whose metadata cannot be loaded fails the call.
func (p *Producer) writeClaims(ctx context.Context, acks *acktrack.Set, group string) error {
	const op = "write claims"
	if err := p.ensureLedger(ctx); err != nil {
		return err
	}
	_, txnNum := p.txn.TxnState()
	t, err := p.topic(ctx, p.cfg.ledger, txnNum)
	if err != nil {
		return errs.Abortable(op, fmt.Errorf("ledger topic %q: %w", p.cfg.ledger, err))
	}
	t.mu.Lock()
	n := int32(len(t.parts))
	t.mu.Unlock()
	if n == 0 {
		return errs.Abortable(op, fmt.Errorf("ledger topic %q has no partitions", p.cfg.ledger))
	}
	var recs []*kgo.Record
	for _, tp := range acks.Partitions() {
		acked := acks.Records(tp)
		offs := make([]int64, len(acked))
		types := make([]int8, len(acked))
		for i, r := range acked {
			offs[i], types[i] = r.Offset, r.Type
		}
		ranges := ledger.RangesOf(offs, types)
		if len(ranges) == 0 {
			continue // only releases: nothing to claim
		}
		id, ok := acks.TopicID(tp.Topic)
		if !ok || id == ([16]byte{}) {
			it, err := p.topic(ctx, tp.Topic, txnNum)
			if err != nil {
				return errs.Abortable(op, fmt.Errorf("topic id of %q: %w", tp.Topic, err))
			}
			id = it.id
		}
		c := ledger.Claim{Group: group, Topic: tp.Topic, TopicID: id, Partition: tp.Partition, Ranges: ranges, TransactionalID: p.cfg.txnID}
		rec, err := p.claimRecord(c, n)
		if err != nil {
			return errs.Usage(op, err)
		}
		recs = append(recs, rec)
	}
	// The claims fail or succeed with the transaction: Produce dooms it
	// if one fails, and the commit's flush waits for all of them before
	// the renewals.
	for _, rec := range recs {
		p.Produce(ctx, rec, nil)
	}
	return nil
}

// claimRecord is the ledger record of c, for a ledger of n partitions.
func (p *Producer) claimRecord(c ledger.Claim, n int32) (*kgo.Record, error) {
	v, err := c.Encode()
	if err != nil {
		return nil, err
	}
	in := c.Input()
	return &kgo.Record{Topic: p.cfg.ledger, Partition: in.LedgerPartition(n), Key: []byte(in.Key()), Value: v}, nil
}
