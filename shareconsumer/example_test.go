package shareconsumer_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/shareconsumer"
)

// Explicit acknowledgement: accept what was processed, release what should
// be tried again (it comes back, its delivery count raised), reject what
// can never be processed (it is archived). The group reads from the
// earliest offset, so the records written before it joined are delivered.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := broker.NewCluster() // one node, in this process
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	seeds := cluster.Bootstrap()
	writer, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		log.Fatal(err)
	}
	defer writer.Close()
	if _, err := kadm.NewClient(writer).CreateTopic(ctx, 1, 1, nil, "emails"); err != nil {
		log.Fatal(err)
	}
	for _, v := range []string{"ok-1", "retry-2", "bad-3"} {
		if err := writer.ProduceSync(ctx, &kgo.Record{Topic: "emails", Value: []byte(v)}).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}

	c, err := shareconsumer.New(
		shareconsumer.SeedBrokers(seeds...),
		shareconsumer.Group("mailer"),
		shareconsumer.Topics("emails"),
		shareconsumer.Mode(shareconsumer.Explicit),
		shareconsumer.SetGroupConfig(shareconsumer.GroupConfig{AutoOffsetReset: shareconsumer.ResetEarliest}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)

	// handle polls until n records came, marks each and commits the marks.
	handle := func(n int) {
		var recs []*kgo.Record
		for len(recs) < n {
			polled, err := c.Poll(ctx)
			if err != nil {
				log.Fatal(err) // kshare.ErrUsage: the topic does not exist, say
			}
			recs = append(recs, polled...)
		}
		slices.SortFunc(recs, func(a, b *kgo.Record) int { return int(a.Offset - b.Offset) })
		for _, r := range recs {
			n, _ := c.DeliveryCount(r)
			typ := kshare.AckAccept
			switch {
			case strings.HasPrefix(string(r.Value), "bad"):
				typ = kshare.AckReject
			case strings.HasPrefix(string(r.Value), "retry") && n == 1:
				typ = kshare.AckRelease
			}
			fmt.Printf("%s delivery %d: %s\n", r.Value, n, typ)
			if err := c.Ack(r, typ); err != nil {
				log.Fatal(err) // shareconsumer.ErrLockExpired: the record will come again
			}
		}
		if err := c.Commit(ctx); err != nil {
			log.Fatal(err) // *shareconsumer.AckError: those records come again
		}
	}
	handle(3)
	handle(1) // the released record
	// Output:
	// ok-1 delivery 1: ACCEPT
	// retry-2 delivery 1: RELEASE
	// bad-3 delivery 1: REJECT
	// retry-2 delivery 2: ACCEPT
}

// Work that may outlast a record's lock renews it, and learns whether the
// lock was extended before it acknowledges the result.
func ExampleConsumer_Renew() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := broker.NewCluster(broker.ShareLockDuration(4 * time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	seeds := cluster.Bootstrap()
	writer, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		log.Fatal(err)
	}
	defer writer.Close()
	if _, err := kadm.NewClient(writer).CreateTopic(ctx, 1, 1, nil, "videos"); err != nil {
		log.Fatal(err)
	}
	if err := writer.ProduceSync(ctx, &kgo.Record{Topic: "videos", Value: []byte("long-1")}).FirstErr(); err != nil {
		log.Fatal(err)
	}
	c, err := shareconsumer.New(
		shareconsumer.SeedBrokers(seeds...),
		shareconsumer.Group("encoders"),
		shareconsumer.Topics("videos"),
		shareconsumer.Mode(shareconsumer.Explicit),
		shareconsumer.SetGroupConfig(shareconsumer.GroupConfig{AutoOffsetReset: shareconsumer.ResetEarliest}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)

	recs, err := c.Poll(ctx)
	if err != nil {
		log.Fatal(err)
	}
	r := recs[0]
	start, _ := c.LockDeadline(r)
	// Work in three one-second steps, renewing after each: the lock (four
	// seconds here) never runs out while the work goes on.
	for range 3 {
		time.Sleep(time.Second)
		if err := c.Renew(ctx, r); err != nil {
			log.Fatal(err) // *shareconsumer.RenewError: stop, the record will come again
		}
	}
	end, _ := c.LockDeadline(r)
	fmt.Printf("%s held %v longer\n", r.Value, end.Sub(start) >= 3*time.Second)
	if err := c.Ack(r, kshare.AckAccept); err != nil {
		log.Fatal(err)
	}
	if err := c.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// long-1 held true longer
}
