package broker

// WriteTxnMarkers (key 27).
//
// Versions: 0-2; an old node (OldNodes) serves 0-1 only (mixed_versions.go).
// v2 carries the marker's TransactionVersion (KIP-1228).
//
// Behaviour:
//   - The request a transaction coordinator sends each partition leader:
//     this broker's own coordinator sends v2 (v1 to a node that serves no
//     more) through c.internalRequest; tests, or another coordinator, may
//     send any version over the network.
//   - Each marker is checked against the producer's state at the leader with
//     KIP-1228's rules (partition.appendMarker): a v2 request whose marker
//     says TransactionVersion 2 gets the strict rule (markerEpoch > current;
//     equal with no open transaction is an already-written marker: success,
//     nothing written twice), a v0/v1 request or a TV0/TV1 marker the legacy
//     rule (markerEpoch >= current). The LegacyMarkerValidation debug switch
//     gives TV2 markers the legacy rule too; an old node checks every marker
//     with the legacy rule.
//   - A refused marker gets INVALID_PRODUCER_EPOCH
//     (TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch) and
//     writes nothing.
//   - A partition this node does not lead gets NOT_LEADER_OR_FOLLOWER, an
//     unknown one UNKNOWN_TOPIC_OR_PARTITION.
//   - A marker written to an internal topic is handed to the coordinator
//     that owns it (c.onMarker).
//   - Markers sent by a client (not by this broker's coordinator) count
//     against the MaxBytes budget: past it each is POLICY_VIOLATION and
//     writes nothing, as a produce would be; the coordinator's own markers
//     are always written, so that transactions can end.
//
// Skipped:
//   - the CLUSTER_ACTION authorization (there are no ACLs): any client may
//     write markers, within the budget.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 27, min: 0, max: 2, handle: handleWriteTxnMarkers}) }

// markerBatchBound bounds the size of one marker's control batch.
const markerBatchBound = batchHeaderLen + 4 + 6 + 31

func handleWriteTxnMarkers(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.WriteTxnMarkersRequest)
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	now := time.Now()
	for _, m := range req.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		check := markerCheck{
			pid:              m.ProducerID,
			epoch:            m.ProducerEpoch,
			commit:           m.Committed,
			coordinatorEpoch: m.CoordinatorEpoch,
			strict: req.Version >= 2 && m.TransactionVersion >= txnVersion2 && !c.cfg.legacyMarkerValidation &&
				!c.isOld(r.node.id),
		}
		for _, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for _, idx := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition = idx
				if r.cc != nil && !c.withinBudget(markerBatchBound) {
					// A client's markers are writes a client asks for:
					// held to MaxBytes like produce. The coordinator's
					// own (r.cc == nil) go past it to end transactions.
					rp.ErrorCode = kerr.PolicyViolation.Code
				} else if err := c.writeMarker(r.node.id, t.Topic, idx, check, now); err != nil {
					rp.ErrorCode = err.Code
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	return resp, nil
}

// writeMarker validates and writes one marker at the leader node.
func (c *Cluster) writeMarker(node int32, topicName string, index int32, check markerCheck, now time.Time) *kerr.Error {
	p := c.partitionOf(topicName, index)
	if p == nil {
		return kerr.UnknownTopicOrPartition
	}
	if err := p.checkLeader(node, -1); err != nil {
		return err
	}
	cm, written, err := p.appendMarker(check, now)
	if err != nil {
		c.logger.Info("transaction marker refused", "topic", topicName, "partition", index,
			"producer_id", check.pid, "marker_epoch", check.epoch, "strict", check.strict, "err", err)
		return err
	}
	if written && p.topic.internal {
		if fn := c.markerListeners[topicName]; fn != nil {
			fn(p, cm)
		}
	}
	return nil
}
