package broker

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// InjectFaults drops a client's connection before a request is handled
// (it never takes effect) or after (it takes effect; the answer is lost),
// runs code between handling and answering, touches only the requests the
// hook picks, and stops when told.
func TestInjectFaults(t *testing.T) {
	c := newTestCluster(t)
	ctx := testCtx(t)
	victim := newTestClient(t, c, kgo.ClientID("victim"))
	bystander := newTestClient(t, c, kgo.ClientID("bystander"))
	create := func(cl *kgo.Client, topic string) error {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
		req.Topics = append(req.Topics, rt)
		resp, err := cl.Broker(0).Request(ctx, req)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode)
	}
	exists := func(topic string) bool {
		_, err := c.Leader(topic, 0)
		return err == nil
	}

	after := make(chan int16, 10)
	stop := c.InjectFaults(func(node int32, client string, req kmsg.Request) FaultAction {
		ct, ok := req.(*kmsg.CreateTopicsRequest)
		if client != "victim" || !ok {
			return FaultAction{}
		}
		switch ct.Topics[0].Topic {
		case "dropped-request":
			return FaultAction{Fault: DropRequest}
		case "dropped-answer":
			return FaultAction{Fault: DropAnswer}
		}
		return FaultAction{AfterHandling: func(resp kmsg.Response) {
			after <- resp.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
		}}
	})
	// reconnect waits until the victim talks to the node again: kgo may
	// write its next request on the connection the node just dropped,
	// before it notices, and fail that request without sending it.
	reconnect := func() {
		for {
			_, err := victim.Broker(0).Request(ctx, kmsg.NewPtrApiVersionsRequest())
			if err == nil {
				return
			}
			require.NoError(t, ctx.Err(), "the victim never reconnected: %v", err)
		}
	}
	require.Error(t, create(victim, "dropped-request"), "the connection closed before the answer")
	require.False(t, exists("dropped-request"), "the node never saw the request")
	reconnect()
	require.Error(t, create(victim, "dropped-answer"))
	require.True(t, exists("dropped-answer"), "the node applied the request")
	reconnect()
	require.NoError(t, create(victim, "observed"))
	require.Len(t, after, 1, "AfterHandling ran once")
	require.Zero(t, <-after, "AfterHandling saw the answer")
	require.NoError(t, create(bystander, "dropped-request"), "other clients are not touched")

	stop()
	require.NoError(t, create(victim, "dropped-answer-2"))
	require.ErrorIs(t, create(victim, "dropped-answer"), kerr.TopicAlreadyExists, "no hook any more")
	require.Empty(t, after)
	require.Equal(t, "drop answer", DropAnswer.String())
}
