package shareconsumer

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/acktrack"
	"github.com/kshare-go/kshare/internal/errs"
	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/internal/ledger"
	"github.com/kshare-go/kshare/wire"
)

// Consumer is a KIP-932 share-group consumer on kgo's transport. It joins
// the share group with ShareGroupHeartbeat, keeps one share session per
// partition leader, fetches with ShareFetch and acknowledges according to
// its AckMode. Poll, Ack, Commit, Acks and the lookups may be called from
// several goroutines; only one Poll runs at a time. Create it with New; a
// Consumer that New did not create answers every call with
// kshare.ErrUsage.
type Consumer struct {
	cfg      config
	cl       *kgo.Client
	dials    *kgoclient.Dials
	logger   *slog.Logger
	memberID string
	decomp   kgo.Decompressor

	// bgCtx bounds every request of the background goroutines; it ends
	// when Close is done or gives up.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	hbCtx    context.Context // ends the heartbeat loop
	hbCancel context.CancelFunc
	hbDone   chan struct{}
	hbWake   chan struct{}
	sessWG   sync.WaitGroup

	pollSem chan struct{} // one Poll at a time; a channel, so that waiting ends with ctx
	ready   chan struct{} // a fetch was buffered or an error queued
	closeCh chan struct{} // closed when Close begins

	mu           sync.Mutex
	closing      bool
	epoch        int32
	assigned     map[kshare.TopicPartition]struct{}
	unresolved   map[[16]byte][]int32
	topicIDs     map[string][16]byte
	topicNames   map[[16]byte]string
	leaders      map[kshare.TopicPartition]int32
	leaderEpochs map[kshare.TopicPartition]topicEpoch // replaced, never changed: a ShareFetch keeps the one it was sent with
	sessions     map[int32]*session
	sessOrder    []*session
	pollStart    int
	held         heldSet
	lastPollAcqs []*acquisition // Implicit: acquisitions the last Poll delivered from
	decided      map[*acquisition]struct{}
	errs         []error // classified, for the next Poll
	stuck        error   // classified, for every Poll: the consumer cannot go on
	renewWarned  bool
	renewMissing map[int32]bool // nodes known to lack ShareAcknowledge v2
	missing      map[string]*missingTopic
	// txnTimers give back the records of staged acknowledgements whose
	// transaction times out before it is resolved (tracker.expire).
	txnTimers map[*acktrack.Set]*time.Timer
	// ledgerOpen holds the staged acknowledgements of ledger transactions
	// that have not ended: while one is open, its claims hold the
	// ledger's reads back, so no lookup starts ahead of a Poll.
	ledgerOpen map[*acktrack.Set]bool
	// reachCheck reports a cluster that the consumer never reached
	// (checkReached).
	reachCheck *time.Timer
	// polling is set while a Poll waits for records; lastPoll is when the
	// application last called Poll or a Poll returned (zero before the
	// first Poll). Sessions fetch ahead of the application only while it
	// polls (session.nextLocked).
	polling  bool
	lastPoll time.Time
	// inPoll is set from a Poll's start to its return, waits for a
	// ledger round included (polling is not set during those).
	inPoll bool
	// pollGen counts the Polls; a session fetches ahead once per Poll.
	pollGen uint64
	// releasedSincePoll is set when the consumer gives records back
	// between Polls: no session fetches ahead until the next Poll.
	releasedSincePoll bool
	// slow is set once the application left what was fetched for it
	// unpolled for MaxPollInterval: from then on nothing is fetched ahead,
	// and one session at a time (fetchTurn) fetches for a waiting Poll.
	slow      bool
	fetchTurn int
	metrics   Metrics
	// unseenWarnAt and unseenSinceWarn pace the warnings about records
	// that expired before Poll returned them.
	unseenWarnAt    time.Time
	unseenSinceWarn int64
	// startCheck logs, once, partitions the group started reading at
	// their latest offset past earlier records (startcheck.go).
	startCheck startCheck
	// ledger resolves delivered records against the claim ledger
	// (ShareLedger; nil without). ledgerReady is set once the first Poll
	// opened it; ledgerPrunedAt is when its index was last pruned.
	ledger         *ledger.Resolver
	ledgerCl       *kgo.Client // the ledger's reader, closed with cl
	ledgerReady    bool
	ledgerPrunedAt time.Time
	// round is the ledger lookup of the records a Poll took, until a Poll
	// hands its outcome over (ledgerRound); one at a time.
	round *ledgerRound
}

// New creates a Consumer and starts its heartbeat loop, which joins the
// group; Close stops it and every other goroutine of the consumer. New
// fails on missing or invalid options or when the kgo client cannot be
// created; it does not wait for the cluster.
func New(opts ...Opt) (*Consumer, error) {
	const op = "new share consumer"
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, errs.Usage(op, errors.New("nil option"))
		}
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, errs.Usage(op, err)
	}
	cl, dials, err := cfg.conn.NewClient(kgo.ConnIdleTimeout(connIdleTimeout))
	if err != nil {
		return nil, errs.Usage(op, err)
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		cl.Close()
		return nil, errs.Fatal(op, fmt.Errorf("member id: %w", err))
	}
	c := &Consumer{
		cfg:          cfg,
		cl:           cl,
		dials:        dials,
		memberID:     base64.RawURLEncoding.EncodeToString(id[:]),
		decomp:       kgo.DefaultDecompressor(),
		hbDone:       make(chan struct{}),
		hbWake:       make(chan struct{}, 1),
		ready:        make(chan struct{}, 1),
		pollSem:      make(chan struct{}, 1),
		closeCh:      make(chan struct{}),
		assigned:     make(map[kshare.TopicPartition]struct{}),
		topicIDs:     make(map[string][16]byte),
		topicNames:   make(map[[16]byte]string),
		leaders:      make(map[kshare.TopicPartition]int32),
		sessions:     make(map[int32]*session),
		decided:      make(map[*acquisition]struct{}),
		renewMissing: make(map[int32]bool),
		missing:      make(map[string]*missingTopic),
		txnTimers:    make(map[*acktrack.Set]*time.Timer),
	}
	c.logger = cfg.conn.Logger.With("group", cfg.group, "member_id", c.memberID)
	if cfg.ledger != "" {
		// A client of its own: a ledger read that Poll's context cuts
		// short closes its connection, which must not be a share
		// session's (the broker releases a session's records when its
		// connection closes).
		lcl, _, err := cfg.conn.NewClient()
		if err != nil {
			cl.Close()
			return nil, errs.Usage(op, fmt.Errorf("claim ledger client: %w", err))
		}
		c.ledgerCl = lcl
		c.ledger = ledger.NewResolver(lcl, cfg.ledger, cfg.group, c.logger)
	}
	c.bgCtx, c.bgCancel = context.WithCancel(context.Background())
	c.hbCtx, c.hbCancel = context.WithCancel(c.bgCtx)
	c.reachCheck = time.AfterFunc(unreachableTimeout, c.checkReached)
	c.startCheck.wake = make(chan struct{}, 1)
	c.startCheck.done = make(chan struct{})
	go c.startCheckLoop()
	go c.heartbeatLoop()
	return c, nil
}

// Client returns the underlying kgo client, for admin requests. Do not
// close it: Close does.
func (c *Consumer) Client() *kgo.Client {
	if !c.made() {
		return nil
	}
	return c.cl
}

// made reports whether c was created by New: a nil or zero Consumer
// answers every call with ErrUsage (or nothing) instead of panicking.
func (c *Consumer) made() bool { return c != nil && c.cl != nil }

// errNotMade is what a call of op on a Consumer that New did not create
// gets.
func errNotMade(op string) error {
	return errs.Usage(op, errors.New("the consumer was not created by shareconsumer.New"))
}

// Mode returns the acknowledgement mode.
func (c *Consumer) Mode() AckMode {
	if !c.made() {
		return Implicit
	}
	return c.cfg.mode
}

// GroupMetadata identifies this member for transactional acknowledgements:
// the group id, the member id and the current member epoch (0 until the
// coordinator has answered the first heartbeat).
func (c *Consumer) GroupMetadata() kshare.ShareGroupMetadata {
	if !c.made() {
		return kshare.ShareGroupMetadata{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return kshare.ShareGroupMetadata{GroupID: c.cfg.group, MemberID: c.memberID, MemberEpoch: c.epoch}
}

// Assigned returns the partitions the coordinator assigned to this member
// and that the consumer could map to topic names, sorted.
func (c *Consumer) Assigned() []kshare.TopicPartition {
	if !c.made() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]kshare.TopicPartition, 0, len(c.assigned))
	for tp := range c.assigned {
		out = append(out, tp)
	}
	sortTopicPartitions(out)
	return out
}

// DeliveryCount returns how many times the broker has delivered r (1 on
// the first delivery), and false if the consumer does not hold r (it was
// not returned by Poll, or has been acknowledged or forgotten since). It
// identifies r by topic, partition and offset, so after a redelivery to
// this consumer it describes the latest delivery that Poll returned.
func (c *Consumer) DeliveryCount(r *kgo.Record) (int16, bool) {
	if !c.made() || r == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, idx, ok := c.held.find(kshare.TopicPartition{Topic: r.Topic, Partition: r.Partition}, r.Offset)
	if !ok || a.states[idx].unseen() {
		return 0, false
	}
	return a.deliveries, true
}

// LockDeadline returns when the acquisition lock of r ends, as computed
// from the broker's AcquisitionLockTimeoutMillis and the time the fetch was
// sent (so it errs early), moved forward by renewals. The second result is
// false if the consumer does not hold r.
func (c *Consumer) LockDeadline(r *kgo.Record) (time.Time, bool) {
	if !c.made() || r == nil {
		return time.Time{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, idx, ok := c.held.find(kshare.TopicPartition{Topic: r.Topic, Partition: r.Partition}, r.Offset)
	if !ok || a.states[idx].unseen() {
		return time.Time{}, false
	}
	return c.held.lockDeadline(a, idx), true
}

// Poll waits until records are available, ctx ends or the consumer closes,
// and returns at most MaxPollRecords of the records the leaders' sessions
// fetched, taking them from each leader in turn. Records fetched ahead
// wait, their locks renewed, for a later Poll (see MaxPollInterval); one
// whose lock ran out all the same is not returned, and is counted in
// Metrics().ExpiredUnseen and logged. In Implicit mode, Poll first accepts
// every record of the previous Poll; in Explicit mode it sends what Ack
// marked since the last send. Those acknowledgements travel with the next
// ShareFetch of each leader.
//
// Poll returns either records or an error:
//
//   - kshare.ErrAbortable wrapping ctx's error when ctx ends first
//     (another Poll in progress is waited for within ctx); fetched
//     records stay buffered for the next Poll. While the member is not in
//     the group because no broker can be reached, the error names the
//     last connection error too. It also reports background errors that
//     should pass (a broker error the consumer retries), once each, and,
//     once, a cluster that no connection has reached for 5s since New
//     (mistyped seed brokers, say), with the connection error; the
//     consumer keeps trying.
//   - kshare.ErrUsage when a subscribed topic does not exist: metadata
//     said so for 5s. The consumer keeps looking, so a topic created
//     later is read; the error is reported once each time the topic goes
//     missing. Also kshare.ErrUsage, on every Poll, for a group config
//     the cluster refused (see SetGroupConfig).
//   - kshare.ErrFatal for what the consumer cannot fix by itself
//     (authorization, an unknown broker error), kshare.ErrUnsupported
//     when the cluster does not serve share groups; such an error is
//     returned by every Poll from then on, and the consumer should be
//     closed.
//   - kshare.ErrClosed after Close, kshare.ErrUsage for a nil ctx.
func (c *Consumer) Poll(ctx context.Context) ([]*kgo.Record, error) {
	const op = "poll"
	if !c.made() {
		return nil, errNotMade(op)
	}
	if ctx == nil {
		return nil, errNilContext(op)
	}
	select {
	case <-c.closeCh: // first: after Close, whether or not ctx ended
		return nil, errClosed(op)
	default:
	}
	// Another Poll in progress is waited for within ctx: a Poll must
	// return when its own ctx ends.
	select {
	case c.pollSem <- struct{}{}:
	case <-ctx.Done():
		return nil, c.ctxEnded(op, ctx)
	case <-c.closeCh:
		return nil, errClosed(op)
	}
	defer func() { <-c.pollSem }()
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil, errClosed(op)
	}
	if c.stuck != nil {
		err := c.stuck
		c.mu.Unlock()
		return nil, err
	}
	switch c.cfg.mode {
	case Implicit:
		c.acceptLastPollLocked(nil)
	case Explicit:
		c.sendDecidedLocked(nil)
	}
	now := time.Now()
	c.held.sweep(now, func(tp kshare.TopicPartition, n int) {
		c.noteExpiredUnseenLocked(n, tp.Topic, tp.Partition, now)
	})
	if err := c.ensureLedgerLocked(ctx); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if c.closing {
		c.mu.Unlock()
		return nil, errClosed(op)
	}
	c.startPollingLocked()
	defer c.stopPolling()
	var roundWait time.Time // when this Poll began to wait for a round
	defer func() {
		if !roundWait.IsZero() {
			c.mu.Lock()
			c.metrics.LedgerPollWait += time.Since(roundWait)
			c.mu.Unlock()
		}
	}()
	for {
		var roundDone <-chan struct{}
		if c.ledger != nil {
			// Every record is resolved against the ledger, after its
			// acquisition, before the application sees it.
			if c.round == nil {
				if recs := c.takeReadyLocked(time.Now()); len(recs) > 0 {
					c.startRoundLocked(recs)
				}
			}
			if r := c.round; r != nil {
				select {
				case <-r.done:
					if !roundWait.IsZero() {
						c.metrics.LedgerPollWait += time.Since(roundWait)
						roundWait = time.Time{}
					}
					kept, err := c.endRoundLocked(r)
					if err != nil {
						c.mu.Unlock()
						return nil, err
					}
					if len(kept) > 0 {
						// Sessions woken by this Poll see that none waits:
						// they fetch ahead without long-polling, which
						// would hold up the RENEWs of the application's
						// commit behind a fetch waiting at its leader.
						c.polling = false
						c.startEagerRoundLocked()
						c.mu.Unlock()
						return kept, nil
					}
					// All were settled by the ledger: wait for more.
					c.polling = true
					for _, s := range c.sessOrder {
						if s.buffered == nil {
							s.poke()
						}
					}
					continue
				default:
					// No session long-polls for more meanwhile. A round
					// outlives a Poll whose ctx ends first (a release
					// would cost its records a delivery); the next Poll
					// waits for it.
					c.polling = false
					roundDone = r.done
					if roundWait.IsZero() {
						roundWait = time.Now()
					}
				}
			}
		} else if recs := c.takeReadyLocked(time.Now()); len(recs) > 0 {
			// Sessions woken to fetch again see that no Poll waits.
			c.polling = false
			c.mu.Unlock()
			return recs, nil
		}
		if c.stuck != nil {
			err := c.stuck
			c.mu.Unlock()
			return nil, err
		}
		if len(c.errs) > 0 && roundDone == nil { // a round's outcome comes first
			err := joinClassified(op, c.errs)
			c.errs = nil
			c.mu.Unlock()
			return nil, err
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, c.ctxEnded(op, ctx)
		case <-c.closeCh:
			return nil, errClosed(op)
		case <-c.ready:
		case <-roundDone:
		}
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return nil, errClosed(op)
		}
	}
}

// ctxEnded is Poll's error when ctx ends first: kshare.ErrAbortable
// wrapping ctx's error, and, while the member is not in the group and
// connection attempts keep failing, the connection error, so that a
// consumer that cannot reach the cluster does not just time out.
func (c *Consumer) ctxEnded(op string, ctx context.Context) error {
	err := ctx.Err()
	c.mu.Lock()
	joined := c.epoch != joinEpoch
	c.mu.Unlock()
	if !joined {
		err = c.dials.Explain(err)
	}
	return errs.Abortable(op, err)
}

// unreachableTimeout is how long a new consumer may fail to connect to
// any broker before Poll reports it: long enough for a cluster that is
// starting, short enough that mistyped seed brokers do not look like an
// idle topic.
var unreachableTimeout = 5 * time.Second

// checkReached reports to Poll, once, that no connection to a broker has
// succeeded since New (unreachableTimeout ago), with the last connection
// error. The consumer keeps trying.
func (c *Consumer) checkReached() {
	failing, _, connected := c.dials.State()
	if connected {
		return
	}
	cause := fmt.Errorf("no connection to the seed brokers %v has succeeded in %v; still trying", c.cfg.conn.Seeds, unreachableTimeout)
	if failing != nil {
		cause = fmt.Errorf("%w: %w", cause, failing)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.logger.Warn("share consumer cannot reach the cluster", "err", cause)
	c.errs = append(c.errs, errs.Abortable("poll", cause))
	c.signalReady()
}

// startPollingLocked notes that a Poll waits for records: sessions that
// hold back their next fetch until the application polls (a broker
// without RENEW, or no Poll for MaxPollInterval) fetch now.
func (c *Consumer) startPollingLocked() {
	c.inPoll = true
	c.lastPoll = time.Now()
	c.pollGen++
	c.releasedSincePoll = false
	if c.polling {
		return
	}
	c.polling = true
	for _, s := range c.sessOrder {
		if s.buffered == nil {
			s.poke()
		}
	}
}

// stopPolling notes that the Poll returned: the application works on what
// it got.
func (c *Consumer) stopPolling() {
	c.mu.Lock()
	c.polling, c.inPoll = false, false
	c.lastPoll = time.Now()
	c.mu.Unlock()
}

// takeReadyLocked takes up to MaxPollRecords of the sessions' buffered
// records, marks them delivered, and lets each session whose buffer it
// emptied fetch again. Sessions are visited from a rotating start so that
// none is always first. A buffered acquisition whose lock ran out is
// dropped and counted; one that would pass the limit is split, and its
// rest stays buffered.
func (c *Consumer) takeReadyLocked(now time.Time) []*kgo.Record {
	var out []*kgo.Record
	limit := int(c.cfg.maxRecords)
	n := len(c.sessOrder)
	for i := 0; i < n && len(out) < limit; i++ {
		s := c.sessOrder[(c.pollStart+i)%n]
		res := s.buffered
		if res == nil {
			continue
		}
		for len(res.groups) > 0 && len(out) < limit {
			g := &res.groups[0]
			a := g.acq
			if !a.usable(now) {
				freed := 0
				for _, r := range g.recs {
					if idx := int(r.Offset - a.first); a.states[idx] == stBuffered {
						a.set(idx, stFree)
						freed++
					}
				}
				if !a.dead {
					c.noteExpiredUnseenLocked(freed, a.tp.Topic, a.tp.Partition, now)
				}
				c.held.compact(a.tp)
				res.groups = res.groups[1:]
				continue
			}
			recs := g.recs
			if room := limit - len(out); len(recs) > room {
				rest := c.held.split(a, recs[room].Offset)
				g.acq, g.recs = rest, recs[room:]
				recs = recs[:room]
			} else {
				res.groups = res.groups[1:]
			}
			// With a claim ledger, the records are looked up before the
			// application gets them (ledgerRound).
			st := stDelivered
			if c.ledger != nil {
				st = stResolving
			}
			for _, r := range recs {
				idx := int(r.Offset - a.first)
				if a.states[idx] == stBuffered {
					a.states[idx] = st
					out = append(out, r)
					if st == stDelivered {
						c.countDeliveredLocked(a)
					}
				}
			}
			if st == stResolving {
				s.renewDueByLocked(a.deadline)
			} else {
				c.handOverLocked(a, now)
			}
			if c.cfg.mode == Implicit {
				c.lastPollAcqs = append(c.lastPollAcqs, a)
			}
		}
		if len(res.groups) == 0 {
			s.buffered = nil
			s.poke()
			if c.slow {
				c.passTurnLocked(s) // the next Poll asks the next leader
			}
		}
	}
	if n > 0 {
		c.pollStart = (c.pollStart + 1) % n
	}
	return out
}

// countDeliveredLocked counts one record of a that Poll returns.
func (c *Consumer) countDeliveredLocked(a *acquisition) {
	c.metrics.RecordsDelivered++
	if a.deliveries > 1 {
		c.metrics.Redelivered++
	}
}

// handOverLocked sees to the lock of a, whose records Poll returns now:
// records that waited for Poll until their lock partly ran get a whole
// lock from here (one RENEW); with RenewHeldLocks they are renewed from
// now on.
func (c *Consumer) handOverLocked(a *acquisition, now time.Time) {
	switch {
	case a.deadline.Sub(now) < a.lockDur*7/8:
		a.handover = true
		a.sess.renewRescanLocked()
		a.sess.poke()
	case c.cfg.renewHeld && c.cfg.mode == Transactional:
		a.sess.renewDueByLocked(a.deadline) // the application holds them now
	}
}

// acceptLastPollLocked accepts every record of the last Poll that is still
// delivered and whose lock stands, and queues the acknowledgements on the
// sessions. op, if set, learns the outcome.
func (c *Consumer) acceptLastPollLocked(op *ackOp) {
	now := time.Now()
	js := jobSet{op: op}
	for _, a := range c.lastPollAcqs {
		if !a.usable(now) {
			continue
		}
		js.add(a, a.take(func(idx int) (wire.AckType, bool) {
			return wire.AckAccept, a.states[idx] == stDelivered
		}))
		c.held.compact(a.tp)
	}
	clear(c.lastPollAcqs)
	c.lastPollAcqs = c.lastPollAcqs[:0]
	c.queueLocked(js)
}

// queueLocked hands each session its job and wakes it. Jobs of a session
// whose lock was lost fail at once.
func (c *Consumer) queueLocked(js jobSet) {
	if js.op != nil {
		js.op.remaining = len(js.jobs)
	}
	for s, j := range js.jobs {
		s.outbox = append(s.outbox, j)
		s.poke()
	}
}

// signalReady wakes a waiting Poll.
func (c *Consumer) signalReady() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// queueErrLocked keeps an error met in the background for Poll,
// classified as backgroundClass says: for the next Poll, or for every Poll
// from now on when the consumer cannot go on (ErrFatal, ErrUnsupported).
func (c *Consumer) queueErrLocked(err error) {
	const maxQueued = 16
	class := backgroundClass(err)
	cerr := errs.New(class, "poll", err)
	if class == kshare.ErrFatal || class == kshare.ErrUnsupported {
		c.stickLocked(cerr)
		return
	}
	if len(c.errs) < maxQueued {
		c.errs = append(c.errs, cerr)
	}
	c.signalReady()
}

// stickLocked makes err, classified, the answer of every Poll from now on:
// the consumer cannot go on (the cluster lacks share groups, refused the
// group configs, or refuses this client).
func (c *Consumer) stickLocked(err error) {
	if c.stuck == nil {
		c.stuck = err
		c.logger.Error("share consumer cannot go on; Poll reports it", "err", err)
	}
	c.signalReady()
}

// backgroundClass classifies an error the consumer met in the background:
// an authorization failure or anything the consumer does not know is
// fatal, a broker that lacks a version is unsupported, a missing topic is
// the application's to fix, and a retriable error passes.
func backgroundClass(err error) error {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return kshare.ErrFatal
	}
	switch ke.Code {
	case kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicID.Code, kerr.InvalidTopicException.Code:
		return kshare.ErrUsage
	case kerr.UnsupportedVersion.Code:
		return kshare.ErrUnsupported
	}
	if ke.Retriable {
		return kshare.ErrAbortable
	}
	return kshare.ErrFatal
}

// joinClassified returns the queued errors as one: the error itself when
// there is one, else joined under the gravest of their classes.
func joinClassified(op string, queued []error) error {
	if len(queued) == 1 {
		return queued[0]
	}
	class := kshare.ErrAbortable
	for _, c := range []error{kshare.ErrUsage, kshare.ErrUnsupported, kshare.ErrFatal} {
		for _, err := range queued {
			if errors.Is(err, c) {
				class = c
			}
		}
	}
	return errs.New(class, op, errors.Join(queued...))
}

// Close leaves the group cleanly, within ctx: in Implicit mode it accepts
// the records of the last Poll, in Explicit mode it sends what Ack marked,
// and in every mode it releases the records the application holds without
// a decision (in Transactional mode: records never handed to a
// transaction) and the fetched records Poll never returned. Records staged
// in a transaction are left alone, so close the consumer after the last
// transaction has ended; closing it earlier never breaks exactly-once: a
// transaction whose acknowledgements have not reached the leaders fails at
// commit (the member is gone, ErrAbortable) and its records go to the next
// member, and one whose acknowledgements are TX_PENDING ends as its
// producer decides. From the moment Close begins, every call fails with
// kshare.ErrClosed (staging too), and a transaction's outcome only makes
// the consumer forget its records. Then it closes each share session,
// leaves the group and closes the kgo client; if ctx ends first, it stops
// waiting for the final acknowledgements and says so.
//
// It returns nil, or a kshare.ErrAbortable error saying what did not take
// effect (acknowledgements the brokers did not apply, as an *AckError; or
// the leave): those records come back to the group when their locks or
// the member's session run out. The consumer is closed either way, with
// every goroutine ended. Calling Close again returns nil. A nil ctx is
// taken as context.Background().
func (c *Consumer) Close(ctx context.Context) error {
	if !c.made() {
		return errNotMade("close")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil
	}
	o := newAckOp(nil)
	js := jobSet{op: o}
	now := time.Now()
	if c.cfg.mode == Implicit {
		for _, a := range c.lastPollAcqs {
			if a.usable(now) {
				js.add(a, a.take(func(idx int) (wire.AckType, bool) {
					return wire.AckAccept, a.states[idx] == stDelivered
				}))
			}
		}
		c.lastPollAcqs = nil
	}
	for _, p := range c.held.parts {
		for _, a := range p.acqs {
			if !a.usable(now) {
				continue
			}
			js.add(a, a.take(func(idx int) (wire.AckType, bool) {
				switch a.states[idx] {
				case stDecided:
					return a.decisions[idx], true
				case stBuffered, stResolving:
					c.metrics.ReleasedUnseen++
					return wire.AckRelease, true
				case stDelivered:
					c.metrics.Released++
					return wire.AckRelease, true
				}
				return 0, false
			}))
		}
	}
	for _, s := range c.sessOrder {
		s.buffered = nil
	}
	clear(c.decided)
	c.queueLocked(js)
	for _, tm := range c.txnTimers {
		tm.Stop() // staged records are left alone
	}
	clear(c.txnTimers)
	c.reachCheck.Stop()
	c.closing = true
	close(c.closeCh)
	round := c.round
	if round != nil {
		round.cancel()
	}
	for _, s := range c.sessOrder {
		s.poke()
	}
	c.mu.Unlock()
	if len(js.jobs) == 0 {
		o.complete()
	}

	sessDone := make(chan struct{})
	go func() {
		c.sessWG.Wait()
		close(sessDone)
	}()
	select {
	case <-sessDone:
	case <-ctx.Done():
		c.bgCancel()
		<-sessDone
	}
	c.hbCancel()
	<-c.hbDone
	var failed []error
	select {
	case <-o.done:
		if err := o.result(); err != nil {
			failed = append(failed, err)
		}
	default:
		failed = append(failed, fmt.Errorf("final acknowledgements not confirmed: %w", context.Cause(ctx)))
	}
	if err := c.leave(ctx); err != nil {
		failed = append(failed, err)
	}
	c.bgCancel()
	<-c.startCheck.done
	c.cl.Close()
	if round != nil {
		<-round.exited
	}
	if c.ledgerCl != nil {
		c.ledgerCl.Close()
	}
	c.logger.Debug("share consumer closed")
	if len(failed) == 0 {
		return nil
	}
	return errs.Abortable("close", errors.Join(failed...))
}
