package kshare_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/broker"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/testkit"
	"github.com/kshare-go/kshare/internal/testkit/bundled"
	"github.com/kshare-go/kshare/producer"
	"github.com/kshare-go/kshare/shareconsumer"
	"github.com/kshare-go/kshare/wire"
)

// exportedErrors is every exported error of every package, by package and
// name, and the one class it belongs to.
var exportedErrors = map[string]map[string]struct {
	err   error
	class error
}{
	".": {
		"ErrAbortable":   {kshare.ErrAbortable, kshare.ErrAbortable},
		"ErrInDoubt":     {kshare.ErrInDoubt, kshare.ErrInDoubt},
		"ErrCommitted":   {kshare.ErrCommitted, kshare.ErrCommitted},
		"ErrFatal":       {kshare.ErrFatal, kshare.ErrFatal},
		"ErrUnsupported": {kshare.ErrUnsupported, kshare.ErrUnsupported},
		"ErrUsage":       {kshare.ErrUsage, kshare.ErrUsage},
		"ErrClosed":      {kshare.ErrClosed, kshare.ErrClosed},
	},
	"shareconsumer": {
		"ErrLockExpired": {shareconsumer.ErrLockExpired, kshare.ErrAbortable},
		"ErrNotHeld":     {shareconsumer.ErrNotHeld, kshare.ErrUsage},
		"AckError":       {&shareconsumer.AckError{}, kshare.ErrAbortable},
		"RenewError":     {&shareconsumer.RenewError{}, kshare.ErrAbortable},
	},
	"producer":     {},
	"acknowledger": {},
	"wire": {
		"ErrMalformed": {wire.ErrMalformed, kshare.ErrUnsupported},
	},
	"broker": {
		"ErrClosed": {broker.ErrClosed, kshare.ErrClosed},
	},
}

// TestEveryExportedErrorHasOneClass checks the table above against the
// source: every exported error variable (Err...) and every exported type
// with an Error method is in it, and matches exactly its class.
func TestEveryExportedErrorHasOneClass(t *testing.T) {
	for pkg, table := range exportedErrors {
		found := exportedErrorNames(t, pkg)
		listed := []string{}
		for name, e := range table {
			listed = append(listed, name)
			require.Equal(t, []error{e.class}, errs.ClassesOf(e.err), "%s.%s", pkg, name)
			require.ErrorIs(t, e.err, e.class, "%s.%s", pkg, name)
		}
		sort.Strings(listed)
		require.Equal(t, found, listed, "package %s: the table must list every exported error", pkg)
	}
}

// exportedErrorNames parses the non-test files of package dir and returns
// the names of its exported error variables and error types, sorted.
func exportedErrorNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	out := []string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		file, err := parser.ParseFile(fset, f, src, 0)
		require.NoError(t, err)
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				if d.Tok != token.VAR {
					continue
				}
				for _, s := range d.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						if n.IsExported() && strings.HasPrefix(n.Name, "Err") {
							out = append(out, n.Name)
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil || d.Name.Name != "Error" {
					continue
				}
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if id, ok := typ.(*ast.Ident); ok && id.IsExported() {
					out = append(out, id.Name)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestClassTableFailsOnAMissingError shows that the source scan sees an
// exported error the table would have to list.
func TestClassTableFailsOnAMissingError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(`package p

import "errors"

var ErrNew = errors.New("new")

var errHidden = errors.New("hidden")

type Oops struct{}

func (*Oops) Error() string { return "oops" }
`), 0o600))
	require.Equal(t, []string{"ErrNew", "Oops"}, exportedErrorNames(t, dir))
}

// classCase is an error from a real code path and the class it must have.
type classCase struct {
	name  string
	err   error
	class error
}

// TestRealErrorsHaveOneClass drives each package into its error paths
// against a bundled cluster and checks that every error matches exactly
// its class.
func TestRealErrorsHaveOneClass(t *testing.T) {
	var cases []classCase
	add := func(name string, err error, class error) { cases = append(cases, classCase{name, err, class}) }
	ctx := testkit.Context(t)
	cluster := bundled.Cluster(t, broker.ShareLockDuration(time.Second))
	seeds := cluster.Bootstrap()
	admin := testkit.Client(t, seeds)
	testkit.CreateTopic(ctx, t, admin, "in", 1)
	testkit.CreateTopic(ctx, t, admin, "out", 1)
	testkit.SetGroupConfigs(ctx, t, admin, "g", "share.auto.offset.reset", "earliest")
	testkit.ProduceRoundRobin(ctx, t, admin, "in", 1, "a", "b", "c")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	// producer
	_, err := producer.New(producer.TransactionalID("x"))
	add("producer.New without brokers", err, kshare.ErrUsage)
	newProducer := func(id string, opts ...producer.Opt) *producer.Producer {
		p, err := producer.New(append([]producer.Opt{producer.SeedBrokers(seeds...), producer.TransactionalID(id), producer.Linger(0)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close(context.Background()) })
		require.NoError(t, p.InitTransactions(ctx))
		return p
	}
	p := newProducer("classes", producer.BatchMaxBytes(1024), producer.KgoOpts(kgo.ClientID("classes")))
	add("BeginTransaction before a commit ends", p.CommitTransaction(ctx), kshare.ErrUsage)
	require.NoError(t, p.BeginTransaction())
	add("BeginTransaction twice", p.BeginTransaction(), kshare.ErrUsage)
	add("a record too large", p.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: make([]byte, 2048)}).FirstErr(), kshare.ErrAbortable)
	add("a commit after a failed record", p.CommitTransaction(ctx), kshare.ErrAbortable)
	require.NoError(t, p.AbortTransaction(ctx))

	// An EndTxn(COMMIT) whose answer is lost while the context ends.
	commitCtx, cancelCommit := context.WithCancel(ctx)
	var drop atomic.Bool
	drop.Store(true)
	stop := cluster.InjectFaults(func(_ int32, client string, req kmsg.Request) broker.FaultAction {
		if e, ok := req.(*kmsg.EndTxnRequest); ok && client == "classes" && e.Commit && drop.CompareAndSwap(true, false) {
			cancelCommit()
			return broker.FaultAction{Fault: broker.DropAnswer}
		}
		return broker.FaultAction{}
	})
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: []byte("o")}).FirstErr())
	add("a commit whose answer was lost", p.CommitTransaction(commitCtx), kshare.ErrInDoubt)
	stop()
	add("the abort that learns it committed", p.AbortTransaction(ctx), kshare.ErrCommitted)

	zombie := newProducer("fenced")
	require.NoError(t, zombie.BeginTransaction())
	newProducer("fenced") // fences the zombie
	zombie.Produce(ctx, &kgo.Record{Topic: "out", Value: []byte("z")}, nil)
	add("a fenced producer's commit", zombie.CommitTransaction(ctx), kshare.ErrFatal)
	add("a fenced producer's next call", zombie.BeginTransaction(), kshare.ErrFatal)

	require.NoError(t, p.Close(ctx))
	add("producer call after Close", p.BeginTransaction(), kshare.ErrClosed)
	add("produce after Close", p.ProduceSync(ctx, &kgo.Record{Topic: "out"}).FirstErr(), kshare.ErrClosed)

	// shareconsumer
	_, err = shareconsumer.New(shareconsumer.SeedBrokers(seeds...), shareconsumer.Topics("in"))
	add("shareconsumer.New without a group", err, kshare.ErrUsage)
	_, err = shareconsumer.New(shareconsumer.SeedBrokers(seeds...), shareconsumer.Group("g"), shareconsumer.Topics("in"),
		shareconsumer.SetGroupConfig(shareconsumer.GroupConfig{IsolationLevel: "serializable"}))
	add("an invalid group config", err, kshare.ErrUsage)
	newConsumer := func(mode shareconsumer.AckMode, opts ...shareconsumer.Opt) *shareconsumer.Consumer {
		c, err := shareconsumer.New(append([]shareconsumer.Opt{shareconsumer.SeedBrokers(seeds...), shareconsumer.Group("g"),
			shareconsumer.Topics("in"), shareconsumer.Mode(mode), shareconsumer.MaxWait(100 * time.Millisecond)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	explicit := newConsumer(shareconsumer.Explicit)
	var polled []*kgo.Record
	testkit.PollValues(ctx, t, explicit, 3, func(r *kgo.Record) { polled = append(polled, r) })
	_, err = explicit.Poll(cancelled)
	add("Poll whose context ended", err, kshare.ErrAbortable)
	add("Ack of a nil record", explicit.Ack(nil, kshare.AckAccept), kshare.ErrUsage)
	add("Ack with GAP", explicit.Ack(polled[0], 0), kshare.ErrUsage)
	deadline, _ := explicit.LockDeadline(polled[0])
	time.Sleep(time.Until(deadline) + 50*time.Millisecond)
	add("Ack after the lock expired", explicit.Ack(polled[0], kshare.AckAccept), kshare.ErrAbortable)
	require.NoError(t, explicit.Close(ctx))
	_, err = explicit.Poll(ctx)
	add("Poll after Close", err, kshare.ErrClosed)
	add("Commit after Close", explicit.Commit(ctx), kshare.ErrClosed)

	refused := newConsumer(shareconsumer.Transactional, shareconsumer.Group("refused"),
		shareconsumer.SetGroupConfig(shareconsumer.GroupConfig{RecordLockDuration: 10 * time.Millisecond}))
	_, err = refused.Poll(ctx)
	add("a group config the cluster refuses", err, kshare.ErrUsage)
	_, again := refused.Poll(ctx)
	require.Equal(t, err, again, "every Poll says so")
	add("Ack in Transactional mode", refused.Ack(polled[0], kshare.AckAccept), kshare.ErrUsage)

	// acknowledger
	_, err = acknowledger.New(acknowledger.TransactionalID("x"))
	add("acknowledger.New without brokers", err, kshare.ErrUsage)
	newAcknowledger := func(id string) *acknowledger.Acknowledger {
		a, err := acknowledger.New(acknowledger.SeedBrokers(seeds...), acknowledger.TransactionalID(id))
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Close(context.Background()) })
		require.NoError(t, a.InitTransactions(ctx))
		return a
	}
	txnal := newConsumer(shareconsumer.Transactional)
	var held []*kgo.Record
	testkit.PollValues(ctx, t, txnal, 3, func(r *kgo.Record) { held = append(held, r) })
	a := newAcknowledger("acks")
	add("Stage of nil acknowledgements", a.Stage(1, nil, txnal.GroupMetadata()), kshare.ErrUsage)
	add("Stage with another member's metadata", a.Stage(1, txnal.Acks(held, kshare.AckAccept), kshare.ShareGroupMetadata{GroupID: "g", MemberID: "other"}), kshare.ErrUsage)
	deadline, _ = txnal.LockDeadline(held[0])
	time.Sleep(time.Until(deadline) + 50*time.Millisecond)
	add("a commit of expired locks", a.CommitAcknowledgements(ctx, txnal.Acks(held, kshare.AckAccept), txnal.GroupMetadata()), kshare.ErrAbortable)
	old := newAcknowledger("acks-fenced")
	newAcknowledger("acks-fenced")
	again2 := newConsumer(shareconsumer.Transactional)
	var back []*kgo.Record
	testkit.PollValues(ctx, t, again2, 3, func(r *kgo.Record) { back = append(back, r) })
	add("a fenced acknowledger's commit", old.CommitAcknowledgements(ctx, again2.Acks(back, kshare.AckAccept), again2.GroupMetadata()), kshare.ErrFatal)
	require.NoError(t, a.Close(ctx))
	add("acknowledger call after Close", a.CommitCheckpoint(ctx, 1), kshare.ErrClosed)

	// A cluster without KIP-1289.
	plain := bundled.Cluster(t, broker.ShareTxnAPIs(false))
	testkit.CreateTopic(ctx, t, testkit.Client(t, plain.Bootstrap()), "in", 1)
	pp, err := producer.New(producer.SeedBrokers(plain.Bootstrap()...), producer.TransactionalID("plain"))
	require.NoError(t, err)
	defer pp.Close(ctx)
	require.NoError(t, pp.InitTransactions(ctx))
	require.NoError(t, pp.BeginTransaction())
	add("share acknowledgements on a cluster without KIP-1289",
		pp.SendShareAcksToTransaction(ctx, again2.Acks(back, kshare.AckAccept), again2.GroupMetadata()), kshare.ErrUnsupported)
	pa, err := acknowledger.New(acknowledger.SeedBrokers(plain.Bootstrap()...), acknowledger.TransactionalID("plain-acks"))
	require.NoError(t, err)
	defer pa.Close(ctx)
	add("an acknowledger on a cluster without KIP-1289", pa.InitTransactions(ctx), kshare.ErrUnsupported)

	// wire and broker
	req := &wire.TxnShareAcknowledgeRequest{TransactionalID: "t"}
	add("a message that does not decode", new(wire.TxnShareAcknowledgeRequest).ReadFrom(req.AppendTo(nil)[:3]), kshare.ErrUnsupported)
	closed, err := broker.NewCluster()
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	add("a closed cluster", closed.MoveLeader("in", 0, 0), kshare.ErrClosed)

	seen := map[error]bool{}
	for _, c := range cases {
		require.Error(t, c.err, c.name)
		require.Equal(t, []error{c.class}, errs.ClassesOf(c.err), "%s: %v", c.name, c.err)
		seen[c.class] = true
	}
	require.Len(t, seen, len(errs.Classes), "every class is met on a real path")
}

// The classes are seven distinct sentinels, none matching another.
func TestClassesAreDisjoint(t *testing.T) {
	for _, c := range errs.Classes {
		for _, other := range errs.Classes {
			require.Equal(t, c == other, errors.Is(c, other), "%v vs %v", c, other)
		}
	}
}
