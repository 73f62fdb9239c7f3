package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupSetup is what a run creates before it writes its input.
type groupSetup struct {
	topics        []string // created with partitions partitions each
	partitions    int32
	group         string
	lockDuration  time.Duration
	deliveryLimit int
	replication   int16 // 0 or -1: the cluster's default
}

// setup creates the topics (an existing one is used as it is) and sets the
// group's configs: earliest reset, so that records written before the
// group existed are delivered, the lock duration and the delivery limit.
func setup(ctx context.Context, cl *kgo.Client, s groupSetup) error {
	adm := kadm.NewClient(cl)
	rf := s.replication
	if rf == 0 {
		rf = -1
	}
	for _, topic := range s.topics {
		resp, err := adm.CreateTopic(ctx, s.partitions, rf, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = s.group
	for _, kv := range [][2]string{
		{"share.auto.offset.reset", "earliest"},
		{"share.record.lock.duration.ms", fmt.Sprint(s.lockDuration.Milliseconds())},
		{"share.delivery.count.limit", fmt.Sprint(s.deliveryLimit)},
	} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = kv[0], kmsg.StringPtr(kv[1])
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("group configs of %s: %w", s.group, err)
	}
	for _, r := range resp.Resources {
		if err := kerrFor(r.ErrorCode, r.ErrorMessage); err != nil {
			return fmt.Errorf("group configs of %s (lock duration %v, delivery limit %d): %w",
				s.group, s.lockDuration, s.deliveryLimit, err)
		}
	}
	return nil
}

// kerrFor turns an error code and message into an error (nil for none).
func kerrFor(code int16, msg *string) error {
	err := kerr.ErrorForCode(code)
	if err == nil || msg == nil || *msg == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, *msg)
}

// prepare connects an admin client, sets the topics and the group up and
// writes the input: n records to input, every rejectEvery-th poison. The
// caller closes the client.
func prepare(ctx context.Context, seeds []string, s groupSetup, input string, n, rejectEvery int, log *slog.Logger) (*kgo.Client, *Input, error) {
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, nil, fmt.Errorf("admin client: %w", err)
	}
	if err := setup(ctx, admin, s); err != nil {
		admin.Close()
		return nil, nil, err
	}
	log.Info("writing input", "records", n, "topic", input)
	in, err := WriteInput(ctx, seeds, input, n, rejectEvery, log)
	if err != nil {
		admin.Close()
		return nil, nil, err
	}
	return admin, in, nil
}

// finalCheck reads the group's start offsets and the committed output
// once the pipeline has stopped, even when ctx has ended (an interrupted
// run still reports), within verifyTimeout. read checks the output given
// the start offsets.
func finalCheck(ctx context.Context, adm *kadm.Client, group, input string, read func(ctx context.Context, start map[int32]int64) (Check, error)) (Check, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), verifyTimeout)
	defer cancel()
	start, err := startOffsets(ctx, adm, group, input)
	if err != nil {
		return Check{}, fmt.Errorf("verifier: %w", err)
	}
	return read(ctx, start)
}

// verifyTimeout bounds the verification after a run.
const verifyTimeout = 2 * time.Minute
