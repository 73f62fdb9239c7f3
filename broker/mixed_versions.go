package broker

// Mixed-version clusters, from KIP-1228: "The transaction coordinator
// sends a WriteTxnMarkersRequest v2 only when both the coordinator and the
// target partition leader support version 2 ... If a coordinator supports
// version 2 but a partition leader only supports version 1, the
// coordinator will automatically fall back to sending a version 1
// request", and leaders check v0/v1 markers with the legacy rule
// (markerEpoch >= current).
//
// Nodes named by OldNodes are such leaders: they serve WriteTxnMarkers up
// to v1 (handlers.go gives every node its own versions, so ApiVersions and
// the UNSUPPORTED_VERSION check of incoming frames follow), so every
// marker they accept is checked with the legacy rule. The transaction
// coordinator learns what each leader serves as Kafka's inter-broker
// clients do: it sends the node an ApiVersions request, through the same
// handler the network uses, before its first marker request there, and
// keeps the answer for the life of the cluster (a node's versions never
// change here; Kafka's client asks again on every new connection).

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	writeTxnMarkersKey int16 = 27
	// oldNodeMarkerVersion is the newest WriteTxnMarkers an old node
	// serves: v2 is KIP-1228's.
	oldNodeMarkerVersion int16 = 1
)

// isOld reports whether node id predates KIP-1228 (OldNodes).
func (c *Cluster) isOld(id int32) bool { return c.cfg.oldNodes[id] }

// peerVersions is what the coordinator learned of each node: the newest
// WriteTxnMarkers version it serves.
type peerVersions map[int32]int16

// markerVersion returns the WriteTxnMarkers version the coordinator on
// node from sends to leader: the newest both serve. It asks leader with
// ApiVersions the first time; a node that does not answer gets v2 (the
// request then fails there and the marker is retried, asking again).
func (tc *txnCoordinator) markerVersion(from, leader int32) int16 {
	own, ok := tc.c.api(tc.c.nodeByID(from), writeTxnMarkersKey)
	if !ok {
		return 0
	}
	theirs, known := tc.peers[leader]
	if !known {
		var err error
		if theirs, err = tc.askMarkerVersion(leader); err != nil {
			tc.c.logger.Warn("ApiVersions to a partition leader failed", "node", leader, "err", err)
			return own.max
		}
		tc.peers[leader] = theirs
		tc.c.logger.Debug("learned a leader's WriteTxnMarkers versions", "node", leader, "max", theirs)
	}
	return min(own.max, theirs)
}

// askMarkerVersion sends leader an ApiVersions request and returns the
// newest WriteTxnMarkers version it advertises (-1 for none).
func (tc *txnCoordinator) askMarkerVersion(leader int32) (int16, error) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "kshare-broker", "internal"
	raw, err := tc.c.internalRequest(leader, req)
	if err != nil {
		return 0, err
	}
	for _, k := range raw.(*kmsg.ApiVersionsResponse).ApiKeys {
		if k.ApiKey == writeTxnMarkersKey {
			return k.MaxVersion, nil
		}
	}
	return -1, nil
}
