package broker

// FindCoordinator (key 10).
//
// Versions: 0-6. v0-3 ask for one key, v4+ for a batch; v6 brings share
// keys.
//
// Behaviour:
//   - Key types 0 (group), 1 (transaction) and 2 (share:
//     "group:topicId:partition", v6+ only, as in Kafka).
//   - The answer is the node that leads the key's internal-topic partition,
//     placed by Java's String.hashCode as Kafka places it
//     (internal/javahash); any node answers for any key.
//   - Like Kafka, an empty group or transactional id is placed like any
//     other key, while an unknown key type, a share key below v6 and a share
//     key that does not parse (three parts, a non-empty group, a topic id in
//     Kafka's base64 form, a numeric partition) get INVALID_REQUEST.
//
// Skipped:
//   - COORDINATOR_LOAD_IN_PROGRESS (loading is instant here).

import (
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 10, min: 0, max: 6, handle: handleFindCoordinator}) }

func handleFindCoordinator(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	for _, key := range keys {
		rc := kmsg.NewFindCoordinatorResponseCoordinator()
		rc.Key = key
		rc.NodeID, rc.Port = -1, -1
		switch {
		case req.CoordinatorType < 0 || req.CoordinatorType > coordinatorShare:
			rc.ErrorCode = kerr.InvalidRequest.Code
		case req.CoordinatorType == coordinatorShare && (req.Version < 6 || !validShareKey(key)):
			rc.ErrorCode = kerr.InvalidRequest.Code
		default:
			n := c.nodes[c.coordinatorPartitionFor(req.CoordinatorType, key).leader]
			rc.NodeID, rc.Host, rc.Port = n.id, n.host, n.port
		}
		resp.Coordinators = append(resp.Coordinators, rc)
	}
	if req.Version < 4 {
		rc := resp.Coordinators[0]
		resp.Coordinators = nil
		resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = rc.ErrorCode, rc.NodeID, rc.Host, rc.Port
	}
	return resp, nil
}

// validShareKey reports whether key parses as Kafka's SharePartitionKey
// does: "group:topicId:partition" with a non-empty group, a topic id that
// decodes (URL-safe base64, padding allowed) to 16 bytes, and a partition
// that is a 32-bit integer.
func validShareKey(key string) bool {
	parts := strings.Split(key, ":")
	if len(parts) != 3 || parts[0] == "" || len(parts[1]) > 24 {
		return false
	}
	id, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil || len(id) != 16 {
		return false
	}
	_, err = strconv.ParseInt(parts[2], 10, 32)
	return err == nil
}
