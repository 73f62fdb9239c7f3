package benthos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/producer"
)

// The output's own fields (seed_brokers, client_id, tls and sasl are
// shared with the input).
const (
	fTopic            = "topic"
	fKey              = "key"
	fPartitioner      = "partitioner"
	fPartition        = "partition"
	fMetadata         = "metadata"
	fTimestampMs      = "timestamp_ms"
	fCompression      = "compression"
	fAutoTopics       = "allow_auto_topic_creation"
	fMaxInFlight      = "max_in_flight"
	fCommitTimeout    = "commit_timeout"
	fOutTransactional = "transactional_id"
)

func outputSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Stable().
		Categories("Services").
		Summary("Writes each batch in one Kafka transaction that also commits the share-group acknowledgements of the `kshare_share` records the batch came from (KIP-1289): exactly-once share-group pipelines.").
		Description(`
Each batch is one transaction: the output begins it, produces every message,
adds the acknowledgements of the input records the messages came from (the
handles `+"`kshare_share`"+` puts in their context) and commits. The outputs and the
acknowledgements commit together or not at all: after a crash, the records of
an unfinished transaction come back to the group and are processed again, and
nothing of them was visible to `+"`read_committed`"+` readers.

A batch that fails (a record the brokers refuse, an acknowledgement whose lock
ran out) is aborted and nacked; the input then releases what is left, and the
records come back at once. A commit whose answer was lost is learned before the
output returns. Messages whose record was given back to the group before they
arrived (their lock ran out, or an earlier attempt of the same batch aborted)
are skipped: the record's redelivery writes them.

Messages that carry no acknowledgement (from another input, or created by a
processor) are written in the transaction all the same, and a warning says that
nothing of them is acknowledged.

Topic, key, partition and timestamp are interpolated per message; the
`+"`metadata`"+` filter says which metadata become record headers.`).
		Fields(clientFields()...).
		Fields(
			service.NewStringField(fOutTransactional).
				Description("The transactional id of the output's producer. Give each running instance its own, and keep it across restarts: the new instance's producer then aborts what the old one left open, and fences it. With `max_in_flight` above 1, the producers use this id followed by `-1`, `-2`, ...; keep `max_in_flight` across restarts too. A fenced producer is never used again; once every producer of the output is, the output refuses every batch, and a `kshare_share` input whose messages it wrote (and that no other `kshare_txn` output can write) ends."),
			service.NewInterpolatedStringField(fTopic).
				Description("The topic to write each message to.").
				LintRule(`root = if this.type() == "string" && this.trim() == "" { [ "topic: required, and must not be empty" ] }`),
			service.NewInterpolatedStringField(fKey).
				Description("The key of each record. Empty: no key.").
				Optional().Example("${! @kafka_key }"),
			service.NewStringEnumField(fPartitioner, "", "murmur2_hash", "round_robin", "least_backup", "manual").
				Description("How a record's partition is chosen. Empty: kgo's default (sticky uniform bytes for unkeyed records, murmur2 of the key otherwise). `murmur2_hash` is the Java client's partitioner; `manual` takes `partition`.").
				Default("").Advanced(),
			service.NewInterpolatedStringField(fPartition).
				Description("The partition of each record, with the `manual` partitioner.").
				Optional().Advanced(),
			service.NewMetadataFilterField(fMetadata).
				Description("Which metadata become record headers. Empty: none.").
				Optional(),
			service.NewInterpolatedStringField(fTimestampMs).
				Description("The timestamp of each record, in milliseconds since the epoch. Empty: the time of producing.").
				Optional().Advanced(),
			service.NewStringEnumField(fCompression, "", "none", "gzip", "snappy", "lz4", "zstd").
				Description("The batch compression codec. Empty: snappy.").
				Default("").Advanced(),
			service.NewBoolField(fAutoTopics).
				Description("Whether writing to a topic that does not exist asks the broker to create it.").
				Default(false),
			service.NewDurationField(fCommitTimeout).
				Description("The transaction timeout of the producer. It also bounds each batch: a transaction that has not committed by then is aborted, and an in-doubt commit is learned within it.").
				Default("30s"),
			ledgerTopicField(),
			service.NewOutputMaxInFlightField().Default(1),
			service.NewBatchPolicyField("batching"),
		)
}

// outputConfig is what outputSpec parses to (batching and max_in_flight
// are Benthos').
type outputConfig struct {
	client      clientConfig
	txnID       string
	topic       *service.InterpolatedString
	key         *service.InterpolatedString // nil: no key
	partitioner kgo.Partitioner             // nil: the producer's default
	manual      bool
	partition   *service.InterpolatedString
	metadata    *service.MetadataFilter // nil: no headers
	timestamp   *service.InterpolatedString
	compression []kgo.CompressionCodec
	autoTopics  bool
	timeout     time.Duration
	inFlight    int
	ledgerTopic string // "": KIP-1289
}

func parseOutputConfig(conf *service.ParsedConfig) (outputConfig, error) {
	var c outputConfig
	var err error
	if c.client, err = parseClientConfig(conf); err != nil {
		return c, err
	}
	if c.txnID, err = conf.FieldString(fOutTransactional); err != nil {
		return c, err
	}
	if c.txnID == "" {
		return c, fmt.Errorf("%s: required (one per running instance, kept across restarts)", fOutTransactional)
	}
	if c.topic, err = conf.FieldInterpolatedString(fTopic); err != nil {
		return c, err
	}
	if topic, static := c.topic.Static(); static && strings.TrimSpace(topic) == "" {
		return c, fmt.Errorf("%s: required, and must not be empty", fTopic)
	}
	if c.ledgerTopic, err = conf.FieldString(fLedgerTopic); err != nil {
		return c, err
	}
	if conf.Contains(fKey) {
		if c.key, err = conf.FieldInterpolatedString(fKey); err != nil {
			return c, err
		}
	}
	name, err := conf.FieldString(fPartitioner)
	if err != nil {
		return c, err
	}
	switch name {
	case "murmur2_hash":
		c.partitioner = kgo.StickyKeyPartitioner(nil)
	case "round_robin":
		c.partitioner = kgo.RoundRobinPartitioner()
	case "least_backup":
		c.partitioner = kgo.LeastBackupPartitioner()
	case "manual":
		c.partitioner, c.manual = kgo.ManualPartitioner(), true
	}
	if conf.Contains(fPartition) {
		if !c.manual {
			return c, fmt.Errorf("%s: set only with %s: manual", fPartition, fPartitioner)
		}
		if c.partition, err = conf.FieldInterpolatedString(fPartition); err != nil {
			return c, err
		}
	} else if c.manual {
		return c, fmt.Errorf("%s: manual needs %s", fPartitioner, fPartition)
	}
	if conf.Contains(fMetadata) {
		if c.metadata, err = conf.FieldMetadataFilter(fMetadata); err != nil {
			return c, err
		}
	}
	if conf.Contains(fTimestampMs) {
		if c.timestamp, err = conf.FieldInterpolatedString(fTimestampMs); err != nil {
			return c, err
		}
	}
	codec, err := conf.FieldString(fCompression)
	if err != nil {
		return c, err
	}
	switch codec {
	case "none":
		c.compression = []kgo.CompressionCodec{kgo.NoCompression()}
	case "gzip":
		c.compression = []kgo.CompressionCodec{kgo.GzipCompression()}
	case "snappy":
		c.compression = []kgo.CompressionCodec{kgo.SnappyCompression()}
	case "lz4":
		c.compression = []kgo.CompressionCodec{kgo.Lz4Compression()}
	case "zstd":
		c.compression = []kgo.CompressionCodec{kgo.ZstdCompression()}
	}
	if c.autoTopics, err = conf.FieldBool(fAutoTopics); err != nil {
		return c, err
	}
	if c.timeout, err = durationField(conf, fCommitTimeout); err != nil {
		return c, err
	}
	if c.inFlight, err = conf.FieldMaxInFlight(); err != nil {
		return c, err
	}
	if c.inFlight < 1 {
		return c, fmt.Errorf("%s: must be at least 1, got %d", fMaxInFlight, c.inFlight)
	}
	return c, nil
}

// txnOutput is the kshare_txn output: a pool of max_in_flight
// transactional producers, each running one transaction at a time.
type txnOutput struct {
	cfg outputConfig
	log *service.Logger
	res *service.Resources

	mu    sync.Mutex
	pool  chan *txnProducer // the idle producers that can write; nil until Connect
	all   []*txnProducer
	close bool
	// live counts the producers that can still write; stopped is closed
	// when the last of them stopped (stopErr says why), and from then on
	// every batch is refused.
	live    int
	stopped chan struct{}
	stopErr error
	// ledgers are those of the inputs whose messages the output took:
	// each is told when the output stops.
	ledgers map[*ledger]struct{}

	warnedOrphan atomic.Bool
	metrics      *outputMetrics
}

// txnProducer is one producer of the pool and what it must remember
// between batches: the handles of a transaction whose commit is in
// doubt, which the next batch learns first.
type txnProducer struct {
	id     string
	prod   *producer.Producer
	doubt  []*pendingAck
	broken error // a fatal error: the producer can do nothing more, and leaves the pool
}

func newTxnOutput(conf *service.ParsedConfig, mgr *service.Resources) (*txnOutput, error) {
	cfg, err := parseOutputConfig(conf)
	if err != nil {
		return nil, err
	}
	o := &txnOutput{
		cfg: cfg, log: mgr.Logger(), res: mgr, metrics: newOutputMetrics(mgr),
		stopped: make(chan struct{}), ledgers: make(map[*ledger]struct{}),
	}
	created(o)
	return o, nil
}

// Connect creates the producers and initializes their transactions, which
// fences older instances with the same ids and aborts what they left
// open. Producers that failed are retried by the next Connect.
func (o *txnOutput) Connect(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.close {
		return service.ErrEndOfInput
	}
	if o.pool != nil {
		return nil
	}
	var made []*txnProducer
	for i := range o.cfg.inFlight {
		id := o.cfg.txnID
		if i > 0 {
			id += "-" + strconv.Itoa(i)
		}
		p, err := o.newProducer(ctx, id)
		if err != nil {
			for _, m := range made {
				closeQuietly(m.prod.Close)
			}
			return err
		}
		made = append(made, p)
	}
	o.pool = make(chan *txnProducer, len(made))
	for _, p := range made {
		o.pool <- p
	}
	o.all = made
	o.live = len(made)
	return nil
}

func (o *txnOutput) newProducer(ctx context.Context, id string) (*txnProducer, error) {
	c := o.cfg
	opts := []producer.Opt{
		producer.SeedBrokers(c.client.seeds...),
		producer.TransactionalID(id),
		producer.TransactionTimeout(c.timeout),
		producer.KgoOpts(c.client.kgoOpts()...),
		producer.Logger(slogFor(o.log)),
		producer.ShareLedger(c.ledgerTopic),
	}
	if c.partitioner != nil {
		opts = append(opts, producer.Partitioner(c.partitioner))
	}
	if c.compression != nil {
		opts = append(opts, producer.Compression(c.compression...))
	}
	if c.autoTopics {
		opts = append(opts, producer.AllowAutoTopicCreation())
	}
	if c.client.tls != nil {
		opts = append(opts, producer.DialTLSConfig(c.client.tls))
	}
	if len(c.client.sasl) > 0 {
		opts = append(opts, producer.SASL(c.client.sasl...))
	}
	prod, err := producer.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("kshare_txn: producer %s: %w", id, err)
	}
	initCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := prod.InitTransactions(initCtx); err != nil {
		closeQuietly(prod.Close)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer from the cluster (%s: %v) within %v: %w", fSeedBrokers, c.client.seeds, c.timeout, err)
		}
		return nil, fmt.Errorf("kshare_txn: producer %s: init transactions: %w", id, explain(err))
	}
	return &txnProducer{id: id, prod: prod}, nil
}

// WriteBatch writes b in one transaction with the acknowledgements of the
// records its messages came from. It returns nil once the transaction
// committed, and an error (a nack) when it aborted: nothing of it is
// visible and its records come back to the group.
func (o *txnOutput) WriteBatch(ctx context.Context, b service.MessageBatch) error {
	o.mu.Lock()
	pool := o.pool
	o.mu.Unlock()
	if pool == nil {
		return service.ErrNotConnected
	}
	var p *txnProducer
	select {
	case p = <-pool:
	case <-o.stopped:
		return o.refuse(b)
	case <-ctx.Done():
		return ctx.Err()
	}
	err := o.write(ctx, p, b)
	if p.broken != nil {
		o.retire(p)
	} else {
		pool <- p
	}
	return err
}

// retire takes p, which failed for good, out of the output for good: it
// is never used (nor retried) again. When it was the last producer that
// could write, the output has stopped: it says so once, refuses every
// later batch at once (a nack, which gives their records back), and tells
// the inputs whose messages it took, each of which ends once no output
// that writes its messages can.
func (o *txnOutput) retire(p *txnProducer) {
	o.mu.Lock()
	o.live--
	left, total := o.live, len(o.all)
	var ledgers []*ledger
	if left == 0 {
		o.stopErr = p.broken
		close(o.stopped)
		for l := range o.ledgers {
			ledgers = append(ledgers, l)
		}
	}
	o.mu.Unlock()
	var msg string
	if left == 0 {
		msg = fmt.Sprintf("kshare_txn: the output writes nothing more and refuses every batch from now on: %v", p.broken)
	} else {
		msg = fmt.Sprintf("kshare_txn: %v; %d of %d producers left", p.broken, left, total)
	}
	if isFenced(p.broken) {
		o.log.Warn(msg)
	} else {
		o.log.Error(msg)
	}
	for _, l := range ledgers {
		l.writerStopped(o, p.broken)
	}
}

// refuse fails b because the output has stopped, and tells the inputs of
// its messages. A batch whose every message belongs to a delivery that
// has ended (the input gave its records back) is skipped instead, as
// write skips such messages: their records' redeliveries write them.
func (o *txnOutput) refuse(b service.MessageBatch) error {
	o.mu.Lock()
	cause := o.stopErr
	o.mu.Unlock()
	seen := make(map[*ledger]bool)
	live := 0
	for _, m := range b {
		h := ackFrom(m.Context())
		if h == nil {
			live++
			continue
		}
		if !seen[h.ledger] {
			seen[h.ledger] = true
			o.noteLedger(h.ledger)
		}
		if h.ledger.state(h) != released {
			live++
		}
	}
	if live == 0 {
		o.metrics.skipped.add(len(b))
		return nil
	}
	return fmt.Errorf("kshare_txn: the output has stopped, and refuses the batch: %w", cause)
}

// noteLedger registers the output with l, the ledger of an input whose
// messages it takes; if the output has stopped already, l hears it at
// once.
func (o *txnOutput) noteLedger(l *ledger) {
	o.mu.Lock()
	_, known := o.ledgers[l]
	o.ledgers[l] = struct{}{}
	cause := o.stopErr
	o.mu.Unlock()
	if !known {
		l.writtenBy(o)
	}
	if cause != nil {
		l.writerStopped(o, cause)
	}
}

// closing reports whether Close has begun.
func (o *txnOutput) closing() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.close
}

// plan is what one batch writes and acknowledges.
type plan struct {
	records []*kgo.Record
	claimed []*pendingAck
	// byLedger groups the claimed handles by the input they came from:
	// each input's consumer sends its own acknowledgements.
	byLedger map[*ledger][]*pendingAck
}

func (o *txnOutput) write(ctx context.Context, p *txnProducer, b service.MessageBatch) error {
	// The transaction runs to its end even when ctx ends (a commit cut
	// short might have committed without the output knowing), within the
	// transaction timeout.
	txnCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.cfg.timeout)
	defer cancel()
	if len(p.doubt) > 0 {
		if err := o.learn(txnCtx, p); err != nil {
			return err
		}
	}
	pl, err := o.plan(b, p)
	if err != nil {
		return err
	}
	if len(pl.records) == 0 && len(pl.claimed) == 0 {
		return nil // every message was skipped
	}
	if err := o.begin(txnCtx, p); err != nil {
		o.ledgerSettle(pl, p, released)
		return err
	}
	for _, r := range pl.records {
		// A record that fails dooms the commit (ErrAbortable).
		p.prod.Produce(txnCtx, r, nil)
	}
	for l, hs := range pl.byLedger {
		if err == nil {
			cons := l.consumer()
			err = p.prod.SendShareAcksToTransaction(txnCtx, cons.Acks(records(hs), kshare.AckAccept), cons.GroupMetadata())
		}
	}
	if err == nil {
		err = beforeCommit(txnCtx)
	}
	if err == nil {
		err = p.prod.CommitTransaction(txnCtx)
	}
	switch {
	case err == nil:
		o.ledgerSettle(pl, p, committed)
		o.metrics.committed.add(1)
		o.metrics.acked.add(len(pl.claimed))
		return nil
	case errors.Is(err, kshare.ErrInDoubt):
		// The commit's answer was lost. Learn the outcome now, within
		// another timeout; the next batch learns it if this one cannot.
		o.metrics.inDoubt.add(1)
		o.ledgerSettle(pl, p, inDoubt)
		p.doubt = pl.claimed
		learnCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.cfg.timeout)
		defer cancel()
		return o.learn(learnCtx, p)
	case errors.Is(err, kshare.ErrFatal), errors.Is(err, kshare.ErrUnsupported), errors.Is(err, kshare.ErrClosed) && o.closing():
		// The producer can do nothing more; Close ends what it can.
		// (kshare.ErrClosed from a producer that is not closing is
		// an input's consumer that closed: that transaction aborts,
		// and the producer goes on.)
		// Nothing committed unless a commit was sent, and then the
		// acknowledgements are in the brokers' hands: releasing the
		// handles only stops this process from writing more of them.
		o.ledgerSettle(pl, p, released)
		return o.stop(p, err)
	default:
		// kshare.ErrAbortable, or a refused acknowledgement
		// (shareconsumer.ErrNotHeld is kshare.ErrUsage): nothing of the
		// transaction commits; abort it, and the records come back.
		o.metrics.aborted.add(1)
		o.ledgerSettle(pl, p, released)
		if aerr := p.prod.AbortTransaction(txnCtx); aerr != nil && !errors.Is(aerr, kshare.ErrAbortable) && !errors.Is(aerr, kshare.ErrInDoubt) {
			return o.stop(p, fmt.Errorf("abort after %v: %w", err, aerr))
		}
		return fmt.Errorf("kshare_txn: transaction aborted, its records come back to the group: %w", err)
	}
}

// begin begins a transaction on p, first ending one that an earlier batch
// could not abort (its context ended).
func (o *txnOutput) begin(ctx context.Context, p *txnProducer) error {
	err := p.prod.BeginTransaction()
	if errors.Is(err, kshare.ErrAbortable) {
		if aerr := p.prod.AbortTransaction(ctx); aerr != nil {
			return fmt.Errorf("kshare_txn: aborting the transaction an earlier batch left: %w", aerr)
		}
		err = p.prod.BeginTransaction()
	}
	if err != nil {
		return o.stop(p, fmt.Errorf("begin transaction: %w", err))
	}
	return nil
}

// learn learns the outcome of p's in-doubt commit, within ctx, and
// settles its handles. It returns nil if the commit had committed.
func (o *txnOutput) learn(ctx context.Context, p *txnProducer) error {
	for {
		aerr := p.prod.AbortTransaction(ctx)
		switch {
		case errors.Is(aerr, kshare.ErrCommitted):
			o.metrics.committed.add(1)
			o.metrics.acked.add(len(p.doubt))
			p.settle(committed)
			return nil
		case aerr == nil:
			p.settle(released)
			o.metrics.aborted.add(1)
			return errors.New("kshare_txn: the in-doubt commit had not committed; its records come back to the group")
		case errors.Is(aerr, kshare.ErrInDoubt), errors.Is(aerr, kshare.ErrAbortable):
			if ctx.Err() != nil {
				return fmt.Errorf("kshare_txn: outcome of a commit still unknown, learned by the next batch: %w", aerr)
			}
			time.Sleep(100 * time.Millisecond)
		default:
			p.settle(released)
			return o.stop(p, fmt.Errorf("learning the outcome of an in-doubt commit: %w", aerr))
		}
	}
}

// settle settles the handles of p's in-doubt commit.
func (p *txnProducer) settle(st state) {
	byLedger := make(map[*ledger][]*pendingAck)
	for _, h := range p.doubt {
		byLedger[h.ledger] = append(byLedger[h.ledger], h)
	}
	for l, hs := range byLedger {
		l.settle(hs, p, st)
	}
	p.doubt = nil
}

// stop returns the error of a batch that failed with err on p, and marks
// p broken if err is fatal to it (WriteBatch then retires it). A fatal
// error means another instance with the same transactional id took over,
// or the cluster refuses the producer.
func (o *txnOutput) stop(p *txnProducer, err error) error {
	if errors.Is(err, kshare.ErrFatal) || errors.Is(err, kshare.ErrUnsupported) || errors.Is(err, kshare.ErrClosed) && o.closing() {
		p.broken = fmt.Errorf("producer %s %s: %w", p.id, fatalWhy(err), err)
		return fmt.Errorf("kshare_txn: %w", p.broken)
	}
	return fmt.Errorf("kshare_txn: %w", err)
}

func (o *txnOutput) ledgerSettle(pl *plan, p *txnProducer, st state) {
	for l, hs := range pl.byLedger {
		l.settle(hs, p, st)
	}
}

// plan builds the records of b and claims the handles of the messages.
// Messages of a record whose delivery is over are skipped. A message of a
// record whose acknowledgement another transaction carries is written
// without it, and counted: that record's messages did not reach the
// output in one batch, which exactly-once needs.
func (o *txnOutput) plan(b service.MessageBatch, p *txnProducer) (*plan, error) {
	pl := &plan{byLedger: make(map[*ledger][]*pendingAck)}
	byLedger := make(map[*ledger][]*pendingAck)
	seen := make(map[*pendingAck]bool)
	owner := make([]*pendingAck, len(b))
	for i, m := range b {
		h := ackFrom(m.Context())
		owner[i] = h
		if h == nil {
			o.metrics.orphans.add(1)
			if o.warnedOrphan.CompareAndSwap(false, true) {
				o.logOrphan()
			}
			continue
		}
		if !seen[h] {
			seen[h] = true
			byLedger[h.ledger] = append(byLedger[h.ledger], h)
		}
	}
	lost := make(map[*pendingAck]state)
	for l, hs := range byLedger {
		o.noteLedger(l)
		got, not := l.claim(hs, p)
		if len(got) > 0 {
			pl.byLedger[l] = got
			pl.claimed = append(pl.claimed, got...)
		}
		for h, st := range not {
			lost[h] = st
		}
	}
	for i := range b {
		if h := owner[i]; h != nil {
			switch st, ok := lost[h]; {
			case !ok:
			case st == released:
				o.metrics.skipped.add(1)
				continue
			default:
				o.metrics.uncovered.add(1)
				o.log.Errorf("kshare_txn: a message of %s/%d@%d arrived after the record's acknowledgement was %s by another transaction: it is written without it (exactly-once needs every message of a record in one batch of one kshare_txn output)", h.rec.Topic, h.rec.Partition, h.rec.Offset, st)
			}
		}
		r, err := o.record(b, i)
		if err != nil {
			o.ledgerSettle(pl, p, released)
			return nil, fmt.Errorf("kshare_txn: message %d: %w", i, err)
		}
		pl.records = append(pl.records, r)
	}
	return pl, nil
}

// logOrphan says, once, that messages without an acknowledgement are
// written. In a stream without a kshare_share input that is the intended
// use (a producer of transactions, like examples/seed.yaml): INFO. In a
// stream with one, a processor made the message and its record's
// acknowledgement is not in this transaction: WARN.
func (o *txnOutput) logOrphan() {
	if _, withInput := o.res.GetGeneric(shareInputKey{}); withInput {
		o.log.Warn("kshare_txn: a message carries no kshare_share acknowledgement (a processor made it): it is written, and no input record is acknowledged with it")
		return
	}
	o.log.Info("kshare_txn: the stream has no kshare_share input: each batch is written in a transaction of its own, and no input record is acknowledged with it")
}

// record builds the record of message i of b.
func (o *txnOutput) record(b service.MessageBatch, i int) (*kgo.Record, error) {
	c := o.cfg
	value, err := b[i].AsBytes()
	if err != nil {
		return nil, err
	}
	r := &kgo.Record{Value: value}
	if r.Topic, err = b.TryInterpolatedString(i, c.topic); err != nil {
		return nil, fmt.Errorf("topic: %w", err)
	}
	if r.Topic == "" {
		return nil, errors.New("topic: interpolated to an empty string")
	}
	if c.key != nil {
		if r.Key, err = b.TryInterpolatedBytes(i, c.key); err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
	}
	if c.partition != nil {
		s, err := b.TryInterpolatedString(i, c.partition)
		if err != nil {
			return nil, fmt.Errorf("partition: %w", err)
		}
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("partition: %q is not a partition number", s)
		}
		r.Partition = int32(n)
	}
	if c.timestamp != nil {
		s, err := b.TryInterpolatedString(i, c.timestamp)
		if err != nil {
			return nil, fmt.Errorf("timestamp_ms: %w", err)
		}
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("timestamp_ms: %q is not a number of milliseconds", s)
		}
		r.Timestamp = time.UnixMilli(ms)
	}
	if c.metadata != nil {
		_ = c.metadata.Walk(b[i], func(k, v string) error {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
			return nil
		})
	}
	return r, nil
}

// Close closes every producer within ctx; each aborts a transaction left
// open, or learns that an in-doubt commit had committed (Close's
// kshare.ErrCommitted, which settles that commit's handles as committed
// and is no failure).
func (o *txnOutput) Close(ctx context.Context) error {
	// Benthos may give no deadline; a cluster that is gone must not hold
	// the shutdown.
	ctx, cancel := context.WithTimeout(ctx, closeTimeout)
	defer cancel()
	o.mu.Lock()
	o.close = true
	all := o.all
	o.all = nil
	o.mu.Unlock()
	var errs []error
	for _, p := range all {
		switch err := p.prod.Close(ctx); {
		case errors.Is(err, kshare.ErrCommitted):
			// Close learned that an in-doubt commit had committed: its
			// handles are committed, not released. Not a failure.
			o.metrics.committed.add(1)
			o.metrics.acked.add(len(p.doubt))
			p.settle(committed)
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("producer %s: %w", p.id, err))
		}
		p.settle(released)
	}
	if len(errs) > 0 {
		return fmt.Errorf("kshare_txn: close: %w", errors.Join(errs...))
	}
	return nil
}

// beforeCommitHook is where tests hold a transaction open or kill the
// process in the middle of one; unset in a real run. It is atomic because
// a test swaps it while the goroutines of a pipeline it abandoned (a
// simulated kill) may still be committing.
var beforeCommitHook atomic.Pointer[func(ctx context.Context) error]

func beforeCommit(ctx context.Context) error {
	if h := beforeCommitHook.Load(); h != nil {
		return (*h)(ctx)
	}
	return nil
}
