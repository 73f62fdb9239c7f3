package acknowledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// On a cluster without KIP-1289, an acknowledger with a claim ledger
// commits acknowledgements and checkpoints: the consumer acknowledges the
// records after each commit. A consumer without the ledger refuses a
// ledger staging.
func TestLedgerAcknowledger(t *testing.T) {
	const inputs = 9
	e := newEnv(t, 1, inputs, broker.ShareTxnAPIs(false))
	c := e.consumer(shareconsumer.ShareLedger("claims"))
	a := e.acknowledger("ack", acknowledger.ShareLedger("claims"))

	recs := e.poll(c, inputs)
	require.NoError(t, a.CommitAcknowledgements(e.ctx, c.Acks(recs[:3], kshare.AckAccept), c.GroupMetadata()))
	require.NoError(t, a.Stage(1, c.Acks(recs[3:6], kshare.AckAccept), c.GroupMetadata()))
	require.NoError(t, a.Stage(2, c.Acks(recs[6:], kshare.AckReject), c.GroupMetadata()))
	require.NoError(t, a.CommitCheckpoint(e.ctx, 2))
	e.allDone(1, inputs)
	require.EqualValues(t, inputs, c.Metrics().LedgerAcked)

	// Without the option on the consumer, the staging is refused.
	e2 := newEnv(t, 1, 2, broker.ShareTxnAPIs(false))
	c2 := e2.consumer()
	a2 := e2.acknowledger("ack2", acknowledger.ShareLedger("claims"))
	recs2 := e2.poll(c2, 2)
	err := a2.Stage(1, c2.Acks(recs2, kshare.AckAccept), c2.GroupMetadata())
	require.ErrorIs(t, err, kshare.ErrUsage)
	require.Contains(t, err.Error(), "ShareLedger")
}
