package broker

// DescribeGroups (key 15).
//
// Versions: 0-6. v3 brings authorized operations, v4 group.instance.id, v6
// GROUP_ID_NOT_FOUND (KIP-1043).
//
// Behaviour:
//   - Describes classic groups, each at its own coordinator (NOT_COORDINATOR
//     per group from any other node): state, protocol type, and the members
//     with their client id and host and (v4+) group.instance.id; a Stable
//     group also shows its protocol and each member's metadata and
//     assignment, as Kafka does.
//   - A group that does not exist is "Dead" (v0-5) or GROUP_ID_NOT_FOUND
//     (v6).
//   - With IncludeAuthorizedOperations (v3+) every group operation is
//     allowed (READ, DELETE, DESCRIBE: there are no ACLs).
//   - Share groups are described by ShareGroupDescribe, KIP-848 consumer
//     groups by ConsumerGroupDescribe: here they are not found, as on Kafka.
//
// Skipped:
//   - authorization (there are no ACLs).

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 15, min: 0, max: 6, handle: handleDescribeGroups}) }

// groupOperationsAllowed is the authorized-operations bit set of a group
// without ACLs: READ (3), DELETE (6), DESCRIBE (8).
const groupOperationsAllowed int32 = 1<<3 | 1<<6 | 1<<8

func handleDescribeGroups(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.DescribeGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	g := c.coordinators.group
	for _, name := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = name
		if req.IncludeAuthorizedOperations {
			rg.AuthorizedOperations = groupOperationsAllowed
		}
		st, err := g.shardFor(r.node.id, name)
		if err != nil {
			rg.ErrorCode = err.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		grp := st.groups[name]
		if grp == nil || grp.consumer != nil {
			rg.State = "Dead"
			if req.Version >= 6 {
				rg.ErrorCode = kerr.GroupIDNotFound.Code
				msg := "group " + name + " not found"
				rg.ErrorMessage = &msg
			}
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State = grp.state.String()
		rg.ProtocolType = grp.protocolType
		stable := grp.state == groupStable
		if stable {
			rg.Protocol = grp.protocol
		}
		for _, m := range grp.orderedMembers() {
			rm := kmsg.NewDescribeGroupsResponseGroupMember()
			rm.MemberID, rm.InstanceID, rm.ClientID, rm.ClientHost = m.id, m.instanceID, m.clientID, m.clientHost
			rm.ProtocolMetadata, rm.MemberAssignment = []byte{}, []byte{}
			if stable {
				rm.ProtocolMetadata = m.metadataFor(grp.protocol)
				rm.MemberAssignment = m.assignment
			}
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
