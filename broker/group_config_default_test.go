package broker

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// GroupConfigDefault gives every group a config value it does not set
// itself; a group's own value wins, and deleting it brings the cluster's
// default back. Unknown names and refused values fail NewCluster.
func TestGroupConfigDefault(t *testing.T) {
	_, err := NewCluster(GroupConfigDefault("share.no.such.config", "1"))
	require.ErrorContains(t, err, "unknown group config")
	_, err = NewCluster(GroupConfigDefault("share.auto.offset.reset", "sideways"))
	require.ErrorContains(t, err, "share.auto.offset.reset")
	_, err = NewCluster(GroupConfigDefault("share.delivery.count.limit", "1"))
	require.ErrorContains(t, err, "not in [2, 10]")

	c := newTestCluster(t,
		GroupConfigDefault("share.auto.offset.reset", " earliest "),
		GroupConfigDefault("share.delivery.count.limit", "7"),
		ShareDeliveryLimit(3))
	cl := newTestClient(t, c)
	value := func(group, name string) string {
		d, _, err := describeGroupConfigs(t, cl, group)
		require.NoError(t, err)
		return *d[name].Value
	}
	require.Equal(t, "earliest", value("any", "share.auto.offset.reset"), "normalized like a SET")
	require.Equal(t, "7", value("any", "share.delivery.count.limit"), "GroupConfigDefault overrides ShareDeliveryLimit")

	require.NoError(t, alterGroupConfig(t, cl, "own", kmsg.IncrementalAlterConfigOpSet, "share.auto.offset.reset", "latest"))
	require.Equal(t, "latest", value("own", "share.auto.offset.reset"), "the group's own value wins")
	require.NoError(t, alterGroupConfig(t, cl, "own", kmsg.IncrementalAlterConfigOpDelete, "share.auto.offset.reset", ""))
	require.Equal(t, "earliest", value("own", "share.auto.offset.reset"), "deleting it brings the cluster default back")
	var reset shareOffsetReset
	require.NoError(t, c.do(func() { reset = c.coordinators.share.autoOffsetReset("any") }))
	require.Equal(t, shareOffsetReset{earliest: true}, reset, "the coordinator reads it")
}
