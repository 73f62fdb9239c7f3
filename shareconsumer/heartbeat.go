package shareconsumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/internal/retry"
)

// Group membership epochs: 0 joins, -1 leaves.
const (
	joinEpoch  int32 = 0
	leaveEpoch int32 = -1
)

// minHeartbeatInterval guards against a broker announcing a tiny interval.
const minHeartbeatInterval = 100 * time.Millisecond

// heartbeatLoop keeps the member in the group until Close: it heartbeats
// at the interval the coordinator asks for, applies new assignments,
// rejoins with epoch 0 after being fenced, and retries errors with backoff.
func (c *Consumer) heartbeatLoop() {
	defer close(c.hbDone)
	if !c.applyGroupConfig() {
		return
	}
	c.learnStartedPartitions(c.hbCtx)
	bo := retry.NewBackoff()
	subscribed := false // the coordinator has our subscription
	probed := false     // the cluster was asked whether it serves share groups
	for {
		wait, err := c.heartbeat(c.hbCtx, &subscribed)
		if c.hbCtx.Err() != nil {
			return
		}
		if err != nil {
			var ke *kerr.Error
			if !probed && !errors.As(err, &ke) {
				probed = true
				if !c.servesShareGroups() {
					return
				}
			}
			subscribed = false
			wait = bo.NextBackOff()
			c.logger.Debug("share group heartbeat failed; retrying", "err", err, "backoff", wait)
		} else {
			bo.Reset()
		}
		t := time.NewTimer(wait)
		select {
		case <-c.hbCtx.Done():
			t.Stop()
			return
		case <-c.hbWake:
		case <-t.C:
		}
		t.Stop()
	}
}

// pokeHeartbeat asks the heartbeat loop to heartbeat now.
func (c *Consumer) pokeHeartbeat() {
	select {
	case c.hbWake <- struct{}{}:
	default:
	}
}

// heartbeat sends one ShareGroupHeartbeat and applies the answer. It
// returns how long to wait before the next one.
func (c *Consumer) heartbeat(ctx context.Context, subscribed *bool) (time.Duration, error) {
	c.mu.Lock()
	epoch := c.epoch
	c.mu.Unlock()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = c.cfg.group
	req.MemberID = c.memberID
	req.MemberEpoch = epoch
	if epoch == joinEpoch || !*subscribed {
		req.SubscribedTopicNames = slices.Sorted(slices.Values(c.cfg.topics))
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return 0, fmt.Errorf("ShareGroupHeartbeat: %w", err)
	}
	if resp.ErrorCode != 0 {
		herr := fmt.Errorf("ShareGroupHeartbeat: %w%s", kerr.ErrorForCode(resp.ErrorCode), kgoclient.Detail(resp.ErrorMessage))
		switch resp.ErrorCode {
		case kerr.UnknownMemberID.Code, kerr.FencedMemberEpoch.Code, kerr.GroupIDNotFound.Code:
			c.fenced(herr)
			*subscribed = false
			return 0, nil // rejoin at once
		case kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorLoadInProgress.Code,
			kerr.RequestTimedOut.Code, kerr.NetworkException.Code, kerr.RebalanceInProgress.Code:
			return 0, herr
		default:
			c.mu.Lock()
			c.queueErrLocked(herr)
			c.mu.Unlock()
			return 0, herr
		}
	}
	*subscribed = true
	interval := max(time.Duration(resp.HeartbeatIntervalMillis)*time.Millisecond, minHeartbeatInterval)
	c.mu.Lock()
	if c.epoch != resp.MemberEpoch {
		c.logger.Debug("member epoch changed", "from", c.epoch, "to", resp.MemberEpoch)
	}
	c.epoch = resp.MemberEpoch
	var newAssignment map[[16]byte][]int32
	if resp.Assignment != nil {
		newAssignment = make(map[[16]byte][]int32, len(resp.Assignment.TopicPartitions))
		for _, t := range resp.Assignment.TopicPartitions {
			newAssignment[t.TopicID] = append(newAssignment[t.TopicID], t.Partitions...)
		}
	}
	needMeta := newAssignment != nil || len(c.unresolved) > 0 || c.leaderlessLocked() || c.missingTopicLocked()
	c.mu.Unlock()
	if !needMeta {
		return interval, nil
	}
	if err := c.refreshMetadata(ctx, false); err != nil {
		c.logger.Debug("metadata for the assignment failed", "err", err)
	}
	c.mu.Lock()
	if newAssignment != nil {
		c.unresolved = newAssignment
	}
	c.resolveAssignmentLocked(newAssignment != nil)
	c.mu.Unlock()
	return interval, nil
}

// resolveAssignmentLocked maps the assigned topic ids to names and routes
// the partitions. fresh means the coordinator sent a whole new assignment,
// which replaces the old one; otherwise newly resolved ids are added.
func (c *Consumer) resolveAssignmentLocked(fresh bool) {
	if fresh {
		clear(c.assigned)
	}
	for id, parts := range c.unresolved {
		name, ok := c.topicNames[id]
		if !ok {
			continue
		}
		for _, p := range parts {
			c.assigned[kshare.TopicPartition{Topic: name, Partition: p}] = struct{}{}
		}
		delete(c.unresolved, id)
	}
	if len(c.unresolved) > 0 {
		c.logger.Debug("assignment names topics the metadata does not know yet", "topics", len(c.unresolved))
	}
	c.routeLocked()
}

// leaderlessLocked reports whether an assigned partition has no known
// leader.
func (c *Consumer) leaderlessLocked() bool {
	for tp := range c.assigned {
		if l, ok := c.leaders[tp]; !ok || l < 0 {
			return true
		}
	}
	return false
}

// routeLocked gives every session the assigned partitions its node leads,
// starting sessions for new leaders, and wakes them all.
func (c *Consumer) routeLocked() {
	for _, s := range c.sessOrder {
		clear(s.want)
	}
	for tp := range c.assigned {
		leader, ok := c.leaders[tp]
		if !ok || leader < 0 {
			continue
		}
		if s := c.sessionLocked(leader); s != nil {
			s.want[tp] = struct{}{}
		}
	}
	for _, s := range c.sessOrder {
		s.poke()
	}
}

// fenced handles the coordinator forgetting the member. A fence releases
// nothing at the partition leaders (as on Kafka 4.4: the member keeps its
// records until its share sessions, or their connections, close), so the
// consumer closes each open share session with the final epoch, which
// releases the member's records there at once (the acknowledgements
// queued go with it), and treats every lock as gone. The member rejoins
// with epoch 0 and the same member id, and its sessions open anew.
func (c *Consumer) fenced(cause error) {
	c.mu.Lock()
	c.logger.Info("share group membership lost; releasing what the member held and rejoining", "err", cause, "epoch", c.epoch)
	c.epoch = joinEpoch
	clear(c.assigned)
	c.unresolved = nil
	var jobs []*ackJob
	for _, s := range c.sessOrder {
		if s.epoch == openEpoch {
			jobs = append(jobs, s.resetLocked(cause)...)
			continue
		}
		s.closeOnFence = true
		s.buffered = nil
		s.poke()
	}
	c.held.kill(func(*acquisition) bool { return true })
	c.routeLocked()
	c.mu.Unlock()
	err := fmt.Errorf("%w: %w", ErrLockExpired, cause)
	for _, j := range jobs {
		j.failAll(err)
	}
}

// refreshMetadata loads the subscribed topics' ids and leaders. With
// cached set, kgo's cached metadata may answer.
func (c *Consumer) refreshMetadata(ctx context.Context, cached bool) error {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range c.cfg.topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	limit := time.Duration(0) // kgo's MetadataMinAge
	if !cached {
		limit = 50 * time.Millisecond
	}
	resp, err := c.cl.RequestCachedMetadata(ctx, req, limit)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var failed []error
	var epochs []partitionEpoch
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			err = fmt.Errorf("metadata of topic %q: %w", *t.Topic, err)
			failed = append(failed, err)
			if t.ErrorCode == kerr.UnknownTopicOrPartition.Code {
				c.topicMissingLocked(*t.Topic, err, now)
			}
			continue
		}
		delete(c.missing, *t.Topic)
		c.topicIDs[*t.Topic] = t.TopicID
		c.topicNames[t.TopicID] = *t.Topic
		for _, p := range t.Partitions {
			tp := kshare.TopicPartition{Topic: *t.Topic, Partition: p.Partition}
			c.leaders[tp] = p.Leader
			epochs = append(epochs, partitionEpoch{tp, topicEpoch{t.TopicID, p.LeaderEpoch}})
		}
	}
	c.learnLeaderEpochsLocked(epochs)
	c.routeLocked()
	return errors.Join(failed...)
}

// unknownTopicTimeout is how long metadata must say that a subscribed
// topic does not exist before Poll reports it: long enough for a topic
// being created to show up everywhere, short enough that a misspelt name
// does not look like an idle topic.
var unknownTopicTimeout = 5 * time.Second

// missingTopic is a subscribed topic that metadata says does not exist.
type missingTopic struct {
	since    time.Time // first answer that said so
	reported bool      // Poll was told
}

// topicMissingLocked records that metadata said topic does not exist, and
// reports it to Poll once it has said so for unknownTopicTimeout.
func (c *Consumer) topicMissingLocked(topic string, err error, now time.Time) {
	m, ok := c.missing[topic]
	if !ok {
		m = &missingTopic{since: now}
		c.missing[topic] = m
	}
	if !m.reported && now.Sub(m.since) >= unknownTopicTimeout {
		m.reported = true
		c.queueErrLocked(fmt.Errorf("subscribed topic %q does not exist (metadata has said so for %v): %w", topic, now.Sub(m.since).Round(time.Millisecond), err))
	}
}

// missingTopicLocked reports whether a subscribed topic has no known id:
// metadata must be asked again until it exists.
func (c *Consumer) missingTopicLocked() bool {
	for _, t := range c.cfg.topics {
		if _, ok := c.topicIDs[t]; !ok {
			return true
		}
	}
	return false
}

// refreshMeta is the session's metadata step after a leadership error.
func (s *session) refreshMeta() {
	ctx, cancel := context.WithTimeout(s.c.bgCtx, requestGrace)
	defer cancel()
	if err := s.c.refreshMetadata(ctx, false); err != nil {
		s.c.logger.Debug("metadata refresh failed", "err", err)
		s.c.mu.Lock()
		s.needMeta = true
		s.backoffLocked(time.Now())
		s.c.mu.Unlock()
	}
}

// leave sends the heartbeat that leaves the group (epoch -1); the
// coordinator then releases whatever the member still holds.
func (c *Consumer) leave(ctx context.Context) error {
	c.mu.Lock()
	epoch := c.epoch
	c.mu.Unlock()
	if epoch == joinEpoch {
		return nil
	}
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = c.cfg.group
	req.MemberID = c.memberID
	req.MemberEpoch = leaveEpoch
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return fmt.Errorf("leave share group: %w", err)
	}
	// A member or group that is already gone has nothing left to leave.
	switch resp.ErrorCode {
	case kerr.UnknownMemberID.Code, kerr.GroupIDNotFound.Code:
		return nil
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("leave share group: %w%s", err, kgoclient.Detail(resp.ErrorMessage))
	}
	return nil
}

// servesShareGroups asks the cluster, after a heartbeat failed without a
// broker error (kgo refuses a request the broker does not advertise),
// whether it serves ShareGroupHeartbeat at all. If it does not, every
// Poll fails with kshare.ErrUnsupported from now on and it returns false.
// An unanswered question counts as yes: the heartbeat loop retries.
func (c *Consumer) servesShareGroups() bool {
	ctx, cancel := context.WithTimeout(c.hbCtx, requestGrace)
	defer cancel()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName = "kshare"
	req.ClientSoftwareVersion = "0"
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil || resp.ErrorCode != 0 {
		return true
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == kmsg.ShareGroupHeartbeat.Int16() {
			return true
		}
	}
	c.mu.Lock()
	c.stickLocked(errs.Unsupported("poll", errors.New("the cluster does not serve share groups (KIP-932): ShareGroupHeartbeat is not advertised")))
	c.mu.Unlock()
	return false
}
