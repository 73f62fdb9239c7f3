package txn

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/wire"
)

// capabilitiesTTL is how long one broker's ApiVersions answer is trusted: a
// rolling upgrade that turns a feature on is seen within this time.
const capabilitiesTTL = 30 * time.Second

// BrokerCapabilities is what one broker said in ApiVersions: the highest
// version of every API key it serves and its finalized feature levels.
type BrokerCapabilities struct {
	Node      int32            // the broker's node id
	Addr      string           // host:port, empty if metadata did not name it
	MaxKey    map[int16]int16  // API key -> highest version served
	Finalized map[string]int16 // feature name -> finalized level
	fetched   time.Time
}

// MaxVersion returns the highest version of key the broker serves, or -1.
func (b *BrokerCapabilities) MaxVersion(key int16) int16 {
	if v, ok := b.MaxKey[key]; ok {
		return v
	}
	return -1
}

// Feature returns the finalized level of a feature, or 0 when it is not
// finalized.
func (b *BrokerCapabilities) Feature(name string) int16 { return b.Finalized[name] }

// TV2 reports whether the broker runs KIP-890 part 2 transactions: finalized
// transaction.version >= 2, EndTxn v5 (returns the bumped epoch) and
// Produce v12 (the leader adds partitions to the transaction itself).
func (b *BrokerCapabilities) TV2() bool {
	return b.Feature(wire.TransactionVersionFeature) >= wire.MinTransactionVersionForTV2 &&
		b.MaxVersion(kmsg.EndTxn.Int16()) >= 5 &&
		b.MaxVersion(kmsg.Produce.Int16()) >= 12
}

// ShareAcksMissing lists what the broker lacks for transactional share
// acknowledgements (TxnShareAcknowledge v0 and finalized share.version >=
// 3, as KIP-1289's draft has them); it is empty when the broker has
// everything.
func (b *BrokerCapabilities) ShareAcksMissing() []string {
	var missing []string
	if key := wire.TxnShareAcknowledgeKey; b.MaxVersion(key) < 0 {
		missing = append(missing, fmt.Sprintf("API key %d (%s) not advertised", key, wire.NameForKey(key)))
	}
	if lvl := b.Feature(wire.ShareVersionFeature); lvl < wire.MinShareVersionForTxnAcks {
		missing = append(missing, fmt.Sprintf("finalized %s is %d, needs >= %d",
			wire.ShareVersionFeature, lvl, wire.MinShareVersionForTxnAcks))
	}
	return missing
}

// String names the broker for error messages.
func (b *BrokerCapabilities) String() string {
	if b.Addr != "" {
		return fmt.Sprintf("broker %d (%s)", b.Node, b.Addr)
	}
	return fmt.Sprintf("broker %d", b.Node)
}

// Capabilities caches each broker's ApiVersions answer. It is safe for
// concurrent use.
type Capabilities struct {
	cl *kgo.Client

	mu    sync.Mutex
	nodes map[int32]*BrokerCapabilities
	addrs map[int32]string
}

// NewCapabilities returns an empty cache that asks brokers through cl.
func NewCapabilities(cl *kgo.Client) *Capabilities {
	return &Capabilities{cl: cl, nodes: make(map[int32]*BrokerCapabilities), addrs: make(map[int32]string)}
}

// Of returns what broker node advertises, asking it with ApiVersions when
// the cached answer is missing or older than a short TTL. Transport errors
// are returned unclassified for the caller's retry loop.
func (c *Capabilities) Of(ctx context.Context, node int32) (*BrokerCapabilities, error) {
	c.mu.Lock()
	caps := c.nodes[node]
	c.mu.Unlock()
	if caps != nil && time.Since(caps.fetched) < capabilitiesTTL {
		return caps, nil
	}
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName = "kshare"
	req.ClientSoftwareVersion = "0"
	kresp, err := c.cl.Broker(int(node)).Request(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("ApiVersions to node %d: %w", node, err)
	}
	resp := kresp.(*kmsg.ApiVersionsResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("ApiVersions to node %d: %w", node, err)
	}
	caps = &BrokerCapabilities{
		Node:      node,
		MaxKey:    make(map[int16]int16, len(resp.ApiKeys)),
		Finalized: make(map[string]int16, len(resp.FinalizedFeatures)),
		fetched:   time.Now(),
	}
	for _, k := range resp.ApiKeys {
		caps.MaxKey[k.ApiKey] = k.MaxVersion
	}
	for _, f := range resp.FinalizedFeatures {
		caps.Finalized[f.Name] = f.MaxVersionLevel
	}
	caps.Addr = c.addr(ctx, node)
	c.mu.Lock()
	c.nodes[node] = caps
	c.mu.Unlock()
	return caps, nil
}

// addr names node host:port from cluster metadata, best effort: an error
// leaves the name empty, which only makes messages less precise.
func (c *Capabilities) addr(ctx context.Context, node int32) string {
	c.mu.Lock()
	a, ok := c.addrs[node]
	c.mu.Unlock()
	if ok {
		return a
	}
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := c.cl.RequestCachedMetadata(ctx, req, 0)
	if err != nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range resp.Brokers {
		c.addrs[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	return c.addrs[node]
}

// RequireShareAcks checks that every broker in nodes supports transactional
// share acknowledgements. It returns a classified kshare.ErrUnsupported
// error naming each broker and what it lacks, or an unclassified transport
// error when a broker could not be asked.
func (c *Capabilities) RequireShareAcks(ctx context.Context, op string, nodes []int32) error {
	var problems []string
	if key := wire.TxnShareAcknowledgeKey; !clientAllows(c.cl, key, 0) {
		problems = append(problems, fmt.Sprintf("the client's kgo.MaxVersions pin excludes API key %d (%s)", key, wire.NameForKey(key)))
	}
	for _, n := range nodes {
		caps, err := c.Of(ctx, n)
		if err != nil {
			return err
		}
		if missing := caps.ShareAcksMissing(); len(missing) > 0 {
			problems = append(problems, caps.String()+": "+strings.Join(missing, ", "))
		}
	}
	if len(problems) > 0 {
		return errs.Unsupported(op, fmt.Errorf("broker does not support transactional share acknowledgements (KIP-1289): %s; on such a cluster name a claim ledger topic (producer.ShareLedger, with the same topic in shareconsumer.ShareLedger) to run exactly-once without KIP-1289", strings.Join(problems, "; ")))
	}
	return nil
}

// clientAllows reports whether the kgo client may send version v of key:
// a kgo.MaxVersions option caps what kgo negotiates.
func clientAllows(cl *kgo.Client, key, v int16) bool {
	pin, _ := cl.OptValue(kgo.MaxVersions).(*kversion.Versions)
	if pin == nil {
		return true
	}
	max, ok := pin.LookupMaxKeyVersion(key)
	return ok && max >= v
}

// tv2 reports whether transactions with the broker described by caps run
// transaction version 2, given what the client itself may send.
func (c *Capabilities) tv2(caps *BrokerCapabilities) bool {
	return caps.TV2() && clientAllows(c.cl, kmsg.EndTxn.Int16(), 5) && clientAllows(c.cl, kmsg.Produce.Int16(), 12)
}
