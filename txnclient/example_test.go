package txnclient_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/txnclient"
)

// A transaction that commits only share acknowledgements, driven directly
// by a Manager (package producer does the same around its records).
func Example() {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	m, err := txnclient.New(txnclient.Config{Client: cl, TransactionalID: "example"})
	if err != nil {
		panic(err)
	}
	// Close aborts whatever is left open (or learns an in-doubt commit's
	// outcome) and resolves staged acknowledgements, within its context.
	defer m.Close(ctx, nil)
	if err := m.InitProducerID(ctx, nil); err != nil {
		panic(err)
	}
	if err := m.Begin(); err != nil {
		panic(err)
	}
	// m.StageShareAcks(ctx, acks, groupMetadata) here.
	err = m.Commit(ctx, nil, nil)
	var ke *kerr.Error
	switch {
	case err == nil:
	case errors.As(err, &ke) && ke == kerr.ProducerFenced:
		fmt.Println("fenced by a newer producer")
	case errors.Is(err, txnclient.ErrAbortable):
		_ = m.Abort(ctx, nil) // and redo the work
	case errors.Is(err, txnclient.ErrInDoubt):
		// The commit's answer was lost: the abort learns the outcome.
		if errors.Is(m.Abort(ctx, nil), txnclient.ErrCommitted) {
			fmt.Println("it had committed")
		}
	}
}

// An error that leaves a commit's outcome unknown says so, and stays
// distinguishable from an abortable one.
func ExampleInDoubt() {
	err := txnclient.InDoubt("commit transaction", context.DeadlineExceeded)
	fmt.Println(errors.Is(err, txnclient.ErrInDoubt), errors.Is(err, txnclient.ErrAbortable), errors.Is(err, txnclient.ErrFatal))
	fenced := txnclient.InDoubt("commit transaction", kerr.ProducerFenced)
	fmt.Println(errors.Is(fenced, txnclient.ErrInDoubt), errors.Is(fenced, txnclient.ErrFatal))
	fmt.Println(err)
	// Output:
	// true false false
	// true true
	// kshare: commit transaction: transaction outcome in doubt: context deadline exceeded
}

// Errors are classified by sentinel, and keep their broker cause.
func ExampleClassify() {
	err := txnclient.Classify("commit transaction", kerr.ProducerFenced)
	var ke *kerr.Error
	fmt.Println(errors.Is(err, txnclient.ErrFatal), errors.Is(err, txnclient.ErrAbortable), errors.As(err, &ke), ke.Code)
	err = txnclient.Classify("produce", kerr.MessageTooLarge)
	fmt.Println(errors.Is(err, txnclient.ErrAbortable))
	fmt.Println(err)
	// Output:
	// true false true 90
	// true
	// kshare: produce: abortable transaction error: MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept
}
