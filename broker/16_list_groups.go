package broker

// ListGroups (key 16).
//
// Versions: 0-5. v4 filters by state, v5 by group type.
//
// Behaviour:
//   - Each node lists the groups it coordinates (the groups of the
//     __consumer_offsets partitions it leads): classic groups, including
//     groups that only hold offsets (protocol type ""), KIP-848 consumer
//     groups (protocol type and group type "consumer") and share groups
//     (protocol type and group type "share").
//   - Filters by state (v4) and by group type ("classic", "consumer",
//     "share"; v5) match case-insensitively; an empty filter keeps
//     everything.
//
// Skipped:
//   - authorization.

import (
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 16, min: 0, max: 5, handle: handleListGroups}) }

func handleListGroups(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ListGroupsRequest)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	g := c.coordinators.group
	keep := func(state, groupType string) bool {
		return matchesFilter(req.StatesFilter, state) && matchesFilter(req.TypesFilter, groupType)
	}
	for key := range g.shards.loaded {
		sh, err := g.shards.lookup(key.node, key.partition)
		if key.node != r.node.id || err != nil {
			continue
		}
		for name, grp := range sh.state.groups {
			protocolType, state, groupType := grp.protocolType, grp.state.String(), "classic"
			if grp.consumer != nil {
				protocolType, state, groupType = "consumer", grp.consumer.state(), "consumer"
			}
			if !keep(state, groupType) {
				continue
			}
			lg := kmsg.NewListGroupsResponseGroup()
			lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = name, protocolType, state, groupType
			resp.Groups = append(resp.Groups, lg)
		}
	}
	for name, state := range c.shareGroupStates() {
		if _, err := g.shardFor(r.node.id, name); err != nil || !keep(state, "share") {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = name, "share", state, "share"
		resp.Groups = append(resp.Groups, lg)
	}
	sort.Slice(resp.Groups, func(i, j int) bool { return resp.Groups[i].Group < resp.Groups[j].Group })
	return resp, nil
}

func matchesFilter(filter []string, value string) bool {
	if len(filter) == 0 {
		return true
	}
	for _, f := range filter {
		if strings.EqualFold(f, value) {
			return true
		}
	}
	return false
}
