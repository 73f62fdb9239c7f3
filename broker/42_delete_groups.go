package broker

// DeleteGroups (key 42).
//
// Versions: 0-3. v3 adds an error message to each failed group.
//
// Behaviour:
//   - Deletes groups, each at its own coordinator (NOT_COORDINATOR per group
//     from any other node).
//   - A classic or KIP-848 consumer group must have no members
//     (NON_EMPTY_GROUP); its offsets and metadata are tombstoned in
//     __consumer_offsets, so a new coordinator does not bring them back.
//   - A name that is no classic group is tried as a share group (its share
//     state is deleted by the share coordinator); neither gives
//     GROUP_ID_NOT_FOUND.
//
// Skipped:
//   - authorization.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 42, min: 0, max: 3, handle: handleDeleteGroups}) }

func handleDeleteGroups(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.DeleteGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	g := c.coordinators.group
	now := time.Now()
	for _, name := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = name
		st, err := g.shardFor(r.node.id, name)
		switch {
		case err != nil:
		case st.groups[name] != nil:
			err = g.deleteGroup(st, name, now)
		default:
			err = c.deleteShareGroup(name)
		}
		if err != nil {
			rg.ErrorCode = err.Code
			msg := err.Error()
			rg.ErrorMessage = &msg
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
