package broker

// Share-group offset administration (AlterShareGroupOffsets,
// DeleteShareGroupOffsets): the group-level checks both share, and the
// resets they make to the share coordinator's state.

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// emptyShareGroup returns the share group named group if node coordinates
// it and it has no members: NOT_COORDINATOR, GROUP_ID_NOT_FOUND (no share
// group of that name) or NON_EMPTY_GROUP otherwise, with Kafka's message.
// create makes an empty share group of a name no group has, as Kafka's
// AlterShareGroupOffsets does.
func (sc *shareCoordinator) emptyShareGroup(node int32, group string, create bool) (*shareGroup, *kerr.Error, string) {
	if err := sc.c.groupCoordinatorError(node, group); err != nil {
		return nil, err, ""
	}
	g := sc.groups[group]
	switch {
	case g == nil:
		if st, err := sc.c.coordinators.group.shardFor(node, group); err == nil && st.groups[group] != nil {
			return nil, kerr.GroupIDNotFound, fmt.Sprintf("Group %s is not a share group.", group)
		}
		if create {
			g = &shareGroup{name: group, members: make(map[string]*shareMember)}
			sc.groups[group] = g
			sc.c.logger.Info("share group created by an offset alteration", "group", group)
			return g, nil, ""
		}
		return nil, kerr.GroupIDNotFound, fmt.Sprintf("Group %s not found.", group)
	case len(g.members) > 0:
		return nil, kerr.NonEmptyGroup, kerr.NonEmptyGroup.Description
	}
	return g, nil, ""
}

// checkOffsetsAdmin applies the group-level checks AlterShareGroupOffsets
// and DeleteShareGroupOffsets share: INVALID_GROUP_ID for the empty group
// id, then those of emptyShareGroup. It returns the error with Kafka's
// message, or nil.
func (sc *shareCoordinator) checkOffsetsAdmin(node int32, group string, create bool) (*kerr.Error, string) {
	if group == "" {
		return kerr.InvalidGroupID, kerr.InvalidGroupID.Description
	}
	_, err, msg := sc.emptyShareGroup(node, group, create)
	if err != nil && msg == "" {
		msg = err.Description
	}
	return err, msg
}

// resetShareState replaces key's share state with a fresh one starting at
// start (where share.auto.offset.reset says when start is negative): a
// tombstone, which also drops acknowledgements staged by open
// transactions, then a snapshot at the next state epoch. The live state
// at the data partition's leader goes, so that the next fetch loads the
// new one.
func (sc *shareCoordinator) resetShareState(key shareKey, p *partition, start int64, now time.Time) *kerr.Error {
	sh, err := sc.stateShard(key)
	if err != nil {
		return err
	}
	if start < 0 {
		if start, err = sc.autoOffsetReset(key.group).startOffset(p, now); err != nil {
			return err
		}
	}
	sc.dropLive(key)
	if sh.state.parts[key] != nil {
		if err := sc.writeState(key, nil, -1, -1, now); err != nil {
			return err
		}
	}
	v := &shareStateValue{Kind: shareKindSnapshot, StateEpoch: sh.state.epochs[key] + 1, StartOffset: start}
	return sc.writeState(key, v, -1, -1, now)
}

// deleteShareState tombstones the share state of every initialized
// partition of topicID in group; it reports false when there was none.
func (sc *shareCoordinator) deleteShareState(group string, topicID [16]byte, now time.Time) (bool, *kerr.Error) {
	found := false
	for _, key := range sc.shareStateKeys(group) {
		if key.topicID != topicID {
			continue
		}
		found = true
		sc.dropLive(key)
		if err := sc.writeState(key, nil, -1, -1, now); err != nil {
			return true, err
		}
	}
	return found, nil
}
