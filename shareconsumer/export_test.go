package shareconsumer

import (
	"time"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
)

// Stage stages acks with the consumer that built them, as a transaction
// does when they join it (tests only).
func Stage(acks *kshare.ShareAcks, meta kshare.ShareGroupMetadata) error {
	set := (*acktrack.Set)(acks)
	return set.Tracker().Stage(set, acktrack.Staging{Group: meta.GroupID, Member: meta.MemberID})
}

// TopicID returns the topic id acks carry for topic (tests only).
func TopicID(acks *kshare.ShareAcks, topic string) ([16]byte, bool) {
	return (*acktrack.Set)(acks).TopicID(topic)
}

// SetUnknownTopicTimeout sets how long metadata must say that a
// subscribed topic does not exist before Poll reports it, and returns the
// function that restores it (tests only).
func SetUnknownTopicTimeout(d time.Duration) (restore func()) {
	old := unknownTopicTimeout
	unknownTopicTimeout = d
	return func() { unknownTopicTimeout = old }
}
