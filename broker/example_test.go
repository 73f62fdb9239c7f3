package broker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/broker"
)

// A three-node cluster in the process, used by an ordinary Kafka client.
func Example() {
	c, err := broker.NewCluster(broker.Nodes(3))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.ConsumeTopics("greetings"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, "greetings"); err != nil {
		fmt.Println(err)
		return
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "greetings", Value: []byte("hello")}).FirstErr(); err != nil {
		fmt.Println(err)
		return
	}
	fetches := cl.PollFetches(ctx)
	fetches.EachRecord(func(r *kgo.Record) { fmt.Printf("%s from %s\n", r.Value, r.Topic) })

	// Leadership moves at once, as a reassignment completes in Kafka.
	if err := c.MoveLeader("greetings", 0, 2); err != nil {
		fmt.Println(err)
		return
	}
	leader, _ := c.Leader("greetings", 0)
	fmt.Println("partition 0 led by node", leader)
	// Output:
	// hello from greetings
	// partition 0 led by node 2
}
