package broker

// Acknowledgements as ShareFetch, ShareAcknowledge and TxnShareAcknowledge
// carry them, checked and applied at the share-partition leader.

import (
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare/wire"
)

// shareAckBatch is one acknowledgement batch of any of the three requests.
type shareAckBatch struct {
	first, last int64
	types       []int8
}

// parseShareAcks validates acknowledgement batches: ranges in order and not
// overlapping, one type for the range or one per offset, every type one of
// allowed. Anything else is INVALID_REQUEST.
func parseShareAcks(batches []shareAckBatch, allowed func(wire.AckType) bool) ([]shareAck, error) {
	if len(batches) == 0 {
		return nil, fmt.Errorf("no acknowledgement batches")
	}
	out := make([]shareAck, 0, len(batches))
	for _, b := range batches {
		if b.first < 0 || b.first > b.last {
			return nil, fmt.Errorf("bad offset range %d-%d", b.first, b.last)
		}
		if n := int64(len(b.types)); n != 1 && n != b.last-b.first+1 {
			return nil, fmt.Errorf("%d acknowledge types for offsets %d-%d", n, b.first, b.last)
		}
		a := shareAck{first: b.first, last: b.last, types: make([]wire.AckType, len(b.types))}
		for i, t := range b.types {
			if !allowed(wire.AckType(t)) {
				return nil, fmt.Errorf("acknowledge type %v is not allowed here", wire.AckType(t))
			}
			a.types[i] = wire.AckType(t)
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first < out[j].first })
	for i := 1; i < len(out); i++ {
		if out[i].first <= out[i-1].last {
			return nil, fmt.Errorf("acknowledgement batches overlap at offset %d", out[i].first)
		}
	}
	return out, nil
}

// plainAckTypes allows KIP-932's types: GAP, ACCEPT, RELEASE, REJECT, and
// RENEW when the request says it carries renewals (KIP-1222).
func plainAckTypes(renew bool) func(wire.AckType) bool {
	return func(t wire.AckType) bool {
		return t >= wire.AckGap && t <= wire.AckReject || renew && t == wire.AckRenew
	}
}

// renews reports whether acks hold a RENEW.
func renews(acks []shareAck) bool {
	for _, a := range acks {
		for _, t := range a.types {
			if t == wire.AckRenew {
				return true
			}
		}
	}
	return false
}

// sharePartitionAt resolves a partition by topic id for a share request
// at node.
func (sc *shareCoordinator) sharePartitionAt(topicID [16]byte, index int32, node int32) (*partition, *kerr.Error) {
	t := sc.c.topicsByID[topicID]
	if t == nil {
		return nil, kerr.UnknownTopicID
	}
	if index < 0 || int(index) >= len(t.partitions) {
		return nil, kerr.UnknownTopicOrPartition
	}
	p := t.partitions[index]
	return p, p.checkLeader(node, -1)
}

// acknowledge applies one partition's acknowledgements of a member at
// node. It returns the partition's error and a message, and the partition
// (nil if unknown) for leader hints.
func (sc *shareCoordinator) acknowledge(node int32, group, member string, tp shareTP, batches []shareAckBatch, renew bool, now time.Time) (*partition, *kerr.Error, string) {
	acks, perr := parseShareAcks(batches, plainAckTypes(renew))
	if perr != nil {
		return nil, kerr.InvalidRequest, perr.Error()
	}
	p, err := sc.sharePartitionAt(tp.topicID, tp.partition, node)
	if err != nil {
		return p, err, ""
	}
	if renew && !sc.renewEnabled(group) && renews(acks) {
		return p, kerr.InvalidRecordState, "share.renew.acknowledge.enable is false for the group: RENEW is refused"
	}
	key := shareKey{group: group, topicID: tp.topicID, partition: tp.partition}
	sp, err := sc.livePartition(key, p, node, now)
	if err != nil {
		return p, err, ""
	}
	err, msg := sp.acknowledge(member, acks, sc.lockDuration(group), sc.deliveryLimit(group), now)
	sc.flush(sp, now)
	return p, err, msg
}
