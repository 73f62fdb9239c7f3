package differential_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kshare-go/kshare/broker"
)

// Target kinds, as transcripts and failures name them.
const (
	kindKafka   = "kafka"
	kindBundled = "bundled"
)

// internalPartitions matches integration/kafka/kafka.sh, which gives every
// internal topic of the real Kafka 5 partitions, so that coordinator keys
// hash to the same partition numbers on both targets.
const internalPartitions = 5

// target is one broker under test: the real Kafka or a fresh bundled
// cluster. Both have exactly one node, which every request goes to, so
// that request routing never differs between them.
type target struct {
	t    testing.TB
	kind string
	// node is the id of the single node.
	node int32
	// prefix makes topic, group and transactional-id names unique per run:
	// the real Kafka keeps its state between runs.
	prefix string
	seeds  []string

	mu      sync.Mutex
	clients map[[2]int16]*kgo.Client
}

func newTarget(t testing.TB, kind string, seeds []string) *target {
	t.Helper()
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatal(err)
	}
	tg := &target{
		t:       t,
		kind:    kind,
		prefix:  "kdiff-" + hex.EncodeToString(suffix) + "-",
		seeds:   seeds,
		clients: make(map[[2]int16]*kgo.Client),
	}
	t.Cleanup(tg.close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := req.RequestWith(ctx, tg.client(3, 12))
	if err != nil {
		t.Fatalf("%s: metadata: %v", kind, err)
	}
	if len(resp.Brokers) != 1 {
		t.Fatalf("%s: the differential test needs a one-node cluster; it has %d nodes", kind, len(resp.Brokers))
	}
	tg.node = resp.Brokers[0].NodeID
	return tg
}

// newBundledTarget starts a one-node bundled cluster shaped like the real
// Kafka of integration/kafka/kafka.sh, and stops it when the test ends.
func newBundledTarget(t testing.TB) *target {
	t.Helper()
	c, err := broker.NewCluster(
		broker.Nodes(1),
		broker.TxnStatePartitions(internalPartitions),
		broker.ConsumerOffsetsPartitions(internalPartitions),
		broker.ShareStatePartitions(internalPartitions),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return newTarget(t, kindBundled, c.Bootstrap())
}

func (tg *target) close() {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	for _, cl := range tg.clients {
		cl.Close()
	}
	tg.clients = nil
}

// name returns a name unique to this run of this target.
func (tg *target) name(s string) string { return tg.prefix + s }

// client returns a client that sends key at most at version; send checks
// that the broker accepted exactly that version.
func (tg *target) client(key, version int16) *kgo.Client {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	id := [2]int16{key, version}
	if cl := tg.clients[id]; cl != nil {
		return cl
	}
	versions := kversion.Tip()
	versions.SetMaxKeyVersion(key, version)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(tg.seeds...),
		kgo.MaxVersions(versions),
		kgo.ClientID("kshare-differential"),
		kgo.RequestRetries(0),
	)
	if err != nil {
		tg.t.Fatalf("%s: client: %v", tg.kind, err)
	}
	tg.clients[id] = cl
	return cl
}

// send sends req at exactly version to the target's node and returns the
// response. A transport error, or a broker that does not serve that
// version, fails the test: the scenarios compare answers, not reachability.
func (tg *target) send(ctx context.Context, version int16, req kmsg.Request) kmsg.Response {
	tg.t.Helper()
	resp, err := tg.client(req.Key(), version).Broker(int(tg.node)).Request(ctx, req)
	if err != nil {
		tg.t.Fatalf("%s: %s v%d: %v", tg.kind, kmsg.NameForKey(req.Key()), version, err)
	}
	if got := req.GetVersion(); got != version {
		tg.t.Fatalf("%s: %s was sent at v%d, not v%d: the broker does not serve it", tg.kind, kmsg.NameForKey(req.Key()), got, version)
	}
	return resp
}

// retry runs op with a jittered exponential backoff until it returns nil,
// a permanent error (backoff.Permanent) or ctx ends; it fails the test
// with what it was waiting for when it gives up. Setup steps use it where
// the real Kafka settles asynchronously (topic creation, coordinator
// loading, markers written after EndTxn answers).
func (tg *target) retry(ctx context.Context, what string, op func() error) {
	tg.t.Helper()
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(20*time.Millisecond),
		backoff.WithMaxInterval(500*time.Millisecond),
		backoff.WithMaxElapsedTime(45*time.Second),
	)
	if err := backoff.Retry(op, backoff.WithContext(b, ctx)); err != nil {
		tg.t.Fatalf("%s: %s: %v", tg.kind, what, err)
	}
}

// eventually asks get until done accepts its answer, for at most ten
// seconds, and returns the last answer: where the real Kafka settles
// asynchronously, a transcript records what it settled on, or what it
// still said when the wait ended.
func (tg *target) eventually(ctx context.Context, get func() string, done func(string) bool) string {
	tg.t.Helper()
	var got string
	for i := 0; i < 50; i++ {
		if got = get(); done(got) || ctx.Err() != nil {
			return got
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return got
}

// errName names an error code as Kafka does ("OK" for none).
func errName(code int16) string {
	if code == 0 {
		return "OK"
	}
	if e, ok := kerr.ErrorForCode(code).(*kerr.Error); ok && e.Code == code {
		return e.Message
	}
	return fmt.Sprintf("ERROR_CODE_%d", code)
}

// codeErr turns a non-zero code into an error for retry loops.
func codeErr(code int16) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("%s", errName(code))
}

// transcript is the normalized record of one scenario run: an ordered list
// of named steps and what the broker answered, with everything that
// legitimately differs between two clusters (ids, hosts, timestamps,
// absolute producer ids) normalized away.
type transcript struct {
	entries []entry
	seen    map[string]int
}

type entry struct{ step, value string }

// add records the answer of a step. A step name used twice gets a "#n"
// suffix so that every step stays addressable by the allow-list.
func (tr *transcript) add(step, format string, args ...any) {
	if tr.seen == nil {
		tr.seen = make(map[string]int)
	}
	tr.seen[step]++
	if n := tr.seen[step]; n > 1 {
		step = fmt.Sprintf("%s#%d", step, n)
	}
	tr.entries = append(tr.entries, entry{step: step, value: fmt.Sprintf(format, args...)})
}

// code records an error code.
func (tr *transcript) code(step string, code int16) { tr.add(step, "%s", errName(code)) }

func (tr *transcript) value(step string) (string, bool) {
	for _, e := range tr.entries {
		if e.step == step {
			return e.value, true
		}
	}
	return "", false
}
