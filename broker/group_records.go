package broker

// The records the group coordinator writes to __consumer_offsets.
//
// This is the broker's own encoding, not Kafka's binary schemas. Keys and
// values are JSON objects; a nil value is a tombstone.
//
// Committed offset:
//
//	key   {"v":1,"kind":"offset","group":G,"topic":T,"partition":P}
//	value {"offset":O,"leaderEpoch":E,"metadata":M,"commitTimeMs":MS}
//	      nil = the offset was deleted (OffsetDelete, DeleteGroups)
//
// Written in a plain batch by OffsetCommit (applied at once) and in a
// transactional batch by TxnOffsetCommit (pending until the producer's
// COMMIT marker lands on the same partition; an ABORT marker discards it;
// a commit that was written after the transactional one wins).
//
// Group metadata, written when a rebalance completes (the leader's
// SyncGroup), when a group becomes empty, and when a static member's id is
// replaced:
//
//	key   {"v":1,"kind":"group","group":G}
//	value {"protocolType":..,"generation":..,"protocol":..,"leader":..,
//	       "members":[{"memberId":..,"instanceId":..,"clientId":..,
//	       "clientHost":..,"sessionTimeoutMs":..,"rebalanceTimeoutMs":..,
//	       "metadata":base64,"assignment":base64}],
//	       "currentStateTimestamp":MS}
//	      nil = the group was deleted (DeleteGroups, offset expiry)
//
// currentStateTimestamp is written for an empty group only: when it became
// empty, from which its offsets' retention counts.
//
// Replay applies the records in log order; a group loaded with members is
// Stable and its members' sessions start at load time. Consumer groups
// (KIP-848) write their own kinds of record (consumer_group_records.go).

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

const groupRecordVersion = 1

const (
	groupRecordOffset = "offset"
	groupRecordGroup  = "group"
)

type groupRecordKey struct {
	Version   int    `json:"v"`
	Kind      string `json:"kind"`
	Group     string `json:"group"`
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Member    string `json:"member,omitempty"`
}

type offsetRecordValue struct {
	Offset       int64  `json:"offset"`
	LeaderEpoch  int32  `json:"leaderEpoch"`
	Metadata     string `json:"metadata"`
	CommitTimeMs int64  `json:"commitTimeMs"`
}

type groupRecordValue struct {
	ProtocolType string              `json:"protocolType"`
	Generation   int32               `json:"generation"`
	Protocol     string              `json:"protocol"`
	Leader       string              `json:"leader"`
	Members      []groupRecordMember `json:"members"`
	// CurrentStateTimestamp is when an empty group became empty (ms), as
	// Kafka's GroupMetadataValue has it: offset retention counts from it.
	CurrentStateTimestamp int64 `json:"currentStateTimestamp,omitempty"`
}

type groupRecordMember struct {
	MemberID           string  `json:"memberId"`
	InstanceID         *string `json:"instanceId"`
	ClientID           string  `json:"clientId"`
	ClientHost         string  `json:"clientHost"`
	SessionTimeoutMs   int32   `json:"sessionTimeoutMs"`
	RebalanceTimeoutMs int32   `json:"rebalanceTimeoutMs"`
	Metadata           []byte  `json:"metadata"`
	Assignment         []byte  `json:"assignment"`
}

// mustJSON encodes the coordinator's own record types, which always encode.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("broker: encoding a group record: %v", err))
	}
	return b
}

func offsetRecord(group string, tp groupTP, o *committedOffset) kv {
	key := mustJSON(groupRecordKey{Version: groupRecordVersion, Kind: groupRecordOffset, Group: group, Topic: tp.topic, Partition: tp.partition})
	if o == nil {
		return kv{key: key}
	}
	return kv{key: key, value: mustJSON(offsetRecordValue{
		Offset:       o.offset,
		LeaderEpoch:  o.leaderEpoch,
		Metadata:     o.metadata,
		CommitTimeMs: o.commitMs,
	})}
}

// groupRecord encodes the group's membership; a nil group is a tombstone.
func groupRecord(name string, grp *classicGroup) kv {
	key := mustJSON(groupRecordKey{Version: groupRecordVersion, Kind: groupRecordGroup, Group: name})
	if grp == nil {
		return kv{key: key}
	}
	v := groupRecordValue{
		ProtocolType: grp.protocolType,
		Generation:   grp.generation,
		Protocol:     grp.protocol,
		Leader:       grp.leader,
		Members:      []groupRecordMember{},
	}
	if grp.state == groupEmpty && !grp.stateSince.IsZero() {
		v.CurrentStateTimestamp = grp.stateSince.UnixMilli()
	}
	for _, m := range grp.orderedMembers() {
		v.Members = append(v.Members, groupRecordMember{
			MemberID:           m.id,
			InstanceID:         m.instanceID,
			ClientID:           m.clientID,
			ClientHost:         m.clientHost,
			SessionTimeoutMs:   int32(m.sessionTimeout / time.Millisecond),
			RebalanceTimeoutMs: int32(m.rebalanceTimeout / time.Millisecond),
			Metadata:           m.metadataFor(grp.protocol),
			Assignment:         m.assignment,
		})
	}
	return kv{key: key, value: mustJSON(v)}
}

// tombstones returns the records deleting the group's offsets of tps, in
// topic and partition order (tps is sorted in place), and, with
// dropGroup, the group's records too.
func tombstones(grp *classicGroup, tps []groupTP, dropGroup bool) []kv {
	group := grp.name
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].topic != tps[j].topic {
			return tps[i].topic < tps[j].topic
		}
		return tps[i].partition < tps[j].partition
	})
	recs := make([]kv, 0, len(tps)+1)
	for _, tp := range tps {
		recs = append(recs, offsetRecord(group, tp, nil))
	}
	if dropGroup {
		if grp.consumer != nil {
			recs = append(recs, consumerGroupRecord(group, nil))
		}
		recs = append(recs, groupRecord(group, nil))
	}
	return recs
}

// replayBatch applies one batch of the partition's log while loading.
func (st *groupShard) replayBatch(b *storedBatch, now time.Time) error {
	recs, err := decodeRecords(b.raw)
	if err != nil {
		return err
	}
	if b.control {
		if len(recs) != 1 || len(recs[0].key) < 4 {
			return fmt.Errorf("malformed control batch at offset %d", b.base)
		}
		st.endTxn(b.pid, int16(binary.BigEndian.Uint16(recs[0].key[2:])) == controlCommit, now)
		return nil
	}
	for i, rec := range recs {
		if err := st.replayRecord(rec, b, b.base+int64(i), now); err != nil {
			return fmt.Errorf("record at offset %d: %w", b.base+int64(i), err)
		}
	}
	return nil
}

func (st *groupShard) replayRecord(rec kv, b *storedBatch, logOffset int64, now time.Time) error {
	var key groupRecordKey
	if err := json.Unmarshal(rec.key, &key); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if key.Version != groupRecordVersion {
		return fmt.Errorf("unknown record version %d", key.Version)
	}
	switch key.Kind {
	case groupRecordOffset:
		tp := groupTP{topic: key.Topic, partition: key.Partition}
		if rec.value == nil {
			if grp := st.groups[key.Group]; grp != nil {
				delete(grp.offsets, tp)
			}
			return nil
		}
		var v offsetRecordValue
		if err := json.Unmarshal(rec.value, &v); err != nil {
			return fmt.Errorf("offset value: %w", err)
		}
		o := committedOffset{offset: v.Offset, leaderEpoch: v.LeaderEpoch, metadata: v.Metadata, commitMs: v.CommitTimeMs, logOffset: logOffset}
		if b.txn {
			st.stageTxnOffset(b.pid, key.Group, tp, o, now)
			return nil
		}
		st.ensureGroup(key.Group, now).offsets[tp] = o
		return nil
	case groupRecordGroup:
		if rec.value == nil {
			delete(st.groups, key.Group)
			return nil
		}
		var v groupRecordValue
		if err := json.Unmarshal(rec.value, &v); err != nil {
			return fmt.Errorf("group value: %w", err)
		}
		grp := st.ensureGroup(key.Group, now)
		grp.restore(v, now)
		grp.record, grp.recordOffset = rec.value, logOffset
		return nil
	case groupRecordConsumerGroup, groupRecordConsumerMember:
		return st.replayConsumerRecord(key, rec.value, now)
	default:
		return fmt.Errorf("unknown record kind %q", key.Kind)
	}
}

// stageTxnOffset records a transactional offset commit until its marker.
// The group exists from then on, as it does when the commit is served.
func (st *groupShard) stageTxnOffset(pid int64, group string, tp groupTP, o committedOffset, now time.Time) {
	st.ensureGroup(group, now)
	byGroup := st.pendingTxn[pid]
	if byGroup == nil {
		byGroup = make(map[string]map[groupTP]committedOffset)
		st.pendingTxn[pid] = byGroup
	}
	offsets := byGroup[group]
	if offsets == nil {
		offsets = make(map[groupTP]committedOffset)
		byGroup[group] = offsets
	}
	offsets[tp] = o
}
