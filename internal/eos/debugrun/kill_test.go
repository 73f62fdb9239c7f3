package debugrun

import (
	"context"
	"fmt"
	"sync"

	"github.com/kshare-go/kshare/wire"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/twmb/franz-go/pkg/kgo"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/eos"
)

func TestKillOne(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, _ := broker.NewCluster(broker.Nodes(3), broker.Logger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	defer c.Close()
	var mu sync.Mutex
	var trace []string
	stop := c.ObserveRequests(func(node int32, req kmsg.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r := req.(type) {
		case *kmsg.ShareFetchRequest:
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					for _, b := range p.AcknowledgementBatches {
						trace = append(trace, fmt.Sprintf("ShareFetch member=%s ack %d-%d %v", *r.MemberID, b.FirstOffset, b.LastOffset, b.AcknowledgeTypes))
					}
				}
			}
		case *kmsg.ShareAcknowledgeRequest:
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					for _, b := range p.AcknowledgementBatches {
						trace = append(trace, fmt.Sprintf("ShareAck member=%s ack %d-%d %v", *r.MemberID, b.FirstOffset, b.LastOffset, b.AcknowledgeTypes))
					}
				}
			}
		case *wire.TxnShareAcknowledgeRequest:
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					for _, b := range p.AcknowledgementBatches {
						trace = append(trace, fmt.Sprintf("TxnShareAck member=%s pid=%d epoch=%d ack %d-%d %v", r.MemberID, r.ProducerID, r.ProducerEpoch, b.FirstOffset, b.LastOffset, b.AcknowledgeType))
					}
				}
			}
		case *kmsg.EndTxnRequest:
			trace = append(trace, fmt.Sprintf("EndTxn pid=%d epoch=%d commit=%v", r.ProducerID, r.ProducerEpoch, r.Commit))
		case *kmsg.InitProducerIDRequest:
			trace = append(trace, fmt.Sprintf("InitProducerId pid=%d epoch=%d", r.ProducerID, r.ProducerEpoch))
		case *kmsg.ShareGroupHeartbeatRequest:
			if r.MemberEpoch <= 0 {
				trace = append(trace, fmt.Sprintf("ShareGroupHeartbeat member=%s epoch=%d", r.MemberID, r.MemberEpoch))
			}
		}
	})
	defer func() {
		stop()
		mu.Lock()
		defer mu.Unlock()
		for _, l := range trace {
			fmt.Println("TRACE", l)
		}
	}()
	workers, parts := 1, int32(1)
	if os.Getenv("MULTI") != "" {
		workers, parts = 4, 6
	}
	cfg := eos.Config{Seeds: c.Bootstrap(), Input: "in", Output: "out", Group: "g", Records: 100000, Workers: workers, TxnSize: 500, Logger: logger,
		InputPartitions: parts, LockDuration: envDur("LOCK", 2*time.Second),
		Faults: eos.Faults{KillWorker: os.Getenv("F_KILL") != "", SlowWorker: os.Getenv("F_SLOW") != "", Zombie: os.Getenv("F_ZOMBIE") != "", CoordinatorMoves: os.Getenv("F_MOVE") != "", Interval: envDur("INTERVAL", 400*time.Millisecond), MaxPerKind: 1000}}
	sum, err := eos.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sum.WriteTable(os.Stdout)

}

func dumpOutput(t *testing.T, seeds []string, topic string, _ string) {
	cl, _ := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lastPid int64 = -2
	var lastEpoch int16 = -2
	var lastCtl bool
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			ctrl := r.Attrs.IsControl()
			if ctrl || r.ProducerID != lastPid || r.ProducerEpoch != lastEpoch || lastCtl {
				v := string(r.Value)
				if ctrl {
					v = fmt.Sprintf("CONTROL key=%x", r.Key)
				}
				fmt.Printf("DUMP off=%d pid=%d epoch=%d %s\n", r.Offset, r.ProducerID, r.ProducerEpoch, v)
				lastPid, lastEpoch = r.ProducerID, r.ProducerEpoch
			}
			lastCtl = ctrl
		})
	}
}

func envDur(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}
