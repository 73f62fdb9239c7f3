package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/errs"
)

// ErrClosed is returned by Cluster methods called after Close. It matches
// kshare.ErrClosed.
var ErrClosed = errs.Sentinel(kshare.ErrClosed, "broker: cluster closed")

// Cluster is a running bundled cluster. All of its state is owned by one
// goroutine (the run loop): network connections decode requests and hand
// them to the loop, which answers them one at a time, so handlers never
// lock. Cluster methods are safe for concurrent use.
type Cluster struct {
	cfg    config
	logger *slog.Logger

	nodes []*node

	reqCh   chan *request
	adminCh chan func()
	dying   chan struct{}
	dead    chan struct{}
	wg      sync.WaitGroup // listeners, connections and the run loop
	closeMu sync.Once

	connsMu        sync.Mutex
	conns          map[*clientConn]struct{}
	connsRefused   int       // connections closed at once by MaxConnections
	lastRefusalLog time.Time // refusals are logged at most once a second

	faults faultHooks // test fault injection (faults.go)

	// regexSem lets one background regex resolution of consumer-group
	// subscriptions run at a time, listTxnSem one ListTransactions
	// pattern: an admin client's costly pattern cannot hold up the
	// groups' subscriptions (regex.go).
	regexSem   chan struct{}
	listTxnSem chan struct{}

	// Everything below is owned by the run loop.
	topics map[string]*topic
	// topicsByNorm indexes topics by their name with '.' replaced by '_',
	// so that CreateTopics finds a colliding name in O(1).
	topicsByNorm map[string]*topic
	topicsByID   map[[16]byte]*topic
	// topicGen changes whenever a topic is created or deleted, so that
	// regex subscriptions know when to resolve again.
	topicGen        uint64
	nextProducerID  int64
	observers       map[int]func(node int32, req kmsg.Request)
	nextObserverID  int
	leaderListeners []func(p *partition, oldLeader int32)
	deleteListeners []func(t *topic)
	markerListeners map[string]func(p *partition, m controlMarker)
	// lateCopies are the marker copies waiting for their producer's next
	// transaction (LateMarkerCopiesOnNextTransaction), by partition.
	lateCopies   map[*partition][]*lateCopy
	compactors   map[string]func(p *partition, now time.Time)
	coordinators coordinatorSet
	timers       timerHeap
	timerRun     uint64 // counts runTimers calls
	changedParts []*partition
	// storedBytes is the size of every batch in every log: what the
	// MaxBytes budget limits.
	storedBytes   int64
	overBudget    bool // the last produce checked was refused by MaxBytes
	stats         loopStats
	handlerPanics int
}

// loopStats counts work the loop does, so that tests can assert how work
// grows with state (never how long it takes).
type loopStats struct {
	timersFired   int   // timers that fired
	watchChecks   int   // parked requests re-evaluated after a partition changed
	fetchAnswers  int   // Fetch answers built
	fetchBytes    int64 // record bytes those answers carry (copied off the loop)
	compactions   int   // coordinator log compactions
	retentionRuns int   // retention checks of a partition
	// busy is the time the loop spent on events: what the loop's work
	// costs, which benchmarks report per operation.
	busy time.Duration
	// regexLoopSteps is the regex matching done on the loop, priced as
	// program instructions times name bytes (regex.go).
	regexLoopSteps  int64
	regexBackground int // regex resolutions sent to the background
	// shareInitsMaxTurn is the most share-partition states one turn
	// initialized (share_group.go).
	shareInitsMaxTurn int
	// shareReleaseMaxTurn is the most in-flight window slots one turn
	// scanned to release ended share sessions' records (share_session.go).
	shareReleaseMaxTurn int
	// shareConnCloses counts the closes of connections that had opened
	// share sessions, as the loop handled them.
	shareConnCloses int
	// longestTurn is the longest the loop spent on one event (a request,
	// an admin call, a slice of timers) and what it set off: how long one
	// thing delayed every other client. Benchmarks report it.
	longestTurn time.Duration
}

// node is one listener of the cluster; its id is its index in Cluster.nodes.
type node struct {
	id   int32
	ln   net.Listener
	host string
	port int32
}

func (n *node) addr() string { return net.JoinHostPort(n.host, strconv.Itoa(int(n.port))) }

// NewCluster starts a cluster and returns once every node accepts
// connections. It fails if a port cannot be bound or an option is invalid.
func NewCluster(opts ...Opt) (*Cluster, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Cluster{
		cfg:             cfg,
		logger:          cfg.logger,
		reqCh:           make(chan *request),
		regexSem:        make(chan struct{}, 1),
		listTxnSem:      make(chan struct{}, 1),
		adminCh:         make(chan func()),
		dying:           make(chan struct{}),
		dead:            make(chan struct{}),
		conns:           make(map[*clientConn]struct{}),
		topics:          make(map[string]*topic),
		topicsByNorm:    make(map[string]*topic),
		topicsByID:      make(map[[16]byte]*topic),
		nextProducerID:  1000,
		observers:       make(map[int]func(int32, kmsg.Request)),
		markerListeners: make(map[string]func(*partition, controlMarker)),
		compactors:      make(map[string]func(*partition, time.Time)),
	}
	for i := 0; i < cfg.nodes; i++ {
		port := 0
		if i < len(cfg.ports) {
			port = cfg.ports[i]
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(cfg.host, strconv.Itoa(port)))
		if err != nil {
			for _, n := range c.nodes {
				n.ln.Close()
			}
			return nil, fmt.Errorf("broker: node %d: listen: %w", i, err)
		}
		c.nodes = append(c.nodes, &node{
			id:   int32(i),
			ln:   ln,
			host: cfg.host,
			port: int32(ln.Addr().(*net.TCPAddr).Port),
		})
	}
	c.createInternalTopics()
	c.newCoordinators()
	c.wg.Add(1)
	go c.run()
	for _, n := range c.nodes {
		c.wg.Add(1)
		go c.accept(n)
	}
	c.logger.Info("cluster started", "nodes", len(c.nodes), "bootstrap", c.Bootstrap())
	return c, nil
}

func (cfg *config) validate() error {
	switch {
	case cfg.nodes < 1:
		return fmt.Errorf("broker: Nodes(%d): need at least one node", cfg.nodes)
	case cfg.txnStatePartitions < 1, cfg.offsetsPartitions < 1, cfg.shareStatePartitions < 1, cfg.defaultPartitions < 1:
		return errors.New("broker: partition counts must be at least 1")
	case cfg.maxFrame < 1024:
		return fmt.Errorf("broker: MaxFrameBytes(%d): must be at least 1024", cfg.maxFrame)
	case cfg.maxTxnTimeout <= 0:
		return errors.New("broker: MaxTransactionTimeout must be positive")
	case cfg.firstProducerEpoch < 0 || cfg.firstProducerEpoch > math.MaxInt16-1:
		// At 32767 no TV2 epoch bump is possible, so a commit could never
		// write its markers.
		return fmt.Errorf("broker: FirstProducerEpoch(%d) must be in 0..%d", cfg.firstProducerEpoch, math.MaxInt16-1)
	case cfg.legacyStaleCoordinator < 0, cfg.lateMarkerCopies < 0, cfg.lateCopiesOnNext < 0:
		return errors.New("broker: debug durations must not be negative")
	case cfg.fetchMaxBytes < 1:
		return fmt.Errorf("broker: FetchMaxBytes(%d): must be positive", cfg.fetchMaxBytes)
	case cfg.producerIDExpiry <= 0, cfg.txnIDExpiration <= 0, cfg.offsetsRetention <= 0,
		cfg.retentionCheckInterval <= 0, cfg.readTimeout <= 0, cfg.connectionsMaxIdle <= 0:
		return errors.New("broker: ProducerIDExpiration, TransactionalIDExpiration, OffsetsRetention, RetentionCheckInterval, ReadTimeout and ConnectionsMaxIdle must be positive")
	case cfg.maxBytes < 0:
		return fmt.Errorf("broker: MaxBytes(%d): must not be negative (0 is no budget)", cfg.maxBytes)
	case cfg.maxConnections < 0:
		return fmt.Errorf("broker: MaxConnections(%d): must not be negative (0 is no limit)", cfg.maxConnections)
	case cfg.consumerSessionTimeout < time.Millisecond, cfg.consumerHeartbeatInterval < time.Millisecond:
		return errors.New("broker: consumer group session timeout and heartbeat interval must be at least 1ms")
	case cfg.shareMinLock < time.Millisecond || cfg.shareMaxLock < cfg.shareMinLock || cfg.shareMaxLock.Milliseconds() > math.MaxInt32:
		return fmt.Errorf("broker: ShareLockDurationBounds(%v, %v): need 1ms <= min <= max <= %v", cfg.shareMinLock, cfg.shareMaxLock, time.Duration(math.MaxInt32)*time.Millisecond)
	case cfg.shareLockDurationSet && (cfg.shareLockDuration < cfg.shareMinLock || cfg.shareLockDuration > cfg.shareMaxLock):
		return fmt.Errorf("broker: ShareLockDuration(%v) is outside ShareLockDurationBounds [%v, %v]", cfg.shareLockDuration, cfg.shareMinLock, cfg.shareMaxLock)
	}
	cfg.shareLockDuration = min(max(cfg.shareLockDuration, cfg.shareMinLock), cfg.shareMaxLock)
	for id := range cfg.oldNodes {
		if id < 0 || int(id) >= cfg.nodes {
			return fmt.Errorf("broker: OldNodes(%d): the cluster has nodes 0..%d", id, cfg.nodes-1)
		}
	}
	for key, caps := range cfg.versionCaps {
		if _, ok := apis[key]; !ok {
			return fmt.Errorf("broker: APIVersionCap(%d): the broker does not serve API key %d", key, key)
		}
		if key == kmsg.AddPartitionsToTxn.Int16() || key == writeTxnMarkersKey {
			// The nodes send these to each other (transaction
			// verification, markers): a cap would leave every
			// transaction waiting for ever.
			return fmt.Errorf("broker: APIVersionCap(%d): the nodes send API key %d to each other; OldNodes models nodes with older WriteTxnMarkers", key, key)
		}
		for id := range caps {
			if id != allNodes && (id < 0 || int(id) >= cfg.nodes) {
				return fmt.Errorf("broker: APIVersionCap(%d, nodes %d): the cluster has nodes 0..%d", key, id, cfg.nodes-1)
			}
		}
	}
	return cfg.normalizeGroupDefaults()
}

// Bootstrap returns the address (host:port) of every node, in node order.
func (c *Cluster) Bootstrap() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr()
	}
	return out
}

// NodeIDs returns the ids of the cluster's nodes.
func (c *Cluster) NodeIDs() []int32 {
	out := make([]int32, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.id
	}
	return out
}

// Close stops every listener, connection, timer and the run loop, and
// returns once all of the cluster's goroutines have exited. It is safe to
// call more than once.
func (c *Cluster) Close() error {
	c.closeMu.Do(func() {
		close(c.dying)
		for _, n := range c.nodes {
			n.ln.Close()
		}
		c.connsMu.Lock()
		for cc := range c.conns {
			cc.conn.Close()
		}
		c.connsMu.Unlock()
		c.wg.Wait()
		close(c.dead)
		c.logger.Info("cluster stopped")
	})
	return nil
}

// do runs fn on the run loop and waits for it. It returns ErrClosed if the
// cluster stops first.
func (c *Cluster) do(fn func()) error {
	done := make(chan struct{})
	select {
	case c.adminCh <- func() { fn(); close(done) }:
	case <-c.dying:
		return ErrClosed
	}
	select {
	case <-done:
		return nil
	case <-c.dying:
		return ErrClosed
	}
}

// after runs fn on the run loop once d has passed, unless the cluster stops
// first. The timer goroutine exits either way.
func (c *Cluster) after(d time.Duration, fn func()) {
	t := time.NewTimer(d)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.dying:
			return
		}
		select {
		case c.adminCh <- fn:
		case <-c.dying:
		}
	}()
}

// run is the loop that owns all cluster state. It sleeps until a request,
// an admin call or the earliest timer (timers.go); after each event it
// lets parked requests see what changed (watch.go).
func (c *Cluster) run() {
	defer c.wg.Done()
	wake := time.NewTimer(time.Hour)
	wake.Stop()
	defer wake.Stop()
	var wakeAt time.Time // when wake fires, if armed
	armed := false
	for {
		switch next, ok := c.nextTimer(); {
		case !ok && armed:
			wake.Stop()
			armed = false
		case ok && (!armed || !next.Equal(wakeAt)):
			wake.Reset(time.Until(next))
			wakeAt, armed = next, true
		}
		var start time.Time
		select {
		case r := <-c.reqCh:
			start = time.Now()
			c.dispatch(r)
		case fn := <-c.adminCh:
			start = time.Now()
			fn()
		case <-wake.C:
			armed = false
			start = time.Now()
			c.runTimers(start)
		case <-c.dying:
			return
		}
		c.settle()
		turn := time.Since(start)
		c.stats.busy += turn
		c.stats.longestTurn = max(c.stats.longestTurn, turn)
	}
}

// onLeaderChange registers fn to run on the loop after a partition's
// leadership moved; coordinators load and resign their shards here.
func (c *Cluster) onLeaderChange(fn func(p *partition, oldLeader int32)) {
	c.leaderListeners = append(c.leaderListeners, fn)
}

// onTopicDeleted registers fn to run on the loop after a topic is deleted;
// whoever keeps state per partition drops it here.
func (c *Cluster) onTopicDeleted(fn func(t *topic)) {
	c.deleteListeners = append(c.deleteListeners, fn)
}

// onMarker registers the coordinator that owns an internal topic to hear of
// every transaction marker written to one of its partitions.
func (c *Cluster) onMarker(topic string, fn func(p *partition, m controlMarker)) {
	c.markerListeners[topic] = fn
}

// ObserveRequests calls fn, on the cluster's loop, for every request a node
// receives from the network or from another node (markers, implicit
// AddPartitionsToTxn), before it is handled. fn must not block or call back
// into the cluster. The returned function stops the observation.
func (c *Cluster) ObserveRequests(fn func(node int32, req kmsg.Request)) (stop func()) {
	var id int
	if c.do(func() { id = c.nextObserverID; c.nextObserverID++; c.observers[id] = fn }) != nil {
		return func() {}
	}
	return func() { _ = c.do(func() { delete(c.observers, id) }) }
}

func (c *Cluster) nodeByID(id int32) *node {
	if id < 0 || int(id) >= len(c.nodes) {
		return nil
	}
	return c.nodes[id]
}
