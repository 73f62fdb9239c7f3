package broker

// The records consumer groups write to __consumer_offsets, in the broker's
// own JSON encoding beside the classic group records (group_records.go):
//
//	key   {"v":1,"kind":"consumerGroup","group":G}
//	value {"epoch":E,"assignmentEpoch":A,"metadata":M}
//	      nil = the group is no longer of type consumer (deleted, or
//	      converted back to classic)
//
//	key   {"v":1,"kind":"consumerMember","group":G,"member":ID}
//	value {"instanceId":..,"rackId":..,"clientId":..,"clientHost":..,
//	       "rebalanceTimeoutMs":..,"assignor":..,"topics":[..],"regex":..,
//	       "state":S,"epoch":E,"prevEpoch":P,
//	       "assigned":[{"topicId":T,"partition":N,"epoch":AE}],
//	       "revoking":[..],"target":[..]}
//	      nil = the member left or was fenced
//
// A heartbeat, leave or sweep that changes a group writes, in one batch,
// the records of every member it changed (its own and those whose target
// moved) and then the group record. Replay applies them in log order; the
// members' sessions and revocation deadlines start at load time, and the
// partition owners and static members are derived from the members.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
)

const (
	groupRecordConsumerGroup  = "consumerGroup"
	groupRecordConsumerMember = "consumerMember"
)

type consumerGroupValue struct {
	Epoch           int32  `json:"epoch"`
	AssignmentEpoch int32  `json:"assignmentEpoch"`
	Metadata        string `json:"metadata"`
}

type consumerPartitionValue struct {
	TopicID   string `json:"topicId"`
	Partition int32  `json:"partition"`
	Epoch     int32  `json:"epoch"`
}

type consumerMemberValue struct {
	InstanceID         *string                  `json:"instanceId"`
	RackID             *string                  `json:"rackId"`
	ClientID           string                   `json:"clientId"`
	ClientHost         string                   `json:"clientHost"`
	RebalanceTimeoutMs int64                    `json:"rebalanceTimeoutMs"`
	Assignor           string                   `json:"assignor"`
	Topics             []string                 `json:"topics"`
	Regex              *string                  `json:"regex"`
	State              int8                     `json:"state"`
	Epoch              int32                    `json:"epoch"`
	PrevEpoch          int32                    `json:"prevEpoch"`
	Assigned           []consumerPartitionValue `json:"assigned"`
	Revoking           []consumerPartitionValue `json:"revoking"`
	Target             []consumerPartitionValue `json:"target"`
}

// consumerGroupRecord encodes a consumer group's epochs; nil is a
// tombstone.
func consumerGroupRecord(group string, cg *consumerGroup) kv {
	key := mustJSON(groupRecordKey{Version: groupRecordVersion, Kind: groupRecordConsumerGroup, Group: group})
	if cg == nil {
		return kv{key: key}
	}
	return kv{key: key, value: mustJSON(consumerGroupValue{Epoch: cg.epoch, AssignmentEpoch: cg.assignmentEpoch, Metadata: cg.metadata})}
}

// consumerMemberRecord encodes a member and its target; nil is a
// tombstone.
func consumerMemberRecord(group, id string, m *consumerMember, target cgPartitions) kv {
	key := mustJSON(groupRecordKey{Version: groupRecordVersion, Kind: groupRecordConsumerMember, Group: group, Member: id})
	if m == nil {
		return kv{key: key}
	}
	return kv{key: key, value: mustJSON(consumerMemberValue{
		InstanceID:         m.instanceID,
		RackID:             m.rackID,
		ClientID:           m.clientID,
		ClientHost:         m.clientHost,
		RebalanceTimeoutMs: m.rebalanceTimeout.Milliseconds(),
		Assignor:           m.assignor,
		Topics:             m.topics,
		Regex:              m.regex,
		State:              int8(m.state),
		Epoch:              m.epoch,
		PrevEpoch:          m.prevEpoch,
		Assigned:           encodeCGPartitions(m.assigned),
		Revoking:           encodeCGPartitions(m.revoking),
		Target:             encodeCGPartitions(target),
	})}
}

func encodeCGPartitions(s cgPartitions) []consumerPartitionValue {
	out := make([]consumerPartitionValue, 0, len(s))
	for _, tp := range s.sorted() {
		out = append(out, consumerPartitionValue{TopicID: uuidString(tp.topicID), Partition: tp.partition, Epoch: s[tp]})
	}
	return out
}

func decodeCGPartitions(vs []consumerPartitionValue) (cgPartitions, error) {
	out := make(cgPartitions, len(vs))
	for _, v := range vs {
		id, err := base64.RawURLEncoding.DecodeString(v.TopicID)
		if err != nil || len(id) != 16 {
			return nil, fmt.Errorf("bad topic id %q", v.TopicID)
		}
		out[cgTP{[16]byte(id), v.Partition}] = v.Epoch
	}
	return out, nil
}

// replayConsumerRecord applies a consumer group record while loading.
func (st *groupShard) replayConsumerRecord(key groupRecordKey, value []byte, now time.Time) error {
	switch key.Kind {
	case groupRecordConsumerGroup:
		if value == nil {
			if grp := st.groups[key.Group]; grp != nil {
				grp.consumer = nil
			}
			return nil
		}
		var v consumerGroupValue
		if err := json.Unmarshal(value, &v); err != nil {
			return fmt.Errorf("consumer group value: %w", err)
		}
		grp := st.ensureGroup(key.Group, now)
		if grp.consumer == nil {
			grp.consumer = newConsumerGroup()
		}
		grp.consumer.epoch, grp.consumer.assignmentEpoch, grp.consumer.metadata = v.Epoch, v.AssignmentEpoch, v.Metadata
		return nil
	case groupRecordConsumerMember:
		grp := st.groups[key.Group]
		if value == nil && (grp == nil || grp.consumer == nil) {
			return nil
		}
		if grp == nil {
			grp = st.ensureGroup(key.Group, now)
		}
		if grp.consumer == nil {
			// The member records of a new group precede its group
			// record in the same batch.
			grp.consumer = newConsumerGroup()
		}
		cg := grp.consumer
		if old := cg.members[key.Member]; old != nil {
			for tp, owner := range cg.owners {
				if owner == old.id {
					delete(cg.owners, tp)
				}
			}
			if old.instanceID != nil && cg.static[*old.instanceID] == old.id {
				delete(cg.static, *old.instanceID)
			}
		}
		if value == nil {
			delete(cg.members, key.Member)
			delete(cg.target, key.Member)
			return nil
		}
		m, target, err := decodeConsumerMember(key.Member, value, now)
		if err != nil {
			return err
		}
		cg.members[m.id] = m
		cg.target[m.id] = target
		if m.instanceID != nil {
			cg.static[*m.instanceID] = m.id
		}
		cg.setOwner(m, nil, nil)
		return nil
	}
	return fmt.Errorf("unknown record kind %q", key.Kind)
}

func decodeConsumerMember(id string, value []byte, now time.Time) (*consumerMember, cgPartitions, error) {
	var v consumerMemberValue
	if err := json.Unmarshal(value, &v); err != nil {
		return nil, nil, fmt.Errorf("consumer member value: %w", err)
	}
	m := &consumerMember{
		id:               id,
		instanceID:       v.InstanceID,
		rackID:           v.RackID,
		clientID:         v.ClientID,
		clientHost:       v.ClientHost,
		rebalanceTimeout: time.Duration(v.RebalanceTimeoutMs) * time.Millisecond,
		assignor:         v.Assignor,
		topics:           v.Topics,
		regex:            v.Regex,
		state:            cgMemberState(v.State),
		epoch:            v.Epoch,
		prevEpoch:        v.PrevEpoch,
		lastSeen:         now,
	}
	if m.regex != nil {
		re, err := compileSubscriptionRegex(*m.regex)
		if err != nil {
			return nil, nil, err
		}
		m.re = re // resolved at the group's next heartbeat
	}
	if m.state == cgUnrevoked {
		m.revokeBy = now.Add(m.rebalanceTimeout)
	}
	var err error
	if m.assigned, err = decodeCGPartitions(v.Assigned); err != nil {
		return nil, nil, err
	}
	if m.revoking, err = decodeCGPartitions(v.Revoking); err != nil {
		return nil, nil, err
	}
	target, err := decodeCGPartitions(v.Target)
	if err != nil {
		return nil, nil, err
	}
	return m, target, nil
}
