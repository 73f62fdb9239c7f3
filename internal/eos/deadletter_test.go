package eos

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/wire"
)

// deadCopy is the dead-letter copy of input i as a pipeline writes it.
func deadCopy(in *Input, i int, group string) *kgo.Record {
	return &kgo.Record{Topic: "dlq", Value: []byte(in.Value(i)), Headers: []kgo.RecordHeader{
		{Key: wire.DLQHeaderTopic, Value: []byte(in.Topic)},
		{Key: wire.DLQHeaderPartition, Value: []byte(strconv.Itoa(int(in.partition[i])))},
		{Key: wire.DLQHeaderOffset, Value: []byte(strconv.FormatInt(in.offset[i], 10))},
		{Key: wire.DLQHeaderGroup, Value: []byte(group)},
		{Key: wire.DLQHeaderDeliveryCount, Value: []byte("1")},
		{Key: wire.DLQHeaderMessage, Value: []byte("not an id")},
	}}
}

// The dead-letter check passes one copy per rejected input, and counts
// what is missing, repeated or wrong; copies of another run's input are
// not its business, and inputs archived at the delivery limit need none.
func TestCheckDeadLetters(t *testing.T) {
	seeds, cl, ctx := testCluster(t, broker.Nodes(1))
	_, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, "dlq")
	require.NoError(t, err)

	in := testInput(40, 5) // poison: 4, 9, ..., 39
	var recs []*kgo.Record
	for i := range in.N {
		if in.Poison(i) && i != 39 {
			recs = append(recs, deadCopy(in, i, "g"))
		}
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	ends := Endings{Archived: map[string]Archive{in.Value(39): ArchivedOnPurpose}}
	got, err := checkDeadLetters(ctx, seeds, "dlq", "g", in, allAcknowledged(in), ends, time.Second)
	require.NoError(t, err)
	require.Equal(t, DeadLetterCheck{DeadLetters: 7}, got, "39 was archived at the limit: it needs no copy")
	check := Check{Inputs: 1, Outputs: 1, DeadLetterTopic: "dlq", DeadLetterCheck: got}
	require.Equal(t, VerdictOK, NewResult(check, "", time.Second).Verdict)

	other := testInput(40, 5)
	other.Topic = "another-run"
	wrongOffset := deadCopy(in, 9, "g")
	wrongOffset.Headers[2].Value = []byte("1000")
	require.NoError(t, cl.ProduceSync(ctx,
		deadCopy(in, 4, "g"),     // a second copy
		deadCopy(in, 5, "g"),     // not rejected
		wrongOffset,              // says the wrong place
		deadCopy(other, 14, "g"), // another run's
	).FirstErr())
	got, err = checkDeadLetters(ctx, seeds, "dlq", "g", in, allAcknowledged(in), Endings{}, time.Second)
	require.NoError(t, err)
	require.Equal(t, DeadLetterCheck{DeadLetters: 10, DeadLetterMissing: 1, DeadLetterDuplicates: 1, DeadLetterWrong: 2}, got)
	check.DeadLetterCheck = got
	r := NewResult(check, "", time.Second)
	require.Equal(t, VerdictFailed, r.Verdict)
	require.Equal(t, "1 rejected inputs without a dead-letter copy, 1 duplicate dead-letter copies, 2 wrong dead-letter copies", r.Reason)
}
