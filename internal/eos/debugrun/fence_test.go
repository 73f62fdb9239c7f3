package debugrun

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/eos"
	"github.com/kshare-go/kshare/producer"
)

func TestFenceThenCommit(t *testing.T) {
	c, _ := broker.NewCluster(broker.Nodes(3))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...))
	defer cl.Close()
	kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, "out")

	p1, err := producer.New(producer.SeedBrokers(c.Bootstrap()...), producer.TransactionalID("tx"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p1.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	p1.BeginTransaction()
	for i := 0; i < 10; i++ {
		p1.Produce(ctx, &kgo.Record{Topic: "out", Key: []byte(fmt.Sprint(i)), Value: []byte("dead")}, nil)
	}
	if err := p1.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p1.Client().Close()

	p2, err := producer.New(producer.SeedBrokers(c.Bootstrap()...), producer.TransactionalID("tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close(ctx)
	if err := p2.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	pid, epoch := p2.Transactions().ProducerID()
	t.Logf("p2 pid %d epoch %d", pid, epoch)
	p2.BeginTransaction()
	for i := 0; i < 10; i++ {
		p2.Produce(ctx, &kgo.Record{Topic: "out", Key: []byte(fmt.Sprint(i)), Value: []byte(eos.ID(i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := p2.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	check, err := eos.ReadCommitted(ctx, c.Bootstrap(), "out", 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", check)
	if !check.OK() {
		t.Fatal(check)
	}
}
