package shareconsumer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/wire"
)

// releasedOffsets returns the offsets that plain ShareAcknowledge and
// ShareFetch requests of log acknowledged as RELEASE.
func releasedOffsets(log *bundled.RequestLog) map[int64]bool {
	out := map[int64]bool{}
	add := func(first, last int64, types []int8) {
		for o := first; o <= last; o++ {
			typ := types[0]
			if len(types) > 1 {
				typ = types[o-first]
			}
			if typ == int8(wire.AckRelease) {
				out[o] = true
			}
		}
	}
	for _, o := range log.Of(kmsg.ShareAcknowledge.Int16(), kmsg.ShareFetch.Int16()) {
		switch req := o.Req.(type) {
		case *kmsg.ShareAcknowledgeRequest:
			for _, t := range req.Topics {
				for _, p := range t.Partitions {
					for _, b := range p.AcknowledgementBatches {
						add(b.FirstOffset, b.LastOffset, b.AcknowledgeTypes)
					}
				}
			}
		case *kmsg.ShareFetchRequest:
			for _, t := range req.Topics {
				for _, p := range t.Partitions {
					for _, b := range p.AcknowledgementBatches {
						add(b.FirstOffset, b.LastOffset, b.AcknowledgeTypes)
					}
				}
			}
		}
	}
	return out
}

// In Transactional mode a RELEASE an application puts in a transaction is
// never sent inside it (KIP-1289 refuses RELEASE in TxnShareAcknowledge):
// once the transaction commits, the consumer gives those records back with
// a plain ShareAcknowledge, and they are delivered again; the accepted
// ones are done. What the application sees is what it saw when RELEASE
// was staged: released records come back after the commit.
func TestTransactionalReleaseGoesOutsideTheTransaction(t *testing.T) {
	const inputs = 6
	e := newEnv(t, broker.Nodes(1), broker.ShareLockDuration(10*time.Minute))
	e.createTopic("in", 1)
	e.createTopic("out", 1)
	e.groupConfig("g")
	e.produce("in", 1, values("v", inputs)...)
	c := e.consumer("g", "in", shareconsumer.Mode(shareconsumer.Transactional))
	p := e.producer("release-worker")
	recs := pollRecords(e.ctx, t, c, inputs)

	var keep, give []*kgo.Record
	for _, r := range recs {
		if r.Offset%2 == 0 {
			keep = append(keep, r)
		} else {
			give = append(give, r)
		}
	}
	log := bundled.ObserveRequests(t, e.c)
	require.NoError(t, p.BeginTransaction())
	for _, r := range keep {
		p.Produce(e.ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + string(r.Value))}, nil)
	}
	acks := c.Acks(keep, kshare.AckAccept).Merge(c.Acks(give, kshare.AckRelease))
	require.NoError(t, p.SendShareAcksToTransaction(e.ctx, acks, c.GroupMetadata()))
	require.NoError(t, p.CommitTransaction(e.ctx))

	for _, o := range log.Of(wire.TxnShareAcknowledgeKey) {
		req := o.Req.(*wire.TxnShareAcknowledgeRequest)
		for _, tp := range req.Topics {
			for _, pp := range tp.Partitions {
				for _, b := range pp.AcknowledgementBatches {
					for _, typ := range b.AcknowledgeTypes {
						require.NotEqual(t, wire.AckRelease, typ, "RELEASE inside the transaction: %+v", b)
					}
					for off := b.FirstOffset; off <= b.LastOffset; off++ {
						require.Zero(t, off%2, "offset %d was released, not staged", off)
					}
				}
			}
		}
	}
	again := pollRecords(e.ctx, t, c, len(give))
	for _, r := range again {
		require.NotZero(t, r.Offset%2, "accepted offset %d delivered again", r.Offset)
		n, _ := c.DeliveryCount(r)
		require.EqualValues(t, 2, n)
	}
	for _, r := range give {
		require.True(t, releasedOffsets(log)[r.Offset], "offset %d released with a plain acknowledgement", r.Offset)
	}
	for v := range e.readCommitted("out", len(keep)) {
		require.True(t, strings.HasPrefix(v, "out-"))
	}
}
