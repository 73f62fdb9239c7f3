package brokerreview_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinWithProtocols builds a JoinGroup v3 (no MEMBER_ID_REQUIRED round)
// naming n distinct protocols with empty metadata: about 13 bytes each.
func joinWithProtocols(group string, n int) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 3
	req.Group = group
	req.SessionTimeoutMillis = 30000
	req.RebalanceTimeoutMillis = 30000
	req.ProtocolType = "consumer"
	for i := 0; i < n; i++ {
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name = fmt.Sprintf("p%06d", i)
		p.Metadata = []byte{}
		req.Protocols = append(req.Protocols, p)
	}
	return req
}

// TestJoinGroupWithManyProtocolsDoesNotFreezeTheBroker: one JoinGroup of
// under 1 MiB naming 80,000 protocols.
//
// Today: the join completes at once (one member), and selectProtocol
// (group_membership.go) checks each of the first member's protocols with
// m.supports, a linear scan of that member's protocols: O(P^2) string
// compares on the loop, 3.2e9 for P = 80,000. Every client of every node
// waits meanwhile (measured: the prober's produce waited ~20 s).
// Kafka's selectProtocol intersects sets: linear.
func TestJoinGroupWithManyProtocolsDoesNotFreezeTheBroker(t *testing.T) {
	c, pl := startCluster(t)
	p := startProber(t, c)
	rc := dial(t, c.Bootstrap()[0])
	req := joinWithProtocols("g-protocols", 80000)
	require.Less(t, len(frame(req, 1)), 1<<20)
	var resp *kmsg.JoinGroupResponse
	worst := measure(t, p, "JoinGroup with 80,000 protocols", func() {
		resp = rc.must(req).(*kmsg.JoinGroupResponse)
	})
	require.Zero(t, resp.ErrorCode)
	require.Empty(t, pl.count())
	require.Less(t, worst, freezeBound, "one JoinGroup stalled every other client")
}
